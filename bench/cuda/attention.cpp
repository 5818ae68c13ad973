// Attention backends on the device: decode (µs, effective GB/s = bytes of K and V read + Q + O)
// and causal prefill (TFLOP/s), L2 flushed before every timed run, median of the runs. Every
// configuration is timed twice: events around the launches as issued (host launch latency
// included: the first method, kept) and "held" (the launches queued behind a kernel that holds
// the stream until the host releases it: kernel time alone, as nvbench measures).
//   bench_cuda_attention [--out DIR] [--quick] [--flush read|write] [KERNEL FLAGS]
//   bench_cuda_attention --kernels           the shipping kernels side by side (A/B by name)
//   bench_cuda_attention --stream            streaming-read ceiling at the grid's byte counts
//   bench_cuda_attention --pdl               decode after a 4 µs predecessor, PDL off / on
//   bench_cuda_attention --cascade           the cascade point alone: 256 decodes sharing a
//                                            4096-token prefix, 256 private tokens each, 32/8,
//                                            flash-decoding / 64, cascade against per-sequence;
//                                            then its parts alone (suffixes, prefix pass + merge)
//                                            and the point with --cascade-overlap the other way
//   bench_cuda_attention --fp8-kv            flash-decoding decode over the FP8 (E4M3) KV cache
//                                            against the bf16 one: 32/8, batch 32 and 64, KV 2048
//                                            and 8192; GB/s counts the cache bytes read (one a
//                                            K or V element with FP8, two with bf16) plus Q and O;
//                                            with --one, that configuration over the FP8 cache
//   bench_cuda_attention --one vllm|fd decode|prefill H BATCH KV   one configuration (for ncu)
//   bench_cuda_attention --reps N --one ...                         its median of N runs (default 1)
// KERNEL FLAGS (tuning_flags.hpp) pick the kernels of the grid and of --one: --prefill-kernel
// automatic|wgmma_tma_persistent|wgmma_cp_async|mma_sync, --decode-kernel tma|cp_async,
// --split-merge last_piece|separate_kernel, --prefill-q16 0|1.
// Writes DIR/attention_grid.md (the whole grid as a table) and prints it with a target summary.
// --flush: how the L2 is flushed before each timed run. `read` (the default) reads a 256 MiB
// buffer, which evicts every K/V line and leaves the L2 full of clean lines, as the GEMMs and
// norms before a decode step's attention leave it; `write` memsets that buffer (the method before
// 2026-12-01), which leaves up to a whole L2 of dirty lines that the timed kernel then
// pays to write back to DRAM while it reads.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda/probe/probe.hpp"
#include "bench_timing.hpp"
#include "gpu/cuda/attention/backend.hpp"
#include "tuning_flags.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/programmatic_launch.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace cuda = actorserve::gpu::cuda;
namespace gpu = actorserve::gpu;
namespace bench_cuda = actorserve::bench_cuda;
using actorserve::kv_cache_layout;

namespace {

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

constexpr int D = 128, KVH = 8;
constexpr size_t kFlushBytes = size_t(256) << 20;  // > 5x the H200's 50 MB L2
bool g_flush_by_write = false;  ///< --flush write: memset the flush buffer instead of reading it
bool g_kv_fp8 = false;          ///< --fp8-kv: the backends read an E4M3 cache (attention_shape::kv_fp8)

struct device_state {
  void* k = nullptr;
  void* v = nullptr;
  size_t cache_tokens = 0;
  void* flush = nullptr;
  float* q = nullptr;
  void* q16 = nullptr;  ///< 16-bit scaled queries (attn_launch::q16), for backends that read them
  void* out = nullptr;
  float* part_o = nullptr;
  float* part_lse = nullptr;
  size_t max_tokens = 0, max_partials = 0;
  cudaEvent_t a = nullptr, b = nullptr;
  volatile int* hold_host = nullptr;  ///< host-mapped flag that releases the held stream
  int* hold_dev = nullptr;
  unsigned* sink = nullptr;
  int flush_ctas = 0;  ///< CTAs of the read flush (4 per SM)
};

/// Fills `bytes` of device memory with random bf16 normals (a 64 MiB random pattern, repeated).
void fill_random(void* dst, size_t bytes, uint32_t seed, float stddev = 1.0f) {
  const size_t pattern = std::min(bytes, size_t(64) << 20);
  const std::vector<uint16_t> host = actorserve::bench_cuda::normal_bf16(pattern / 2, stddev, seed);
  CK(cudaMemcpy(dst, host.data(), pattern, cudaMemcpyHostToDevice));
  for (size_t off = pattern; off < bytes; off += pattern)
    CK(cudaMemcpy(static_cast<char*>(dst) + off, dst, std::min(pattern, bytes - off), cudaMemcpyDeviceToDevice));
}

/// Fills `bytes` of device memory with random E4M3 codes (no NaN code; a 64 MiB pattern, repeated).
void fill_random_e4m3(void* dst, size_t bytes, uint32_t seed) {
  const size_t pattern = std::min(bytes, size_t(64) << 20);
  std::vector<uint8_t> host(pattern);
  std::mt19937 rng(seed);
  for (auto& b : host) {
    b = uint8_t(rng() >> 24);
    if ((b & 0x7f) == 0x7f) b ^= 1;  // S.1111.111 is NaN: take its neighbour, 448
  }
  CK(cudaMemcpy(dst, host.data(), pattern, cudaMemcpyHostToDevice));
  for (size_t off = pattern; off < bytes; off += pattern)
    CK(cudaMemcpy(static_cast<char*>(dst) + off, dst, std::min(pattern, bytes - off), cudaMemcpyDeviceToDevice));
}

template <class T>
T* upload(const std::vector<T>& v) {
  void* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(v.size() * sizeof(T), 16)));
  if (!v.empty()) CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return static_cast<T*>(p);
}

struct result_row {
  std::string backend, kind, kv_label;
  int H = 0, batch = 0, kv = 0;
  double us = 0, gbs = 0, tflops = 0;           ///< events around the launches (launch latency included)
  double us_held = 0, gbs_held = 0, tflops_held = 0;  ///< launches queued behind a held stream
  int ctas = 0, splits = 0;
};

/// p-th quantile (0..1) of `v` (sorted in place), the nearest rank; 0 when empty.
double quantile(std::vector<double>& v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

/// Median of `t` (sorted in place): element size / 2.
double median(std::vector<double>& t) { return quantile(t, 0.5); }

/// Event-timed µs of `enqueue` after an L2 flush, either as launched (host launch latency
/// included) or with the launches queued behind a kernel that holds the stream until all of
/// them are enqueued (kernel time alone, nvbench's method).
template <class F>
double time_once(device_state& st, int r, bool held, F&& enqueue) {
  if (g_flush_by_write) CK(cudaMemsetAsync(st.flush, r & 0xff, kFlushBytes));
  else if (int e = cuda::launch_stream_read(st.flush, kFlushBytes, st.sink, st.flush_ctas, nullptr)) CK(cudaError_t(e));
  if (held) {
    *st.hold_host = 0;
    if (int e = cuda::launch_hold_stream(st.hold_dev, nullptr)) CK(cudaError_t(e));
  }
  CK(cudaEventRecord(st.a));
  enqueue();
  CK(cudaEventRecord(st.b));
  if (held) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    *st.hold_host = 1;
  }
  CK(cudaEventSynchronize(st.b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, st.a, st.b));
  return ms * 1000.0;
}

/// Median µs of `reps` runs (two warm-ups first) by both methods: {as launched, held}.
template <class F>
std::pair<double, double> measure(device_state& st, int reps, F&& enqueue) {
  std::vector<double> plain, held;
  for (int r = 0; r < reps + 2; ++r) {
    const double t0 = time_once(st, r, false, enqueue), t1 = time_once(st, r, true, enqueue);
    if (r >= 2) plain.push_back(t0), held.push_back(t1);
  }
  CK(cudaGetLastError());
  return {median(plain), median(held)};
}

/// One configuration's backend, plan and device arguments (freed with it).
struct prepared {
  std::unique_ptr<cuda::attention_backend> be;
  cuda::attention_plan plan;
  cuda::attention_grids g;
  cuda::attn_launch a;
  prepared() = default;
  prepared(const prepared&) = delete;
  prepared& operator=(const prepared&) = delete;
  ~prepared() {
    for (const void* p : {static_cast<const void*>(a.block_tables), static_cast<const void*>(a.seqs),
                          static_cast<const void*>(a.items), static_cast<const void*>(a.combines),
                          static_cast<const void*>(a.counts), static_cast<const void*>(a.prefix_rows)})
      if (p) (void)cudaFree(const_cast<void*>(p));
  }
  void run() const {
    if (int e = be->run(a, nullptr)) {
      std::fprintf(stderr, "run: %s\n", cudaGetErrorString(cudaError_t(e)));
      std::exit(1);
    }
  }
};

/// Sequences of KV lengths `lens` (decode: one query each; prefill: q_len = the length) over
/// block tables shuffled across the cache, through a backend with the kernels `tuning` picks.
/// `shared_prefix` > 0 (decode): every table starts with the first sequence's blocks over that
/// many keys; `cascade`: the sequences are planned as one cascade group over them.
void prepare(device_state& st, prepared& p, kv_cache_layout layout, int H, const std::vector<int>& lens,
             bool prefill, const gpu::attention_tuning& tuning, int shared_prefix = 0, bool cascade = false) {
  cuda::attention_shape shape;
  shape.dt = cuda::act_dtype::bf16;
  shape.num_heads = H;
  shape.num_kv_heads = KVH;
  shape.head_dim = D;
  shape.block_size = layout == kv_cache_layout::vllm ? 16 : 64;
  shape.kv_fp8 = g_kv_fp8;
  auto made = cuda::make_attention_backend(layout, shape, tuning);
  if (!made) {
    std::fprintf(stderr, "backend: %s\n", made.err().message.c_str());
    std::exit(1);
  }
  p.be = std::move(*made);
  const int bs = p.be->block_size(), batch = int(lens.size());
  std::vector<cuda::attn_seq> seqs(lens.size());
  size_t total_blocks = 0, tokens = 0;
  for (int s = 0; s < batch; ++s) {
    const int q_len = prefill ? lens[s] : 1;
    seqs[s] = {int32_t(tokens), q_len, lens[s], int32_t(total_blocks)};
    total_blocks += size_t(lens[s] + bs - 1) / bs;
    tokens += size_t(q_len);
  }
  if (total_blocks * bs > st.cache_tokens || tokens > st.max_tokens) {
    std::fprintf(stderr, "config too large for the buffers\n");
    std::exit(1);
  }
  std::vector<int32_t> bt(total_blocks);
  std::iota(bt.begin(), bt.end(), 0);
  std::shuffle(bt.begin(), bt.end(), std::mt19937(uint32_t(batch * 31 + lens[0])));
  gpu::cascade_plan groups;
  if (shared_prefix > 0) {
    const int nb = shared_prefix / bs;
    for (int s = 1; s < batch; ++s) std::copy_n(bt.begin(), nb, bt.begin() + seqs[s].bt_offset);
    if (cascade) {
      groups.groups.push_back({nb, {}});
      for (int s = 0; s < batch; ++s) groups.groups[0].seqs.push_back(s);
    }
  }
  p.plan = p.be->plan(seqs, groups);
  if (size_t(p.plan.num_partials) > st.max_partials) {
    std::fprintf(stderr, "too many partials\n");
    std::exit(1);
  }
  p.g = p.be->grids(p.plan);
  const int32_t n_prefill = int32_t(p.plan.items.size()) - p.plan.num_decode_items;
  cuda::set_first_blocks(p.plan, bt, bs);  // as the executor stages them
  std::vector<int32_t> counts = {n_prefill, int32_t(p.plan.combines.size()), p.plan.num_decode_items,
                                 int32_t(p.plan.prefix_items.size())};
  std::vector<cuda::attn_item> items = p.plan.items;  // as the executor stages them: prefix pieces last
  items.insert(items.end(), p.plan.prefix_items.begin(), p.plan.prefix_items.end());
  cuda::attn_launch& a = p.a;
  a.q = st.q;
  if (prefill && p.be->prefill_reads_q16()) a.q16 = st.q16;  // as the executor sets it
  a.q_stride = (H + 2 * KVH) * D;
  a.k_cache = st.k;
  a.v_cache = st.v;
  a.block_tables = upload(bt);
  a.seqs = upload(seqs);
  a.items = upload(items);
  a.prefix_rows = upload(p.plan.prefix_rows);
  a.prefix_grid = p.g.prefix;
  a.combines = upload(p.plan.combines);
  a.counts = upload(counts);
  a.prefill_grid = p.g.prefill;
  a.decode_grid = p.g.decode;
  a.combine_grid = p.g.combine;
  a.partial_o = st.part_o;
  a.partial_lse = st.part_lse;
  a.out = st.out;
  a.num_heads = H;
  a.num_kv_heads = KVH;
  a.head_dim = D;
  a.block_size = bs;
  a.scale = 1.0f / std::sqrt(float(D));
  a.kv_fp8 = g_kv_fp8;
  a.k_scale = a.v_scale = 1.0f / 64;  // any scale: the kernels multiply by it either way
}

/// Both timings of one configuration, with its effective GB/s (decode) or TFLOP/s (prefill).
result_row run_lens(device_state& st, kv_cache_layout layout, int H, const std::vector<int>& lens, bool prefill,
                    int reps, const gpu::attention_tuning& tuning, const std::string& kv_label = {},
                    int shared_prefix = 0, bool cascade = false) {
  prepared p;
  prepare(st, p, layout, H, lens, prefill, tuning, shared_prefix, cascade);
  const auto [us, us_held] = measure(st, reps, [&] { p.run(); });
  result_row row;
  row.backend = p.be->name();
  row.kind = prefill ? "prefill" : cascade ? "decode cascade" : shared_prefix > 0 ? "decode shared prefix" : "decode";
  if (g_kv_fp8) row.kind += " fp8 cache";
  row.H = H;
  row.batch = int(lens.size());
  row.kv = lens[0];
  row.kv_label = kv_label.empty() ? std::to_string(lens[0]) : kv_label;
  row.us = us;
  row.us_held = us_held;
  double kv_tokens = 0, flops = 0;
  for (int len : lens) {
    kv_tokens += len;
    flops += 4.0 * H * D * (double(len) * (len + 1) / 2.0);
  }
  if (prefill) {
    row.tflops = flops / (us * 1e-6) / 1e12;
    row.tflops_held = flops / (us_held * 1e-6) / 1e12;
  } else {
    const double bytes = kv_tokens * KVH * D * (g_kv_fp8 ? 1 : 2) * 2 + double(lens.size()) * H * D * (4 + 2);
    row.gbs = bytes / (us * 1e-6) / 1e9;
    row.gbs_held = bytes / (us_held * 1e-6) / 1e9;
  }
  row.ctas = prefill ? p.g.prefill : p.g.decode;
  row.splits = p.plan.combines.empty() ? 1 : p.plan.combines.front().num_splits;
  return row;
}

result_row run_config(device_state& st, kv_cache_layout layout, int H, int batch, int kv, bool prefill, int reps,
                      const gpu::attention_tuning& tuning) {
  return run_lens(st, layout, H, std::vector<int>(size_t(batch), kv), prefill, reps, tuning);
}

/// The cascade point of issue #37: 256 decodes sharing a 4096-token prefix (the same blocks),
/// 256 private tokens each, 32/8, flash-decoding / 64: {per-sequence, cascade}.
std::pair<result_row, result_row> run_cascade_point(device_state& st, int reps, const gpu::attention_tuning& tuning) {
  const std::vector<int> lens(256, 4096 + 256);
  const std::string label = "4096 shared + 256";
  return {run_lens(st, kv_cache_layout::flash_decoding, 32, lens, false, reps, tuning, label, 4096, false),
          run_lens(st, kv_cache_layout::flash_decoding, 32, lens, false, reps, tuning, label, 4096, true)};
}

/// The cascade point's parts, each alone: the private suffixes (256 x 256 keys, per sequence),
/// the shared prefix (256 members whose keys end with the 4096 shared ones: the prefix pass and
/// the merge, no suffix pieces), and the whole point with attention_tuning::cascade_overlap the
/// other way from `tuning` (the prefix pass beside the suffix pieces on a second stream, or after
/// them on one); us each.
std::string cascade_breakdown(device_state& st, int reps, const gpu::attention_tuning& tuning) {
  const kv_cache_layout fd = kv_cache_layout::flash_decoding;
  const result_row suffix = run_lens(st, fd, 32, std::vector<int>(256, 256), false, reps, tuning);
  const result_row prefix = run_lens(st, fd, 32, std::vector<int>(256, 4096), false, reps, tuning, {}, 4096, true);
  gpu::attention_tuning flipped = tuning;
  flipped.cascade_overlap = !tuning.cascade_overlap;
  const result_row other =
      run_lens(st, fd, 32, std::vector<int>(256, 4096 + 256), false, reps, flipped, {}, 4096, true);
  char line[320];
  std::snprintf(line, sizeof line,
                "cascade parts: suffixes alone (256 x 256, per sequence) %.1f us; prefix alone (256 x 4096 shared, "
                "prefix pass + merge) %.1f us; the whole point with the prefix pass %s %.1f us\n",
                suffix.us, prefix.us, flipped.cascade_overlap ? "on a second stream" : "on one stream", other.us);
  return line;
}

std::string cascade_summary(const std::pair<result_row, result_row>& c) {
  char line[320];
  std::snprintf(line, sizeof line,
                "cascade, 256 x (4096 shared + 256), 32/8: per-sequence %.1f us (held %.1f), cascade %.1f us "
                "(held %.1f): %.2fx, held %.2fx (target >= 8)\n",
                c.first.us, c.first.us_held, c.second.us, c.second.us_held, c.first.us / c.second.us,
                c.first.us_held / c.second.us_held);
  return line;
}

/// The offline workload of issue #8 (1000 x 128 in / 1024 out at ~250 running): 250 decode
/// sequences with KV lengths spread evenly over 128-1152, in shuffled order.
std::vector<int> mixed_lens() {
  std::vector<int> lens(250);
  for (int i = 0; i < 250; ++i) lens[i] = 128 + i * 1024 / 249;
  std::shuffle(lens.begin(), lens.end(), std::mt19937(7));
  return lens;
}

/// Device-to-device copy bandwidth (bytes read + written), the streaming ceiling.
double copy_gbs(device_state& st) {
  const size_t bytes = size_t(2) << 30;
  void* src = st.k;
  void* dst = static_cast<char*>(st.k) + bytes;
  std::vector<float> t;
  for (int r = 0; r < 7; ++r) {
    CK(cudaEventRecord(st.a));
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(st.b));
    CK(cudaEventSynchronize(st.b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, st.a, st.b));
    if (r >= 2) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return 2.0 * bytes / (t[t.size() / 2] * 1e-3) / 1e9;
}

/// One named kernel choice of run_kernels.
struct arm {
  std::string name;
  gpu::attention_tuning tuning;
};

/// The shipping kernels side by side: each decode point under the flash-decoding backend's two
/// decode kernels and two split merges, each prefill point under every prefill kernel.
void run_kernels(device_state& st, double copy) {
  std::printf("device-to-device copy %.0f GB/s (read + write); L2 flushed by a 256 MiB %s\n\n", copy,
              g_flush_by_write ? "memset" : "read");
  std::vector<arm> decode_arms, prefill_arms;
  for (gpu::decode_kernel k : {gpu::decode_kernel::tma, gpu::decode_kernel::cp_async})
    for (gpu::split_merge m : {gpu::split_merge::last_piece, gpu::split_merge::separate_kernel}) {
      arm a{std::string(bench_cuda::name_of(k)) + ", " + bench_cuda::name_of(m), {}};
      a.tuning.decode = k;
      a.tuning.merge = m;
      decode_arms.push_back(a);
    }
  for (gpu::prefill_kernel k : {gpu::prefill_kernel::automatic, gpu::prefill_kernel::wgmma_tma_persistent,
                                gpu::prefill_kernel::wgmma_cp_async, gpu::prefill_kernel::mma_sync}) {
    arm a{bench_cuda::name_of(k), {}};
    a.tuning.prefill = k;
    prefill_arms.push_back(a);
  }
  struct point { kv_cache_layout layout; int H, batch, kv; bool prefill; };
  const kv_cache_layout fd = kv_cache_layout::flash_decoding, vl = kv_cache_layout::vllm;
  const point points[] = {{fd, 32, 32, 2048, false}, {fd, 64, 32, 2048, false}, {fd, 32, 32, 8192, false},
                          {fd, 64, 64, 2048, false}, {fd, 32, 1, 32768, false}, {fd, 64, 1, 32768, false},
                          {fd, 32, 4, 4096, true},   {vl, 32, 4, 4096, true},   {fd, 32, 16, 1024, true}};
  std::printf("| backend | kind | q/kv | batch | KV | kernels | µs | GB/s | TFLOP/s | µs held | GB/s held | "
              "TFLOP/s held | CTAs | splits |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const point& p : points)
    for (const arm& a : p.prefill ? prefill_arms : decode_arms) {
      const result_row r = run_config(st, p.layout, p.H, p.batch, p.kv, p.prefill, p.prefill ? 7 : 15, a.tuning);
      std::printf("| %s | %s | %d/%d | %d | %d | %s | %.1f | %.0f | %.1f | %.1f | %.0f | %.1f | %d | %d |\n",
                  r.backend.c_str(), r.kind.c_str(), r.H, KVH, r.batch, r.kv, a.name.c_str(), r.us, r.gbs, r.tflops,
                  r.us_held, r.gbs_held, r.tflops_held, r.ctas, r.splits);
    }
  for (const arm& a : decode_arms) {
    const result_row r = run_lens(st, fd, 32, mixed_lens(), false, 15, a.tuning, "128-1152");
    std::printf("| %s | %s | %d/%d | %d | %s | %s | %.1f | %.0f | - | %.1f | %.0f | - | %d | %d |\n", r.backend.c_str(),
                r.kind.c_str(), r.H, KVH, r.batch, r.kv_label.c_str(), a.name.c_str(), r.us, r.gbs, r.us_held,
                r.gbs_held, r.ctas, r.splits);
  }
}

/// The streaming-read ceiling at the byte counts of the decode grid (K + V of batch x KV).
void run_stream(device_state& st, int sms) {
  std::printf("\n| streaming read | MB | CTAs | µs | GB/s | µs held | GB/s held |\n|---|---|---|---|---|---|---|\n");
  const std::pair<int, int> shapes[] = {{32, 512}, {1, 32768}, {32, 2048}, {64, 2048}, {32, 8192}, {128, 8192}};
  for (auto [b, kv] : shapes) {
    const size_t bytes = size_t(b) * kv * KVH * D * 2;  // K and V: two halves of the k buffer
    for (int per_sm : {2, 4}) {
      const auto [us, us_held] = measure(st, 15, [&] {
        if (int e = cuda::launch_stream_read(st.k, 2 * bytes, st.sink, sms * per_sm, nullptr)) CK(cudaError_t(e));
      });
      std::printf("| %d x %d | %.0f | %d | %.1f | %.0f | %.1f | %.0f |\n", b, kv, 2 * bytes / 1e6, sms * per_sm, us,
                  2 * bytes / (us * 1e-6) / 1e9, us_held, 2 * bytes / (us_held * 1e-6) / 1e9);
    }
  }
}

/// Decode after a short programmatic-dependent predecessor (the step's rope_kv_write), with
/// programmatic launch off and on: the µs the attention adds after the predecessor.
void run_pdl(device_state& st) {
  constexpr int kPredNs = 4000;
  std::printf("\n| backend | q/kv | batch | KV | alone µs held | pred µs | + attn, PDL off | "
              "+ attn, PDL on | attn adds, off | attn adds, on |\n|---|---|---|---|---|---|---|---|---|---|\n");
  struct point { kv_cache_layout layout; int H; std::vector<int> lens; const char* label; };
  const kv_cache_layout fd = kv_cache_layout::flash_decoding, vl = kv_cache_layout::vllm;
  const point points[] = {{vl, 32, {256}, "256"},   {fd, 32, {256}, "256"},       {vl, 64, {256}, "256"},
                          {vl, 32, {512}, "512"},   {vl, 64, {2048}, "2048"},
                          {vl, 32, {2048}, "2048"}, {vl, 32, {32768}, "32768"},   {fd, 32, {32768}, "32768"},
                          {vl, 32, std::vector<int>(32, 2048), "2048"}, {fd, 32, std::vector<int>(32, 2048), "2048"},
                          {vl, 32, mixed_lens(), "128-1152"}, {fd, 32, mixed_lens(), "128-1152"}};
  {
    for (const point& pt : points) {
      prepared p;
      prepare(st, p, pt.layout, pt.H, pt.lens, false, {});
      double pred[2] = {0, 0}, both[2] = {0, 0};
      for (int pdl = 0; pdl < 2; ++pdl) {
        cuda::set_programmatic_launch(pdl == 1);
        pred[pdl] = measure(st, 15, [&] { CK(cudaError_t(cuda::launch_pdl_predecessor(kPredNs, nullptr))); }).second;
        both[pdl] = measure(st, 15, [&] {
          CK(cudaError_t(cuda::launch_pdl_predecessor(kPredNs, nullptr)));
          p.run();
        }).second;
      }
      cuda::set_programmatic_launch(false);
      const double alone = measure(st, 15, [&] { p.run(); }).second;
      cuda::set_programmatic_launch(true);
      std::printf("| %s | %d/%d | %zu | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", p.be->name().c_str(), pt.H,
                  KVH, pt.lens.size(), pt.label, alone, pred[0], both[0], both[1], both[0] - pred[0],
                  both[1] - pred[1]);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  bool quick = false, kernels = false, stream = false, pdl = false, cascade = false, fp8_kv = false;
  gpu::cuda_tuning tuning;
  int one_reps = 1;
  std::vector<std::string> one;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--kernels")) kernels = true;
    else if (!std::strcmp(argv[i], "--stream")) stream = true;
    else if (!std::strcmp(argv[i], "--pdl")) pdl = true;
    else if (!std::strcmp(argv[i], "--cascade")) cascade = true;
    else if (!std::strcmp(argv[i], "--fp8-kv")) fp8_kv = true;
    else if (bench_cuda::parse_tuning_flag(i, argc, argv, tuning)) continue;
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) one_reps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--flush") && i + 1 < argc) {
      const std::string how = argv[++i];
      if (how != "read" && how != "write") {
        std::fprintf(stderr, "bench_cuda_attention: --flush takes read or write, not '%s'\n", how.c_str());
        return 2;
      }
      g_flush_by_write = how == "write";
    }
    else if (!std::strcmp(argv[i], "--one") && i + 5 < argc) one.assign(argv + i + 1, argv + i + 6), i += 5;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("bench_cuda_attention: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  device_state st;
  st.cache_tokens = size_t(256) * 8192 + 4096;  // the largest decode grid point
  const size_t cache_bytes = st.cache_tokens * KVH * D * 2;
  CK(cudaMalloc(&st.k, cache_bytes));
  CK(cudaMalloc(&st.v, cache_bytes));
  fill_random(st.k, cache_bytes, 1);
  fill_random(st.v, cache_bytes, 2);
  st.max_tokens = 16384;
  CK(cudaMalloc(&st.flush, kFlushBytes));
  CK(cudaMemset(st.flush, 0, kFlushBytes));
  st.flush_ctas = 4 * prop.multiProcessorCount;
  CK(cudaMalloc(reinterpret_cast<void**>(&st.q), st.max_tokens * (64 + 2 * KVH) * D * 4));
  {
    const size_t n = st.max_tokens * (64 + 2 * KVH) * D, chunk = size_t(1) << 22;
    std::vector<float> qh(chunk);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    for (auto& x : qh) x = nd(rng);
    for (size_t off = 0; off < n; off += chunk)
      CK(cudaMemcpy(st.q + off, qh.data(), std::min(chunk, n - off) * 4, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&st.q16, st.max_tokens * 64 * D * 2));
  // q times its scale
  fill_random(st.q16, st.max_tokens * 64 * D * 2, 4, cuda::prefill_q_scale(1.0f / std::sqrt(float(D))));
  CK(cudaMalloc(&st.out, st.max_tokens * 64 * D * 2));
  st.max_partials = 16384;  // split pieces, and the cascade point's 256 members x 8 KV heads x (prefix + suffix)
  CK(cudaMalloc(reinterpret_cast<void**>(&st.part_o), st.max_partials * cuda::attn_tile_rows * D * 4));
  CK(cudaMalloc(reinterpret_cast<void**>(&st.part_lse), st.max_partials * cuda::attn_tile_rows * 2 * 4));
  CK(cudaEventCreate(&st.a));
  CK(cudaEventCreate(&st.b));
  void* hold = nullptr;
  CK(cudaHostAlloc(&hold, sizeof(int), cudaHostAllocMapped));
  st.hold_host = static_cast<volatile int*>(hold);
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&st.hold_dev), hold, 0));
  CK(cudaMalloc(reinterpret_cast<void**>(&st.sink), 16));
  if (kernels || stream || pdl) {
    if (kernels) run_kernels(st, copy_gbs(st));
    if (stream) run_stream(st, prop.multiProcessorCount);
    if (pdl) run_pdl(st);
    return 0;
  }
  if (cascade) {
    const int reps = one_reps > 1 ? one_reps : 15;
    std::printf("%s", cascade_summary(run_cascade_point(st, reps, tuning.attention)).c_str());
    std::printf("%s", cascade_breakdown(st, reps, tuning.attention).c_str());
    return 0;
  }
  if (fp8_kv) {
    // The same buffers hold E4M3 codes now (the FP8 cache reads half of each). The bf16 rows first,
    // over the bf16 values, then the FP8 rows.
    const int reps = quick ? 5 : 15;
    std::vector<result_row> rows;
    if (one.empty())
      for (int b : {32, 64})
        for (int kv : {2048, 8192})
          rows.push_back(run_config(st, kv_cache_layout::flash_decoding, 32, b, kv, false, reps, tuning.attention));
    fill_random_e4m3(st.k, cache_bytes, 5);
    fill_random_e4m3(st.v, cache_bytes, 6);
    g_kv_fp8 = true;
    if (!one.empty()) {
      const result_row r =
          run_config(st, kv_cache_layout::flash_decoding, std::atoi(one[2].c_str()), std::atoi(one[3].c_str()),
                     std::atoi(one[4].c_str()), false, one_reps, tuning.attention);
      std::printf("%s %s: %.1f us, %.0f GB/s of cache bytes read (held: %.1f us, %.0f GB/s)\n", r.backend.c_str(),
                  r.kind.c_str(), r.us, r.gbs, r.us_held, r.gbs_held);
      return 0;
    }
    double worst = 1e30, worst_held = 1e30;
    for (int b : {32, 64})
      for (int kv : {2048, 8192}) {
        rows.push_back(run_config(st, kv_cache_layout::flash_decoding, 32, b, kv, false, reps, tuning.attention));
        worst = std::min(worst, rows.back().gbs);
        worst_held = std::min(worst_held, rows.back().gbs_held);
      }
    std::printf("| backend | kind | q/kv heads | batch | KV len | µs | GB/s | µs held | GB/s held | CTAs | splits |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const result_row& r : rows)
      std::printf("| %s | %s | %d/%d | %d | %s | %.1f | %.0f | %.1f | %.0f | %d | %d |\n", r.backend.c_str(),
                  r.kind.c_str(), r.H, KVH, r.batch, r.kv_label.c_str(), r.us, r.gbs, r.us_held, r.gbs_held, r.ctas,
                  r.splits);
    std::printf("device: %s; flash-decoding over the FP8 cache, batch 32-64, KV 2048-8192, 32/8, worst: %.0f GB/s of "
                "cache bytes read, held %.0f GB/s (target 3600 on an H200)\n",
                prop.name, worst, worst_held);
    return 0;
  }
  if (!one.empty()) {
    const auto layout = one[0] == "vllm" ? kv_cache_layout::vllm : kv_cache_layout::flash_decoding;
    const result_row r =
        run_config(st, layout, std::atoi(one[2].c_str()), std::atoi(one[3].c_str()), std::atoi(one[4].c_str()),
                   one[1] == "prefill", one_reps, tuning.attention);
    std::printf("%s %s: %.1f us, %.0f GB/s, %.1f TFLOP/s (held: %.1f us)\n", r.backend.c_str(), r.kind.c_str(), r.us,
                r.gbs, r.tflops, r.us_held);
    return 0;
  }
  const double copy = copy_gbs(st);
  const int reps = quick ? 5 : 15;
  std::vector<result_row> rows;
  const std::vector<int> batches = quick ? std::vector<int>{1, 32, 256} : std::vector<int>{1, 8, 32, 64, 128, 256};
  for (kv_cache_layout layout : {kv_cache_layout::flash_decoding, kv_cache_layout::vllm}) {
    for (int H : {32, 64}) {
      for (int b : batches)
        for (int kv : {512, 2048, 8192}) rows.push_back(run_config(st, layout, H, b, kv, false, reps, tuning.attention));
      for (int b : {1, 8}) rows.push_back(run_config(st, layout, H, b, 32768, false, reps, tuning.attention));
    }
    const std::pair<int, int> prefills[] = {{1, 4096}, {4, 4096}, {1, 16384}, {16, 1024}};
    for (auto [b, n] : prefills) rows.push_back(run_config(st, layout, 32, b, n, true, quick ? 3 : 7, tuning.attention));
  }
  const auto cascade_rows = run_cascade_point(st, reps, tuning.attention);
  rows.push_back(cascade_rows.first);
  rows.push_back(cascade_rows.second);
  // Issue #8's decode steps: single stream at context 256, the offline batch of mixed lengths.
  for (kv_cache_layout layout : {kv_cache_layout::flash_decoding, kv_cache_layout::vllm})
    for (int H : {32, 64}) {
      rows.push_back(run_lens(st, layout, H, {256}, false, reps, tuning.attention));
      rows.push_back(run_lens(st, layout, H, mixed_lens(), false, reps, tuning.attention, "128-1152"));
    }
  std::string table = "| backend | kind | q/kv heads | batch | KV len | µs | GB/s | TFLOP/s | µs held | GB/s held | "
                      "TFLOP/s held | CTAs | splits |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  char line[320];
  for (const result_row& r : rows) {
    std::snprintf(line, sizeof line,
                  "| %s | %s | %d/%d | %d | %s | %.1f | %.0f | %.1f | %.1f | %.0f | %.1f | %d | %d |\n",
                  r.backend.c_str(), r.kind.c_str(), r.H, KVH, r.batch, r.kv_label.c_str(), r.us, r.gbs, r.tflops,
                  r.us_held, r.gbs_held, r.tflops_held, r.ctas, r.splits);
    table += line;
  }
  // Targets of the attention issue.
  auto find = [&](const std::string& be, const char* kind, int H, int b, int kv) -> const result_row* {
    for (const result_row& r : rows)
      if (r.backend == be && r.kind == kind && r.H == H && r.batch == b && r.kv == kv) return &r;
    return nullptr;
  };
  double fd_min_big = 1e30, worst_ratio = 1e30, fd_min_big_held = 1e30, worst_ratio_held = 1e30;
  for (const result_row& r : rows) {
    if (r.kind != "decode" || r.batch == 250) continue;
    if (r.backend == "flash-decoding" && r.batch >= 32 && r.kv >= 2048) {
      fd_min_big = std::min(fd_min_big, r.gbs);
      fd_min_big_held = std::min(fd_min_big_held, r.gbs_held);
    }
    if (r.backend == "vllm")
      if (const result_row* f = find("flash-decoding", "decode", r.H, r.batch, r.kv)) {
        worst_ratio = std::min(worst_ratio, r.gbs / f->gbs);
        worst_ratio_held = std::min(worst_ratio_held, r.gbs_held / f->gbs_held);
      }
  }
  std::string summary;
  std::snprintf(line, sizeof line,
                "device: %s, %d SMs; device-to-device copy %.0f GB/s (read + write); L2 flushed by a 256 MiB %s\n",
                prop.name, prop.multiProcessorCount, copy, g_flush_by_write ? "memset (--flush write)" : "read");
  summary += line;
  std::snprintf(line, sizeof line,
                "flash-decoding, batch >= 32 and KV >= 2048, worst: %.0f GB/s, held %.0f GB/s (target 3800)\n",
                fd_min_big, fd_min_big_held);
  summary += line;
  for (int H : {32, 64})
    if (const result_row* r = find("flash-decoding", "decode", H, 1, 32768)) {
      std::snprintf(line, sizeof line,
                    "flash-decoding batch 1 x 32768, %d/8: %.0f GB/s, held %.0f GB/s (target 3000)\n",
                    H, r->gbs, r->gbs_held);
      summary += line;
    }
  std::snprintf(line, sizeof line,
                "vllm / flash-decoding, worst over the decode grid: %.2f, held %.2f (target >= 0.75)\n",
                worst_ratio, worst_ratio_held);
  summary += line;
  for (const char* be : {"flash-decoding", "vllm"})
    for (int b : {1, 250})
      if (const result_row* r = find(be, "decode", 32, b, b == 1 ? 256 : mixed_lens()[0])) {
        std::snprintf(line, sizeof line, "%s decode %s, 32/8: %.1f us, held %.1f us\n", be,
                      b == 1 ? "1 x 256" : "250 x 128-1152", r->us, r->us_held);
        summary += line;
      }
  for (const char* be : {"flash-decoding", "vllm"})
    if (const result_row* r = find(be, "prefill", 32, 4, 4096)) {
      std::snprintf(line, sizeof line, "%s prefill 4 x 4096 causal: %.1f TFLOP/s (target 450)\n", be, r->tflops);
      summary += line;
    }
  summary += cascade_summary(cascade_rows);
  std::printf("%s\n%s", table.c_str(), summary.c_str());
  if (!out_dir.empty()) {
    const std::string path = out_dir + "/attention_grid.md";
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fprintf(f, "# bench_cuda_attention\n\n%s\n%s", table.c_str(), summary.c_str());
      std::fclose(f);
    }
  }
  return 0;
}
