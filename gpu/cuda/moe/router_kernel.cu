// The mixture-of-experts router on the device (moe_kernels.hpp): gpu/model/moe_router's greedy
// and group-limited greedy top-k, one warp per token; and, for one token, the router GEMV with the
// routing (either top-k) in one launch, with or without the post-attention norm before it.
#include <cmath>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/cuda/linear/gemv_common.cuh"
#include "gpu/cuda/moe/moe_kernels.hpp"
#include "gpu/cuda/ops/rmsnorm_row.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace dev;

constexpr int kWarps = 4;

/// Whether (va, ia) ranks before (vb, ib): the higher score, the lower index on a tie.
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

/// The warp-wide arg-max of v[0..n) under ranks_before (lane-strided reads); every lane gets it.
__device__ __forceinline__ void warp_arg_max(const float* v, int n, float& bv, int& bi) {
  bv = -INFINITY;
  bi = n;
  for (int e = threadIdx.x & 31; e < n; e += 32)
    if (ranks_before(v[e], e, bv, bi)) bv = v[e], bi = e;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ranks_before(ov, oi, bv, bi)) bv = ov, bi = oi;
  }
}

/// Group-limited greedy's mask: the topk_groups groups with the best top expert (ties: the lower
/// group) keep their experts' scores; every other expert's score becomes -inf, so the top-k
/// rounds choose among the kept groups only. `group` is the warp's [num_groups] scratch.
__device__ void mask_groups(const moe_route_args& a, float* scores, float* group) {
  const int G = a.num_groups, per_group = a.num_experts / G;
  for (int g = threadIdx.x & 31; g < G; g += 32) {
    float best = -INFINITY;
    for (int e = g * per_group; e < (g + 1) * per_group; ++e) best = fmaxf(best, scores[e]);
    group[g] = best;
  }
  __syncwarp();
  // topk_groups rounds of the arg-max over the groups; a kept group's score becomes -inf after
  // its round (group scores are finite, so -inf marks exactly the kept groups afterwards).
  for (int j = 0; j < a.topk_groups; ++j) {
    float bv;
    int bi;
    warp_arg_max(group, G, bv, bi);
    __syncwarp();
    if ((threadIdx.x & 31) == 0) group[bi] = -INFINITY;
    __syncwarp();
  }
  for (int e = threadIdx.x & 31; e < a.num_experts; e += 32)
    if (group[e / per_group] != -INFINITY) scores[e] = -INFINITY;
  __syncwarp();
}

/// Floats of one warp's routing scratch: the experts' scores, then the groups' (route_token).
__host__ __device__ inline int route_scratch_floats(const moe_route_args& a) { return a.num_experts + a.num_groups; }

/// Routes token t with one warp (lane = its lane): scores into `scores` (route_scratch_floats:
/// num_experts, then num_groups for group-limited greedy's mask), then k rounds of a warp-wide
/// arg-max. Logits are read through L2 (__ldcg): in the fused router another block has just
/// written them.
__device__ void route_token(const moe_route_args& a, int t, float* scores, int lane) {
  const int E = a.num_experts, K = a.top_k;
  const float* logits = a.logits + size_t(t) * E;
  if (a.sigmoid) {
    for (int e = lane; e < E; e += 32) scores[e] = 1.0f / (1.0f + expf(-__ldcg(logits + e)));
  } else {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, __ldcg(logits + e));
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) {
      const float x = expf(__ldcg(logits + e) - mx);
      scores[e] = x;
      sum += x;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int e = lane; e < E; e += 32) scores[e] *= inv;
  }
  __syncwarp();
  if (a.num_groups > 1) mask_groups(a, scores, scores + E);
  // k rounds of a warp-wide arg-max; a chosen expert's score becomes -inf (scores are >= 0, and
  // the group limits leave at least k experts finite).
  float chosen_w = 0.0f, sum = 0.0f;
  int chosen_e = 0;
  for (int j = 0; j < K; ++j) {
    float bv;
    int bi;
    warp_arg_max(scores, E, bv, bi);
    if (lane == j) chosen_w = bv, chosen_e = bi;
    sum += bv;  // in slot order, as the CPU router sums them
    __syncwarp();
    if (lane == 0) scores[bi] = -INFINITY;
    __syncwarp();
  }
  if (lane < K) {
    float w = chosen_w;
    if (a.renormalize) w /= sum;
    a.experts[size_t(t) * K + lane] = chosen_e;
    a.weights[size_t(t) * K + lane] = w * a.scaling;
    if (a.counts && (!a.slots || a.slots[t] >= 0)) atomicAdd(a.counts + chosen_e, 1u);
  }
}

/// Grid ceil(n / kWarps) of kWarps warps; dynamic shared memory kWarps * route_scratch_floats.
__global__ void __launch_bounds__(kWarps * 32) route_kernel(moe_route_args a) {
  extern __shared__ float scores_all[];
  pdl_begin();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.x * kWarps + warp;
  if (t >= a.n) return;
  route_token(a, t, scores_all + size_t(warp) * route_scratch_floats(a), lane);
}

constexpr int kGemvRows = 2;  ///< router rows a block: 64 blocks at 128 experts

/// Grid ceil(E / kGemvRows) of gemv::kThreads; dynamic shared memory route_scratch_floats. Each
/// block takes kGemvRows logits with the dense GEMV's main loop (gemv_common.cuh: the same
/// numbers as gemv(), weights streaming before the previous kernel ends); the last block to
/// finish, told by the counter, routes the token and sets the counter back to 0.
template <class T>
__global__ void __launch_bounds__(gemv::kThreads) route_gemv_kernel(moe_router_gemv_args g, moe_route_args a) {
  extern __shared__ float scores[];
  __shared__ gemv::partials<1, kGemvRows> red;
  const int row0 = blockIdx.x * kGemvRows, E = a.num_experts;
  const T* w = static_cast<const T*>(g.w);
  const uint4* wp[kGemvRows];
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r)
    wp[r] = reinterpret_cast<const uint4*>(w + size_t(min(row0 + r, E - 1)) * g.hidden);
  gemv::accumulate<T, 1, kGemvRows>(static_cast<const T*>(g.x), 1, g.hidden, wp, red);
  if (threadIdx.x < kGemvRows && row0 + int(threadIdx.x) < E) g.logits[row0 + threadIdx.x] = red.total(threadIdx.x, 0);
  if (!counted_last(g.counter, int(gridDim.x))) return;  // the last block to finish routes
  if (threadIdx.x < 32) route_token(a, 0, scores, threadIdx.x);
}

constexpr int kNormThreads = 1024;  ///< add_rmsnorm's block for one row of hidden >= 1024
constexpr int kNormChunks = moe_norm_route_max_hidden / 8 / gemv::kThreads;  ///< router chunks a thread
static_assert(moe_norm_route_max_experts * gemv::kThreads == kNormThreads, "one 128-thread GEMV group an expert");

/// One block of kNormThreads: the token's add_rmsnorm (rmsnorm_row.cuh, the bits add_rmsnorm
/// gives at one row), its row written to n.out and kept in shared memory; then each expert's
/// logit by a group of gemv::kThreads threads in gemv::accumulate's order (thread t of a group
/// takes chunks t, t + 128, ... with its products in element order, then warp sums added in warp
/// order: the bits route_gemv_kernel gives); then route_token. The router's weights are loaded
/// before waiting for the previous kernel. Dynamic shared memory: route_scratch_floats.
template <class T>
__global__ void __launch_bounds__(kNormThreads, 1)
    norm_route_gemv_kernel(moe_norm_args n, moe_router_gemv_args g, moe_route_args a) {
  extern __shared__ float scores[];
  __shared__ float scratch[32];
  __shared__ float part[moe_norm_route_max_experts][gemv::kWarps];
  __shared__ __align__(16) T row[moe_norm_route_max_hidden];
  const int t = threadIdx.x % gemv::kThreads, e = threadIdx.x / gemv::kThreads;
  const int chunks = g.hidden / 8, E = a.num_experts;
  const uint4* w = reinterpret_cast<const uint4*>(static_cast<const T*>(g.w) + size_t(min(e, E - 1)) * g.hidden);
  uint4 wv[kNormChunks];
#pragma unroll
  for (int i = 0; i < kNormChunks; ++i) {
    const int c = t + i * gemv::kThreads;
    wv[i] = e < E && c < chunks ? gemv::load_stream(w + c) : make_uint4(0, 0, 0, 0);
  }
  pdl_begin();
  T* out = static_cast<T*>(n.out);
  add_rmsnorm_row<T>(n.residual, n.delta, n.bias, n.weight, n.eps, g.hidden, scratch, [&](int k, T v) {
    out[k] = v;
    row[k] = v;
  });
  __syncthreads();
  const uint4* x = reinterpret_cast<const uint4*>(row);
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormChunks; ++i) {
    const int c = t + i * gemv::kThreads;
    if (c >= chunks) break;
    float wf[8], xf[8];
    gemv::unpack8<T>(wv[i], wf);
    gemv::unpack8<T>(x[c], xf);
    acc = gemv::dot_load<8, false>(wf, xf, 1.0f, acc);
  }
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0 && e < E) part[e][t >> 5] = acc;
  __syncthreads();
  if (int(threadIdx.x) < E) {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < gemv::kWarps; ++q) s += part[threadIdx.x][q];
    g.logits[threadIdx.x] = s;
  }
  __syncthreads();
  if (threadIdx.x < 32) route_token(a, 0, scores, threadIdx.x);
}

/// Whether moe_route and moe_route_gemv take `a`: top_k in [1, moe_max_top_k] and at most the
/// experts, at most moe_max_experts, and group limits that leave at least top_k experts.
bool route_args_valid(const moe_route_args& a) {
  return a.top_k >= 1 && a.top_k <= moe_max_top_k && a.top_k <= a.num_experts && a.num_experts <= moe_max_experts &&
         a.num_groups >= 1 && a.num_experts % a.num_groups == 0 && a.topk_groups >= 1 &&
         a.topk_groups <= a.num_groups && a.top_k <= a.topk_groups * (a.num_experts / a.num_groups);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

int moe_route(const moe_route_args& a, cudaStream_t s) {
  if (a.n == 0) return 0;
  if (!route_args_valid(a)) return int(cudaErrorInvalidValue);
  const size_t smem = size_t(kWarps) * route_scratch_floats(a) * sizeof(float);
  return int(launch_pdl_smem(route_kernel, dim3((a.n + kWarps - 1) / kWarps), dim3(kWarps * 32), smem, s, a));
}

int moe_route_gemv(act_dtype dt, const moe_router_gemv_args& g, const moe_route_args& a, cudaStream_t s) {
  if (a.n != 1 || !route_args_valid(a) || g.hidden % 8 != 0 || !aligned16(g.x) || !aligned16(g.w))
    return int(cudaErrorInvalidValue);
  moe_route_args ra = a;
  ra.logits = g.logits;
  const size_t smem = size_t(route_scratch_floats(a)) * sizeof(float);
  const dim3 grid((a.num_experts + kGemvRows - 1) / kGemvRows);
  cudaError_t e = cudaSuccess;
  AS_DISPATCH_ACT(dt, e = launch_pdl_smem(route_gemv_kernel<T>, grid, dim3(gemv::kThreads), smem, s, g, ra));
  return int(e);
}

bool moe_norm_route_supported(int hidden, int num_experts) {
  return hidden % 8 == 0 && hidden >= kNormThreads && hidden <= moe_norm_route_max_hidden && num_experts >= 1 &&
         num_experts <= moe_norm_route_max_experts;
}

int moe_norm_route_gemv(act_dtype dt, const moe_norm_args& n, const moe_router_gemv_args& g, const moe_route_args& a,
                        cudaStream_t s) {
  if (a.n != 1 || !route_args_valid(a) || !moe_norm_route_supported(g.hidden, a.num_experts) || !aligned16(g.w) ||
      !aligned16(n.out))
    return int(cudaErrorInvalidValue);
  moe_route_args ra = a;
  ra.logits = g.logits;
  const size_t smem = size_t(route_scratch_floats(a)) * sizeof(float);
  cudaError_t e = cudaSuccess;
  AS_DISPATCH_ACT(dt, e = launch_pdl_smem(norm_route_gemv_kernel<T>, dim3(1), dim3(kNormThreads), smem, s, n, g, ra));
  return int(e);
}

}  // namespace actorserve::gpu::cuda
