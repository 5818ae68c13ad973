// Device sampler: one thread block per sequence, the CPU sampler's semantics (gpu/sampling/).
// Sorted-order questions (the top logprobs, top-k, the top-p nucleus, the draw walked best-first)
// are answered without sorting the vocabulary: one pass builds a histogram of weights over
// buckets that are monotone in the logit (fixed steps of logit or probability below the best),
// a scan finds the bucket where the count or mass crosses its bound, a second pass compacts that
// bucket's few ids into shared memory, and a bitonic sort of them by (logit desc, id asc) -- the
// CPU's order -- resolves the exact element. A bucket too full to compact falls back to a
// bisection over the 32-bit order key of the logits plus an id-order scan of the ties.
#include <cooperative_groups.h>

#include <cmath>

#include "gpu/cuda/kernel_util.cuh"
#include "gpu/sampling/counter_rng.hpp"
#include "gpu/cuda/sampling/sampler.hpp"

namespace actorserve::gpu::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr float kMinTemperature = 1e-5f;
constexpr int kBins = 2048;                // histogram buckets; the last takes everything beyond
constexpr int kCap = 2048;                 // candidates one bucket may hold to be sorted in place
constexpr int kPer = kCap / kThreads;      // list entries (and buckets) per thread
constexpr float kCountScale = 64.0f;       // count buckets: 1/64 of a logit each
constexpr float kMassScale = 23.0831206f;  // mass buckets: 16 per octave of probability (16 / ln 2)
static_assert(kBins == kCap && kCap % kThreads == 0);

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
  double hist[kBins];             // bucket weights
  unsigned long long list[kCap];  // compacted candidates, then sorted best first
  int count;                      // candidates compacted (may exceed kCap)
  int bucket;                     // the crossing bucket (kBins: none)
  int hit;                        // the crossing list position (kCap: none)
  double base;                    // weight of the buckets before the crossing one
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

/// The smallest key level t with F(t) < bound (`strict`) or F(t) <= bound, F(t) = sum of w(i)
/// over i with key(i) > t (nonincreasing in t). Requires F(0xffffffff) = 0 < bound.
template <class W>
__device__ uint32_t smallest_level(const float* row, int vocab, W w, double bound, bool strict, block_scratch& sh) {
  uint32_t lo = 0, hi = 0xffffffffu;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    double part = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (order_key(row[i]) > mid) part += w(i);
    const double f = block_sum_d(part, sh);
    if (strict ? f < bound : f <= bound) hi = mid; else lo = mid + 1;
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

/// Calls f(i, row[i]) for every i < vocab, spread over the block with 16-byte loads (no order).
template <class F>
__device__ __forceinline__ void for_each(const float* row, int vocab, F&& f) {
  const int head = min(vocab, int(((16u - (reinterpret_cast<uintptr_t>(row) & 15u)) & 15u) / 4u));
  if (int(threadIdx.x) < head) f(int(threadIdx.x), row[threadIdx.x]);
  const float4* v = reinterpret_cast<const float4*>(row + head);
  const int nv = (vocab - head) / 4;
  int j = threadIdx.x;
  for (; j + 3 * kThreads < nv; j += 4 * kThreads) {
    float4 a[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) a[u] = v[j + u * kThreads];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = head + 4 * (j + u * kThreads);
      f(i, a[u].x);
      f(i + 1, a[u].y);
      f(i + 2, a[u].z);
      f(i + 3, a[u].w);
    }
  }
  for (; j < nv; j += kThreads) {
    const float4 a = v[j];
    const int i = head + 4 * j;
    f(i, a.x);
    f(i + 1, a.y);
    f(i + 2, a.z);
    f(i + 3, a.w);
  }
  for (int i = head + 4 * nv + threadIdx.x; i < vocab; i += kThreads) f(i, row[i]);
}

/// Buckets nondecreasing along the CPU's order: floor((best - logit) * scale), capped.
struct bucketer {
  float mx, scale;
  __device__ int operator()(float l) const {
    const float d = (mx - l) * scale;
    return d < float(kBins - 1) ? int(d) : kBins - 1;  // -inf, NaN: the last
  }
};

/// Exclusive prefix of v over the threads in order; *total gets the block's sum.
__device__ double block_excl_scan(double v, double* total, block_scratch& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  double excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0.0;
  __syncthreads();
  if (lane == 31) sh.scan[warp] = incl;
  __syncthreads();
  double before = 0.0, all = 0.0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += sh.scan[w];
    all += sh.scan[w];
  }
  *total = all;
  return before + excl;
}

/// The first of this thread's kPer values (in order, after `start`) at which the running sum
/// reaches `bound`, or kPer; *before gets the sum before it.
__device__ __forceinline__ int first_reaching(const double* vals, double start, double bound, bool inclusive,
                                             double* before) {
  double c = start;
  for (int j = 0; j < kPer; ++j) {
    const double next = c + vals[j];
    if (vals[j] > 0.0 && (inclusive ? next >= bound : next > bound)) {
      *before = c;
      return j;
    }
    c = next;
  }
  return kPer;
}

/// Histogram of w over the buckets, then the bucket where the weight through it first reaches
/// `bound`; sh.bucket (kBins when never) and sh.base (the weight before it) for every thread.
template <class W>
__device__ void crossing_bucket(const float* row, int vocab, W w, bucketer bk, double bound, bool inclusive,
                                block_scratch& sh) {
  for (int b = threadIdx.x; b < kBins; b += kThreads) sh.hist[b] = 0.0;
  if (threadIdx.x == 0) sh.bucket = kBins;
  __syncthreads();
  double tail = 0.0;  // the last bucket is the crowded one: summed per thread, not by atomics
  for_each(row, vocab, [&](int i, float l) {
    const double x = w(i, l);
    if (x > 0.0) {
      const int b = bk(l);
      if (b == kBins - 1) tail += x; else atomicAdd(&sh.hist[b], x);
    }
  });
  tail = block_sum_d(tail, sh);
  if (threadIdx.x == 0) sh.hist[kBins - 1] = tail;
  __syncthreads();
  double vals[kPer], mine = 0.0, total = 0.0;
  for (int j = 0; j < kPer; ++j) mine += vals[j] = sh.hist[threadIdx.x * kPer + j];
  const double excl = block_excl_scan(mine, &total, sh);
  double before = 0.0;
  const int j = first_reaching(vals, excl, bound, inclusive, &before);
  if (j < kPer) atomicMin(&sh.bucket, int(threadIdx.x) * kPer + j);
  __syncthreads();
  if (j < kPer && int(threadIdx.x) * kPer + j == sh.bucket) sh.base = before;
  __syncthreads();
}

/// Packs of the ids with w > 0 in buckets [lo, hi] into sh.list, sorted best first when they fit
/// (returns their number; more than kCap: not sorted, the list is incomplete).
template <class W>
__device__ int compact_sorted(const float* row, int vocab, W w, bucketer bk, int lo, int hi, block_scratch& sh) {
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  for_each(row, vocab, [&](int i, float l) {
    const int b = bk(l);
    if (b < lo || b > hi || !(w(i, l) > 0.0)) return;
    cg::coalesced_group g = cg::coalesced_threads();
    int slot = 0;
    if (g.thread_rank() == 0) slot = atomicAdd(&sh.count, int(g.size()));
    slot = g.shfl(slot, 0) + int(g.thread_rank());
    if (slot < kCap) sh.list[slot] = pack(order_key(l), i);
  });
  __syncthreads();
  const int n = sh.count;
  if (n > kCap) return n;
  int n2 = 32;
  while (n2 < n) n2 <<= 1;
  for (int i = n + threadIdx.x; i < n2; i += kThreads) sh.list[i] = 0;  // below every real element
  __syncthreads();
  for (int k = 2; k <= n2; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n2; i += kThreads) {
        const int p = i ^ j;
        if (p > i) {
          const unsigned long long a = sh.list[i], b = sh.list[p];
          if ((i & k) == 0 ? a < b : a > b) {
            sh.list[i] = b;
            sh.list[p] = a;
          }
        }
      }
      __syncthreads();
    }
  return n;
}

/// The first element, in the CPU's order, at which the sum of w (from the best on) reaches
/// `bound` (>= when `inclusive`, else >): its pack, or 0 when the sum never gets there.
template <class W>
__device__ unsigned long long find_crossing(const float* row, int vocab, W w, bucketer bk, double bound,
                                            bool inclusive, block_scratch& sh) {
  crossing_bucket(row, vocab, w, bk, bound, inclusive, sh);
  const int bucket = sh.bucket;
  const double base = sh.base;
  if (bucket == kBins) return 0;
  const int n = compact_sorted(row, vocab, w, bk, bucket, bucket, sh);
  if (n > kCap) {  // a crowded bucket: bisect its order keys, then scan its ties in id order
    auto wb = [&](int i) { const float l = row[i]; return bk(l) == bucket ? w(i, l) : 0.0; };
    const double rest = bound - base;
    const uint32_t level = smallest_level(row, vocab, wb, rest, /*strict=*/inclusive, sh);
    double above = 0.0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) above += order_key(row[i]) > level ? wb(i) : 0.0;
    above = block_sum_d(above, sh);
    int last = -1;
    const int id = scan_find(vocab, [&](int i) { return order_key(row[i]) == level ? wb(i) : 0.0; }, above, rest,
                             inclusive, &last, sh);
    return id >= 0 ? pack(level, id) : 0;
  }
  if (threadIdx.x == 0) sh.hit = kCap;
  double vals[kPer], mine = 0.0, total = 0.0;
  for (int j = 0; j < kPer; ++j) {
    const int e = threadIdx.x * kPer + j;
    vals[j] = 0.0;
    if (e < n) {
      const int id = unpack_id(sh.list[e]);
      vals[j] = w(id, row[id]);
    }
    mine += vals[j];
  }
  const double excl = block_excl_scan(mine, &total, sh);
  double before = 0.0;
  const int j = first_reaching(vals, base + excl, bound, inclusive, &before);
  if (j < kPer) atomicMin(&sh.hit, int(threadIdx.x) * kPer + j);
  __syncthreads();
  const unsigned long long r = sh.hit < kCap ? sh.list[sh.hit] : 0ull;
  __syncthreads();
  return r;
}

/// Writes the best `ntop` ids (the CPU's order) and their logprobs.
__device__ void top_logprobs(const float* row, int vocab, float mx, int best, double lse, int ntop, sample_out* out,
                             block_scratch& sh) {
  const bucketer bk{mx, kCountScale};
  auto one = [](int, float) { return 1.0; };
  crossing_bucket(row, vocab, one, bk, double(ntop), true, sh);
  const int n = sh.bucket == kBins ? kCap + 1 : compact_sorted(row, vocab, one, bk, 0, sh.bucket, sh);
  if (n <= kCap) {
    if (int(threadIdx.x) < ntop) {
      const int id = unpack_id(sh.list[threadIdx.x]);
      out->top_ids[threadIdx.x] = id;
      out->top_logprobs[threadIdx.x] = float(double(row[id]) - lse);
    }
    __syncthreads();
    return;
  }
  unsigned long long prev = ~0ull;  // crowded: one pass per rank
  for (int k = 0; k < ntop; ++k) {
    prev = k == 0 ? pack(order_key(row[best]), best) : next_best(row, vocab, prev, sh);
    if (threadIdx.x == 0) {
      const int id = unpack_id(prev);
      out->top_ids[k] = id;
      out->top_logprobs[k] = float(double(row[id]) - lse);
    }
  }
}

/// Temperature, top-k, top-p, min-p and the draw over the processed row (finite best `mx`).
__device__ int sample_random(const float* row, int vocab, const sample_seq& sp, float mx, int best,
                             block_scratch& sh) {
  const float inv_t = 1.0f / sp.temperature;
  auto prob = [&](float l) { return expf((l - mx) * inv_t); };
  const double u = static_cast<double>(counter_bits(sp.seed, sp.counter) >> 11) * 0x1.0p-53;
  const bool use_top_k = sp.top_k > 0 && sp.top_k < vocab;
  const bool use_top_p = sp.top_p < 1.0f;
  if (!use_top_k && !use_top_p) {  // the CPU draws in id order here
    auto w = [&](int i) { const float p = prob(row[i]); return p < sp.min_p ? 0.0 : double(p); };
    double mass = 0.0;
    for_each(row, vocab, [&](int, float l) { const float p = prob(l); mass += p < sp.min_p ? 0.0 : double(p); });
    mass = block_sum_d(mass, sh);
    int last_pos = 0;
    const int hit = scan_find(vocab, w, 0.0, u * mass, false, &last_pos, sh);
    return hit >= 0 ? hit : last_pos;
  }
  const bucketer by_count{mx, kCountScale}, by_mass{mx, kMassScale * inv_t};
  // Kept set 1 (top-k): packs from the k-th best up.
  unsigned long long t1 = 0;
  if (use_top_k) t1 = find_crossing(row, vocab, [](int, float) { return 1.0; }, by_count, double(sp.top_k), true, sh);
  // Kept set 2 (top-p over set 1): through the first element whose mass through it reaches P.
  unsigned long long t2 = t1;
  if (use_top_p) {
    auto w1 = [&](int i, float l) { return pack(order_key(l), i) >= t1 ? double(prob(l)) : 0.0; };
    double mass1 = 0.0;
    for_each(row, vocab, [&](int i, float l) { mass1 += w1(i, l); });
    mass1 = block_sum_d(mass1, sh);
    const unsigned long long t = find_crossing(row, vocab, w1, by_mass, double(sp.top_p) * mass1, true, sh);
    if (t > t2) t2 = t;
  }
  // min-p (relative to the best, whose weight is 1) and the draw, walked best first.
  auto wk = [&](int i, float l) {
    if (pack(order_key(l), i) < t2) return 0.0;
    const float p = prob(l);
    return p < sp.min_p ? 0.0 : double(p);
  };
  double mass = 0.0;
  for_each(row, vocab, [&](int i, float l) { mass += wk(i, l); });
  mass = block_sum_d(mass, sh);
  const unsigned long long hit = find_crossing(row, vocab, wk, by_mass, u * mass, false, sh);
  if (hit) return unpack_id(hit);
  // Rounding walked past the end: the worst id of positive weight, as the CPU does.
  unsigned long long worst = ~0ull;
  for_each(row, vocab, [&](int i, float l) {
    const unsigned long long p = pack(order_key(l), i);
    if (wk(i, l) > 0.0 && p < worst) worst = p;
  });
  worst = ~block_max_u(~worst, sh);
  return worst == ~0ull ? best : unpack_id(worst);
}

__global__ void __launch_bounds__(kThreads) sample_kernel(float* logits, int vocab, const sample_seq* seqs,
                                                          const penalty_token* pen, const int32_t* mask_ids,
                                                          const uint32_t* grammar, sample_out* outs) {
  __shared__ block_scratch sh;
  dev::pdl_begin();
  const sample_seq sp = seqs[blockIdx.x];
  float* row = logits + size_t(blockIdx.x) * vocab;
  sample_out* out = outs + blockIdx.x;
  // 0. The grammar: every token outside the row's mask -> -inf (first, as the CPU sampler).
  if (sp.grammar_row >= 0) {
    const uint32_t* words = grammar + size_t(sp.grammar_row) * size_t((vocab + 31) / 32);
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (!((words[i >> 5] >> (i & 31)) & 1u)) row[i] = -INFINITY;
    __syncthreads();
  }
  // 1. Penalties (entries are unique ids), then the masks, then NaN never wins.
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
  // 2. One pass: the best id (NaN rewritten to -inf on the way) and each thread's sum of exp
  // relative to its running max; then the log-sum-exp.
  unsigned long long best_p = 0;
  float run_max = -INFINITY, run_sum = 0.0f;
  for_each(row, vocab, [&](int i, float l) {
    if (isnan(l)) {
      l = -INFINITY;
      row[i] = l;
    }
    const unsigned long long p = pack(order_key(l), i);
    if (p > best_p) best_p = p;
    if (l > run_max) {
      run_sum = run_sum * expf(run_max - l) + 1.0f;
      run_max = l;
    } else if (l > -INFINITY) {
      run_sum += expf(l - run_max);
    }
  });
  best_p = block_max_u(best_p, sh);
  const int best = unpack_id(best_p);
  const float mx = row[best];
  double lse = -INFINITY;
  {
    const double part = run_max > -INFINITY ? double(run_sum) * exp(double(run_max) - double(mx)) : 0.0;
    const double total = block_sum_d(part, sh);
    if (mx != -INFINITY) lse = double(mx) + log(total);
  }
  // 3. Top logprobs, best first.
  const int ntop = min(min(sp.num_logprobs, max_top_logprobs), vocab);
  if (ntop > 0) top_logprobs(row, vocab, mx, best, lse, ntop, out, sh);
  // 4. The token.
  int token = best;
  if (sp.temperature >= kMinTemperature && mx != -INFINITY && isfinite(mx)) token = sample_random(row, vocab, sp, mx, best, sh);
  if (threadIdx.x == 0) {
    out->token = token;
    out->logprob = float(double(row[token]) - lse);
  }
}

}  // namespace

int sample_tokens(float* logits, int num_seqs, int vocab, const sample_seq* seqs, const penalty_token* penalty_tokens,
                  const int32_t* mask_ids, const uint32_t* grammar_masks, sample_out* out, cudaStream_t s) {
  if (num_seqs == 0) return 0;
  dev::launch_pdl(sample_kernel, dim3(num_seqs), dim3(kThreads), s, logits, vocab, seqs, penalty_tokens, mask_ids,
                  grammar_masks, out);
  return cudaGetLastError();
}

}  // namespace actorserve::gpu::cuda
