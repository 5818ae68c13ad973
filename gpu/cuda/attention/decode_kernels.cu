// Decode kernels of the two attention backends, both on tensor cores (mma.sync m16n8k16, fp32
// accumulation) with the query heads of one GQA group packed into the rows of one 16-row tile,
// so each KV head is read once for all of its query heads:
//  - flash-decoding: the CTA streams its KV range in 64-token tiles through a 3-stage cp.async
//    pipeline; each of the 4 warps takes 16 keys of every tile.
//  - vLLM-style: each warp walks its own 16-token blocks (u = warp, warp + 4, ...) with a private
//    3-stage cp.async pipeline and no CTA barrier in the loop (vLLM's warp-per-block walk).
// Both end with a merge of the 4 warps' (max, sum, output) and either write the output or a
// normalised partial plus its log-sum-exp; the CTA finishing the last piece of a split
// (sequence, KV head) merges its pieces (decode_common.cuh), unless the backend runs the
// separate merge kernel (combine_kernel.cu).
// Programmatic dependent launch: a decode kernel may start while the step's rope_kv_write still
// runs; it reads its work item and block table and issues the copies of every leading K/V tile
// older than the newest token before it waits for that kernel, then reads Q.
#include <cmath>
#include <type_traits>

#include "gpu/cuda/attention/decode_common.cuh"
#include "gpu/cuda/kernel_util.cuh"

namespace actorserve::gpu::cuda {
namespace {

using namespace attn_dev;

constexpr int kThreads = 128, kWarps = 4;

template <int D, int kSt = fd_stages>
constexpr int fd_smem_bytes() { return kSt * 2 * fd_kv_tile * D * 2 + 16 * D * 2; }

/// Stages of the deep-pipeline variant (decode variants 5 and 6: one CTA per SM).
constexpr int kDeepStages = 6;

/// Shared-memory floats the merge of split pieces may use for their lse values.
constexpr int merge_cap(int smem_bytes) { return smem_bytes / 4; }

/// kMode 0: attention; 1: the same copies without the math (a memory probe, wrong results);
/// 2: the probe over a head-major cache layout; 3: attention with Q read after the first K/V
/// copies are issued instead of before (the ordering comparison of docs/attention.md).
template <class T, int D, int kMode, int kSt>
__device__ __forceinline__ void fd_decode_item(const attn_launch& a, const attn_item& it, uint4* smem_raw) {
  constexpr int kTile = fd_kv_tile, kWarpKeys = kTile / kWarps, kTileBytes = kTile * D * 2;
  const attn_seq sq = a.seqs[it.seq];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.num_heads / a.num_kv_heads;
  const uint32_t s0 = smem_addr(smem_raw), q_s = s0 + kSt * 2 * kTileBytes;
  const int32_t* bt = a.block_tables + sq.bt_offset;
  const auto* kc = static_cast<const uint16_t*>(a.k_cache);
  const auto* vc = static_cast<const uint16_t*>(a.v_cache);
  const int ntiles = (it.kv_end - it.kv_begin + kTile - 1) / kTile;
  constexpr bool kHeadMajor = kMode == 2;
  auto issue = [&](int s) {
    if (s < ntiles)
      load_kv_tile<D, kTile, kThreads, kHeadMajor>(kc, vc, bt, a.block_size, it.kv_head, a.num_kv_heads,
                                                   it.kv_begin + s * kTile, it.kv_end, s0 + s * 2 * kTileBytes,
                                                   s0 + s * 2 * kTileBytes + kTileBytes, tid);
    cp_async_commit();
  };
  // Leading tiles older than the newest key before the dependency wait, Q right after it (its
  // loads do not queue behind the rest of the copies), the remaining prologue tiles next.
  const int early = decode_variant(a.variant) == 12 ? 1 : kSt - 1;
  int s = 0;
  for (; s < early && s < ntiles && rows_precede_newest(it.kv_begin + s * kTile, kTile, it.kv_end, sq.context_len);
       ++s)
    issue(s);
  wait_for_previous_kernel();
  q_prefetch<T, D, kThreads> qp;
  if (kMode != 3) qp.load(a, it.q_begin, it.kv_head, G * it.q_len, tid);
  for (; s < kSt - 1; ++s) issue(s);
  if (kMode == 3)
    stage_q<T, D, kThreads>(a, it.q_begin, it.kv_head, 16, G * it.q_len, q_s, tid);
  else
    qp.store(a, q_s, tid);
  __syncthreads();
  warp_rows<T, D> w;
  w.init(q_s, lane);
  for (int t = 0; t < ntiles; ++t) {
    cp_async_wait<kSt - 2>();
    __syncthreads();
    const int nt = t + kSt - 1;
    if (nt < ntiles) {
      const uint32_t st = s0 + (nt % kSt) * 2 * kTileBytes;
      load_kv_tile<D, kTile, kThreads, kHeadMajor>(kc, vc, bt, a.block_size, it.kv_head, a.num_kv_heads,
                                                   it.kv_begin + nt * kTile, it.kv_end, st, st + kTileBytes, tid);
    }
    cp_async_commit();
    if (kMode == 1 || kMode == 2) continue;
    const uint32_t k_s = s0 + (t % kSt) * 2 * kTileBytes;
    float sc[kWarpKeys / 8][4];
    w.template scores<kWarpKeys>(k_s, warp * kWarpKeys, lane, sc);
    mask_tail<kWarpKeys>(sc, it.kv_begin + t * kTile + warp * kWarpKeys, it.kv_end, lane);
    w.template accumulate<kWarpKeys>(sc, k_s + kTileBytes, warp * kWarpKeys, lane);
  }
  cp_async_wait<0>();
  __syncthreads();
  merge_warps_and_store<T, D, kWarps>(a, it, w, reinterpret_cast<float*>(smem_raw), G * it.q_len, tid);
  if (it.partial >= 0 && a.split_counters)
    finish_split<T, D, kThreads>(a, it, reinterpret_cast<float*>(smem_raw), merge_cap(fd_smem_bytes<D, kSt>()), tid);
}

/// Decode items [counts[0], counts[0] + counts[2]), grid-strided (a graph's grid is a bound).
template <class T, int D, int kMode, int kSt>
__global__ void __launch_bounds__(kThreads) fd_decode_kernel(attn_launch a) {
  allow_dependents();
  extern __shared__ uint4 smem_raw[];
  const int n = a.counts[2];
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    if (i != int(blockIdx.x)) __syncthreads();  // the previous item's merge still reads smem
    fd_decode_item<T, D, kMode, kSt>(a, a.items[a.counts[0] + i], smem_raw);
  }
}

template <int D>
constexpr int vllm_smem_bytes() { return kWarps * fd_stages * 2 * vllm_warp_tokens * D * 2 + 16 * D * 2; }

template <class T, int D>
__device__ __forceinline__ void vllm_decode_item(const attn_launch& a, const attn_item& it, uint4* smem_raw) {
  constexpr int kU = vllm_warp_tokens, kSt = fd_stages, kUnitBytes = kU * D * 2;
  const attn_seq sq = a.seqs[it.seq];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, G = a.num_heads / a.num_kv_heads;
  const uint32_t s0 = smem_addr(smem_raw), q_s = s0 + kWarps * kSt * 2 * kUnitBytes;
  const uint32_t my = s0 + warp * kSt * 2 * kUnitBytes;  // this warp's stages
  const int32_t* bt = a.block_tables + sq.bt_offset;
  const auto* kc = static_cast<const uint16_t*>(a.k_cache);
  const auto* vc = static_cast<const uint16_t*>(a.v_cache);
  const int units = (it.kv_end - it.kv_begin + kU - 1) / kU;
  const int mine = units > warp ? (units - warp + kWarps - 1) / kWarps : 0;
  auto issue = [&](int s) {
    if (s < mine)
      load_kv_tile<D, kU, 32>(kc, vc, bt, a.block_size, it.kv_head, a.num_kv_heads,
                              it.kv_begin + (warp + s * kWarps) * kU, it.kv_end, my + s * 2 * kUnitBytes,
                              my + s * 2 * kUnitBytes + kUnitBytes, lane);
    cp_async_commit();
  };
  // As in the flash-decoding kernel: this warp's blocks older than the newest key, the
  // dependency wait, Q, the rest of the prologue.
  const int early = decode_variant(a.variant) == 12 ? 1 : kSt - 1;
  int s = 0;
  for (; s < early && s < mine &&
         rows_precede_newest(it.kv_begin + (warp + s * kWarps) * kU, kU, it.kv_end, sq.context_len);
       ++s)
    issue(s);
  wait_for_previous_kernel();
  q_prefetch<T, D, kThreads> qp;
  qp.load(a, it.q_begin, it.kv_head, G * it.q_len, tid);
  for (; s < kSt - 1; ++s) issue(s);
  qp.store(a, q_s, tid);
  __syncthreads();
  warp_rows<T, D> w;
  w.init(q_s, lane);
  for (int i = 0; i < mine; ++i) {
    cp_async_wait<kSt - 2>();
    __syncwarp();
    const int ni = i + kSt - 1;
    if (ni < mine) {
      const uint32_t st = my + (ni % kSt) * 2 * kUnitBytes;
      load_kv_tile<D, kU, 32>(kc, vc, bt, a.block_size, it.kv_head, a.num_kv_heads,
                              it.kv_begin + (warp + ni * kWarps) * kU, it.kv_end, st, st + kUnitBytes, lane);
    }
    cp_async_commit();
    const uint32_t k_s = my + (i % kSt) * 2 * kUnitBytes;
    float sc[kU / 8][4];
    w.template scores<kU>(k_s, 0, lane, sc);
    mask_tail<kU>(sc, it.kv_begin + (warp + i * kWarps) * kU, it.kv_end, lane);
    w.template accumulate<kU>(sc, k_s + kUnitBytes, 0, lane);
  }
  cp_async_wait<0>();
  __syncthreads();
  merge_warps_and_store<T, D, kWarps>(a, it, w, reinterpret_cast<float*>(smem_raw), G * it.q_len, tid);
  if (it.partial >= 0 && a.split_counters)
    finish_split<T, D, kThreads>(a, it, reinterpret_cast<float*>(smem_raw), merge_cap(vllm_smem_bytes<D>()), tid);
}

/// Decode items [counts[0], counts[0] + counts[2]), grid-strided (a graph's grid is a bound).
template <class T, int D>
__global__ void __launch_bounds__(kThreads) vllm_decode_kernel(attn_launch a) {
  allow_dependents();
  extern __shared__ uint4 smem_raw[];
  const int n = a.counts[2];
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    if (i != int(blockIdx.x)) __syncthreads();  // the previous item's merge still reads smem
    vllm_decode_item<T, D>(a, a.items[a.counts[0] + i], smem_raw);
  }
}

template <class K>
int configure(K kernel, int smem) {
  return int(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
}

/// Launches a decode kernel as a programmatic dependent of the previous kernel when
/// programmatic_launch() is on (the kernels wait before they read what that kernel writes).
int launch_decode(void (*kernel)(attn_launch), int smem, const attn_launch& a, cudaStream_t s) {
  if (a.decode_grid <= 0) return 0;
  return int(dev::launch_pdl_smem(kernel, dim3(a.decode_grid), dim3(kThreads), size_t(smem), s, a));
}

template <class T, int D, int kMode, int kSt = fd_stages>
int launch_fd_mode(const attn_launch& a, cudaStream_t s) {
  constexpr int smem = fd_smem_bytes<D, kSt>();
  static const int configured = configure(fd_decode_kernel<T, D, kMode, kSt>, smem);
  if (configured != 0) return configured;
  return launch_decode(fd_decode_kernel<T, D, kMode, kSt>, smem, a, s);
}

template <class T, int D>
int launch_fd(const attn_launch& a, cudaStream_t s) {
  const int v = decode_variant(a.variant);
  if (v < 2 || v > 6) return launch_fd_mode<T, D, 0>(a, s);
  if constexpr (D == 128 && std::is_same_v<T, __nv_bfloat16>) {
    if (v == 4) return launch_fd_mode<T, D, 3>(a, s);
    if (v == 5) return launch_fd_mode<T, D, 0, kDeepStages>(a, s);
    if (v == 6) return launch_fd_mode<T, D, 1, kDeepStages>(a, s);
    return v == 2 ? launch_fd_mode<T, D, 1>(a, s) : launch_fd_mode<T, D, 2>(a, s);
  }
  return int(cudaErrorInvalidValue);
}

template <class T, int D>
int launch_vllm(const attn_launch& a, cudaStream_t s) {
  static const int configured = configure(vllm_decode_kernel<T, D>, vllm_smem_bytes<D>());
  if (configured != 0) return configured;
  return launch_decode(vllm_decode_kernel<T, D>, vllm_smem_bytes<D>(), a, s);
}

template <class T, int D>
int occupancy(bool vllm) {
  int n = 0;
  const int smem = vllm ? vllm_smem_bytes<D>() : fd_smem_bytes<D>();
  cudaError_t e = vllm ? cudaErrorUnknown : cudaSuccess;
  if (vllm) {
    e = cudaError_t(configure(vllm_decode_kernel<T, D>, smem));
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, vllm_decode_kernel<T, D>, kThreads, smem);
  } else {
    e = cudaError_t(configure(fd_decode_kernel<T, D, 0, fd_stages>, smem));
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fd_decode_kernel<T, D, 0, fd_stages>, kThreads, smem);
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace

int launch_fd_decode(act_dtype dt, const attn_launch& a, cudaStream_t s) {
  if (a.head_dim == 128) return dt == act_dtype::bf16 ? launch_fd<__nv_bfloat16, 128>(a, s) : launch_fd<__half, 128>(a, s);
  if (a.head_dim == 64) return dt == act_dtype::bf16 ? launch_fd<__nv_bfloat16, 64>(a, s) : launch_fd<__half, 64>(a, s);
  return int(cudaErrorInvalidValue);
}

int launch_vllm_decode(act_dtype dt, const attn_launch& a, cudaStream_t s) {
  if (a.head_dim == 128)
    return dt == act_dtype::bf16 ? launch_vllm<__nv_bfloat16, 128>(a, s) : launch_vllm<__half, 128>(a, s);
  if (a.head_dim == 64)
    return dt == act_dtype::bf16 ? launch_vllm<__nv_bfloat16, 64>(a, s) : launch_vllm<__half, 64>(a, s);
  return int(cudaErrorInvalidValue);
}

int decode_ctas_per_sm(act_dtype dt, int head_dim, bool vllm) {
  if (head_dim == 128) return dt == act_dtype::bf16 ? occupancy<__nv_bfloat16, 128>(vllm) : occupancy<__half, 128>(vllm);
  if (head_dim == 64) return dt == act_dtype::bf16 ? occupancy<__nv_bfloat16, 64>(vllm) : occupancy<__half, 64>(vllm);
  return 0;
}

}  // namespace actorserve::gpu::cuda
