// Device sampler: one thread block per sequence, the CPU sampler's semantics (gpu/sampling/).
// Sorted-order questions (top-k, the top-p nucleus, the draw walked best-first) are answered
// without sorting: a bisection over the 32-bit order key of the logits finds the level where a
// count or probability mass crosses its bound, then an id-order scan resolves ties at that level
// (the CPU's order is logit descending, ties to the lowest id).
#include <cmath>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/sampling/counter_rng.hpp"

namespace actorserve::gpu::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr float kMinTemperature = 1e-5f;

/// Order-preserving map of a float to uint32 (larger float, larger key).
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct block_scratch {
  double d[kWarps];
  unsigned long long u[kWarps];
  double scan[kWarps];
  int found;
  int found_fallback;
};

__device__ double block_sum_d(double v, block_scratch& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) sh.d[warp] = v;
  __syncthreads();
  double t = 0.0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += sh.d[w];
  return t;
}

__device__ unsigned long long block_max_u(unsigned long long v, block_scratch& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long x = __shfl_xor_sync(0xffffffffu, v, o);
    v = x > v ? x : v;
  }
  __syncthreads();
  if (lane == 0) sh.u[warp] = v;
  __syncthreads();
  unsigned long long t = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t = sh.u[w] > t ? sh.u[w] : t;
  return t;
}

/// (key, id) packed so that the larger value is earlier in the CPU's order.
__device__ __forceinline__ unsigned long long pack(uint32_t key, int id) {
  return (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ int unpack_id(unsigned long long p) { return int(0xffffffffu - uint32_t(p & 0xffffffffu)); }

/// The first element in the CPU's order that comes after `after` (pack value; ~0 for none).
__device__ unsigned long long next_best(const float* row, int vocab, unsigned long long after, block_scratch& sh) {
  unsigned long long best = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const unsigned long long p = pack(order_key(row[i]), i);
    if (p < after && p > best) best = p;
  }
  return block_max_u(best, sh);
}

/// The smallest key level t with F(t) < bound, F(t) = sum of w(i) over i with key(i) > t
/// (nonincreasing in t). Requires F(0xffffffff) = 0 < bound.
template <class W>
__device__ uint32_t smallest_level_below(const float* row, int vocab, W w, double bound, block_scratch& sh) {
  uint32_t lo = 0, hi = 0xffffffffu;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    double part = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (order_key(row[i]) > mid) part += w(i);
    if (block_sum_d(part, sh) < bound) hi = mid; else lo = mid + 1;
  }
  return lo;
}

/// The smallest key level t with F(t) <= bound (same F).
template <class W>
__device__ uint32_t smallest_level_at_most(const float* row, int vocab, W w, double bound, block_scratch& sh) {
  uint32_t lo = 0, hi = 0xffffffffu;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    double part = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (order_key(row[i]) > mid) part += w(i);
    if (block_sum_d(part, sh) <= bound) hi = mid; else lo = mid + 1;
  }
  return lo;
}

/// In id order: the first i where base + (w(0) + ... + w(i)) reaches `bound` (>= when `inclusive`,
/// else >). Returns -1 when never; *last_positive gets the last i with w(i) > 0.
template <class W>
__device__ int scan_find(int vocab, W w, double base, double bound, bool inclusive, int* last_positive,
                         block_scratch& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, int(threadIdx.x) * chunk), end = min(vocab, begin + chunk);
  double mine = 0.0;
  int my_last = -1;
  for (int i = begin; i < end; ++i) {
    const double x = w(i);
    mine += x;
    if (x > 0.0) my_last = i;
  }
  // Block exclusive scan of `mine`.
  double incl = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();
  if (lane == 31) sh.scan[warp] = incl;
  if (threadIdx.x == 0) { sh.found = -1; sh.found_fallback = -1; }
  __syncthreads();
  double warp_base = 0.0;
  for (int w2 = 0; w2 < warp; ++w2) warp_base += sh.scan[w2];
  const double excl = base + warp_base + incl - mine;
  auto reached = [&](double c) { return inclusive ? c >= bound : c > bound; };
  if (!reached(excl) && reached(excl + mine)) {
    double c = excl;
    int hit = -1;
    for (int i = begin; i < end; ++i) {
      c += w(i);
      if (reached(c)) { hit = i; break; }
    }
    atomicMax(&sh.found_fallback, hit < 0 ? my_last : -1);
    if (hit >= 0) atomicMax(&sh.found, hit);  // exactly one thread crosses
  }
  // Last positive overall: the largest my_last.
  unsigned long long lp = block_max_u(static_cast<unsigned long long>(my_last + 1), sh);
  __syncthreads();
  *last_positive = int(lp) - 1;
  return sh.found >= 0 ? sh.found : sh.found_fallback;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(float* logits, int vocab, const sample_seq* seqs,
                                                          const penalty_token* pen, const int32_t* mask_ids,
                                                          sample_out* outs) {
  __shared__ block_scratch sh;
  const sample_seq sp = seqs[blockIdx.x];
  float* row = logits + size_t(blockIdx.x) * vocab;
  sample_out* out = outs + blockIdx.x;
  // 1. NaN never wins; penalties (entries are unique ids); then the masks.
  for (int i = threadIdx.x; i < vocab; i += kThreads)
    if (isnan(row[i])) row[i] = -INFINITY;
  __syncthreads();
  for (int e = threadIdx.x; e < sp.penalty_count; e += kThreads) {
    const penalty_token pt = pen[sp.penalty_begin + e];
    if (pt.id < 0 || pt.id >= vocab) continue;
    float l = row[pt.id];
    if (sp.repetition_penalty != 1.0f && pt.in_history) l = l > 0.0f ? l / sp.repetition_penalty : l * sp.repetition_penalty;
    if (pt.output_count > 0) l -= sp.frequency_penalty * float(pt.output_count) + sp.presence_penalty;
    row[pt.id] = l;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < sp.mask_count; e += kThreads) {
    const int id = mask_ids[sp.mask_begin + e];
    if (id >= 0 && id < vocab) row[id] = -INFINITY;
  }
  __syncthreads();
  // 2. The best id and the log-sum-exp of the processed logits.
  const unsigned long long best_p = next_best(row, vocab, ~0ull, sh);
  const int best = unpack_id(best_p);
  const float mx = row[best];
  double lse = -INFINITY;
  {
    double part = 0.0;
    if (mx != -INFINITY)
      for (int i = threadIdx.x; i < vocab; i += kThreads)
        if (row[i] > -INFINITY) part += exp(double(row[i]) - double(mx));
    const double total = block_sum_d(part, sh);
    if (mx != -INFINITY) lse = double(mx) + log(total);
  }
  // 3. Top logprobs, best first.
  const int ntop = min(min(sp.num_logprobs, max_top_logprobs), vocab);
  unsigned long long prev = ~0ull;
  for (int k = 0; k < ntop; ++k) {
    prev = k == 0 ? best_p : next_best(row, vocab, prev, sh);
    if (threadIdx.x == 0) {
      const int id = unpack_id(prev);
      out->top_ids[k] = id;
      out->top_logprobs[k] = float(double(row[id]) - lse);
    }
  }
  // 4. The token.
  int token = best;
  const bool greedy = sp.temperature < kMinTemperature;
  if (!greedy && mx != -INFINITY && isfinite(mx)) {
    const float inv_t = 1.0f / sp.temperature;
    auto prob = [&](int i) { return expf((row[i] - mx) * inv_t); };
    const double u = static_cast<double>(counter_bits(sp.seed, sp.counter) >> 11) * 0x1.0p-53;
    const bool use_top_k = sp.top_k > 0 && sp.top_k < vocab;
    const bool use_top_p = sp.top_p < 1.0f;
    int last_pos = 0;
    if (!use_top_k && !use_top_p) {
      auto w = [&](int i) { const float p = prob(i); return p < sp.min_p ? 0.0 : double(p); };
      const double mass = [&] {
        double part = 0.0;
        for (int i = threadIdx.x; i < vocab; i += kThreads) part += w(i);
        return block_sum_d(part, sh);
      }();
      const int hit = scan_find(vocab, w, 0.0, u * mass, false, &last_pos, sh);
      token = hit >= 0 ? hit : last_pos;
    } else {
      // Kept set 1 (top-k): keys above level kk, plus ties at kk up to id ck.
      uint32_t kk = 0;
      int ck = vocab;
      if (use_top_k) {
        kk = smallest_level_below(row, vocab, [&](int) { return 1.0; }, double(sp.top_k), sh);
        double above = 0.0;
        for (int i = threadIdx.x; i < vocab; i += kThreads) above += order_key(row[i]) > kk ? 1.0 : 0.0;
        above = block_sum_d(above, sh);
        ck = scan_find(vocab, [&](int i) { return order_key(row[i]) == kk ? 1.0 : 0.0; }, above, double(sp.top_k),
                       true, &last_pos, sh);
        if (ck < 0) ck = vocab;
      }
      auto in1 = [&](int i) { const uint32_t k = order_key(row[i]); return k > kk || (k == kk && i <= ck); };
      // Kept set 2 (top-p over set 1): elements whose mass before them (in order) is below P.
      uint32_t kp = 0;
      int cp = vocab;
      if (use_top_p) {
        auto w1 = [&](int i) { return in1(i) ? double(prob(i)) : 0.0; };
        double mass1 = 0.0;
        for (int i = threadIdx.x; i < vocab; i += kThreads) mass1 += w1(i);
        mass1 = block_sum_d(mass1, sh);
        const double P = double(sp.top_p) * mass1;
        kp = smallest_level_below(row, vocab, w1, P, sh);
        double above = 0.0;
        for (int i = threadIdx.x; i < vocab; i += kThreads) above += order_key(row[i]) > kp ? w1(i) : 0.0;
        above = block_sum_d(above, sh);
        cp = scan_find(vocab, [&](int i) { return order_key(row[i]) == kp ? w1(i) : 0.0; }, above, P, true,
                       &last_pos, sh);
        if (cp < 0) cp = vocab;
      }
      auto in2 = [&](int i) {
        if (!in1(i)) return false;
        const uint32_t k = order_key(row[i]);
        return k > kp || (k == kp && i <= cp);
      };
      // min-p (relative to the best, whose weight is 1) and the draw, walked best first.
      auto wk = [&](int i) {
        if (!in2(i)) return 0.0;
        const float p = prob(i);
        return p < sp.min_p ? 0.0 : double(p);
      };
      double mass = 0.0;
      for (int i = threadIdx.x; i < vocab; i += kThreads) mass += wk(i);
      mass = block_sum_d(mass, sh);
      const double r = u * mass;
      const uint32_t kd = smallest_level_at_most(row, vocab, wk, r, sh);
      double above = 0.0;
      for (int i = threadIdx.x; i < vocab; i += kThreads) above += order_key(row[i]) > kd ? wk(i) : 0.0;
      above = block_sum_d(above, sh);
      const int hit = scan_find(vocab, [&](int i) { return order_key(row[i]) == kd ? wk(i) : 0.0; }, above, r,
                                false, &last_pos, sh);
      token = hit >= 0 ? hit : (last_pos >= 0 ? last_pos : best);
    }
  }
  if (threadIdx.x == 0) {
    out->token = token;
    out->logprob = float(double(row[token]) - lse);
  }
}

}  // namespace

int sample_tokens(float* logits, int num_seqs, int vocab, const sample_seq* seqs, const penalty_token* penalty_tokens,
                  const int32_t* mask_ids, sample_out* out, cudaStream_t s) {
  if (num_seqs == 0) return 0;
  sample_kernel<<<num_seqs, kThreads, 0, s>>>(logits, vocab, seqs, penalty_tokens, mask_ids, out);
  return cudaGetLastError();
}

}  // namespace actorserve::gpu::cuda
