// Attention backends on the device: decode (µs, effective GB/s = bytes of K and V read + Q + O)
// and causal prefill (TFLOP/s), L2 flushed before every timed run, median of the runs.
//   bench_cuda_attention [--out DIR] [--quick]
//   bench_cuda_attention --variants          kernel variants (ACTORSERVE_ATTN_VARIANT) side by side
//   bench_cuda_attention --one vllm|fd decode|prefill H BATCH KV   one configuration (for ncu)
// Writes DIR/attention_grid.md (the whole grid as a table) and prints it with a target summary.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/cuda/attention/backend.hpp"

namespace cuda = actorserve::gpu::cuda;
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

struct device_state {
  void* k = nullptr;
  void* v = nullptr;
  size_t cache_tokens = 0;
  void* flush = nullptr;
  float* q = nullptr;
  void* out = nullptr;
  float* part_o = nullptr;
  float* part_lse = nullptr;
  size_t max_tokens = 0, max_partials = 0;
  cudaEvent_t a = nullptr, b = nullptr;
};

/// Fills `bytes` of device memory with random bf16 normals (a 64 MiB random pattern, repeated).
void fill_random(void* dst, size_t bytes, uint32_t seed) {
  const size_t pattern = std::min(bytes, size_t(64) << 20);
  std::vector<uint16_t> host(pattern / 2);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  for (auto& h : host) {
    float f = nd(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    h = uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
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
  std::string backend, kind;
  int H = 0, batch = 0, kv = 0;
  double us = 0, gbs = 0, tflops = 0;
  int ctas = 0, splits = 0;
};

/// Median µs of `reps` runs of one configuration, each after an L2 flush.
result_row run_config(device_state& st, kv_cache_layout layout, int H, int batch, int kv, bool prefill, int reps) {
  cuda::attention_shape shape;
  shape.dt = cuda::act_dtype::bf16;
  shape.num_heads = H;
  shape.num_kv_heads = KVH;
  shape.head_dim = D;
  shape.block_size = layout == kv_cache_layout::vllm ? 16 : 64;
  auto made = cuda::make_attention_backend(layout, shape);
  if (!made) {
    std::fprintf(stderr, "backend: %s\n", made.err().message.c_str());
    std::exit(1);
  }
  const cuda::attention_backend& be = **made;
  const int bs = be.block_size(), q_len = prefill ? kv : 1;
  const int blocks_per_seq = (kv + bs - 1) / bs;
  const size_t total_blocks = size_t(batch) * blocks_per_seq;
  if (total_blocks * bs > st.cache_tokens || size_t(batch) * q_len > st.max_tokens) {
    std::fprintf(stderr, "config too large for the buffers\n");
    std::exit(1);
  }
  std::vector<int32_t> bt(total_blocks);
  std::iota(bt.begin(), bt.end(), 0);
  std::shuffle(bt.begin(), bt.end(), std::mt19937(uint32_t(batch * 31 + kv)));
  std::vector<cuda::attn_seq> seqs(static_cast<size_t>(batch));
  for (int s = 0; s < batch; ++s) seqs[s] = {s * q_len, q_len, kv, s * blocks_per_seq};
  const cuda::attention_plan plan = be.plan(seqs);
  if (size_t(plan.num_partials) > st.max_partials) {
    std::fprintf(stderr, "too many partials\n");
    std::exit(1);
  }
  const cuda::attention_grids g = be.grids(plan);
  const int32_t n_prefill = int32_t(plan.items.size()) - plan.num_decode_items;
  std::vector<int32_t> counts = {n_prefill, int32_t(plan.combines.size()), plan.num_decode_items, 0};
  cuda::attn_launch a;
  a.q = st.q;
  a.q_stride = (H + 2 * KVH) * D;
  a.k_cache = st.k;
  a.v_cache = st.v;
  a.block_tables = upload(bt);
  a.seqs = upload(seqs);
  a.items = upload(plan.items);
  a.combines = upload(plan.combines);
  a.counts = upload(counts);
  a.prefill_grid = g.prefill;
  a.decode_grid = g.decode;
  a.combine_grid = g.combine;
  a.partial_o = st.part_o;
  a.partial_lse = st.part_lse;
  a.out = st.out;
  a.num_heads = H;
  a.num_kv_heads = KVH;
  a.head_dim = D;
  a.block_size = bs;
  a.scale = 1.0f / std::sqrt(float(D));
  std::vector<float> times;
  for (int r = 0; r < reps + 2; ++r) {
    CK(cudaMemsetAsync(st.flush, r & 0xff, kFlushBytes));
    CK(cudaEventRecord(st.a));
    if (int e = be.run(a, nullptr)) {
      std::fprintf(stderr, "run: %s\n", cudaGetErrorString(cudaError_t(e)));
      std::exit(1);
    }
    CK(cudaEventRecord(st.b));
    CK(cudaEventSynchronize(st.b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, st.a, st.b));
    if (r >= 2) times.push_back(ms * 1000.0f);
  }
  CK(cudaGetLastError());
  std::sort(times.begin(), times.end());
  result_row row;
  row.backend = be.name();
  row.kind = prefill ? "prefill" : "decode";
  row.H = H;
  row.batch = batch;
  row.kv = kv;
  row.us = times[times.size() / 2];
  const double tokens = double(batch) * kv;
  if (prefill) {
    const double flops = 4.0 * H * D * double(batch) * (double(kv) * (kv + 1) / 2.0);
    row.tflops = flops / (row.us * 1e-6) / 1e12;
    row.gbs = 0;
  } else {
    const double bytes = tokens * KVH * D * 2 * 2 + double(batch) * H * D * (4 + 2);
    row.gbs = bytes / (row.us * 1e-6) / 1e9;
  }
  row.ctas = prefill ? g.prefill : g.decode;
  row.splits = plan.combines.empty() ? 1 : plan.combines.front().num_splits;
  for (const void* p : {static_cast<const void*>(a.block_tables), static_cast<const void*>(a.seqs),
                        static_cast<const void*>(a.items), static_cast<const void*>(a.combines),
                        static_cast<const void*>(a.counts)})
    CK(cudaFree(const_cast<void*>(p)));
  return row;
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

/// One configuration per kernel variant (launch.hpp: prefill variant | decode variant << 4).
void run_variants(device_state& st, double copy) {
  std::printf("device-to-device copy %.0f GB/s (read + write)\n\n", copy);
  struct point { kv_cache_layout layout; int H, batch, kv; bool prefill; std::vector<int> variants; };
  const kv_cache_layout fd = kv_cache_layout::flash_decoding, vl = kv_cache_layout::vllm;
  const std::vector<int> dec = {0, 16, 32, 48, 64};
  const point points[] = {
      {fd, 32, 1, 32768, false, dec}, {fd, 64, 1, 32768, false, dec}, {fd, 32, 8, 2048, false, dec},
      {fd, 32, 32, 2048, false, dec}, {fd, 64, 32, 2048, false, dec}, {fd, 32, 32, 8192, false, dec},
      {fd, 32, 256, 8192, false, dec}, {fd, 64, 128, 2048, false, dec}, {vl, 32, 1, 32768, false, {0, 16}},
      {vl, 64, 1, 512, false, {0, 16}}, {vl, 32, 32, 2048, false, {0}}, {vl, 32, 8, 8192, false, {0}},
      {fd, 32, 32, 512, false, dec}, {fd, 64, 64, 2048, false, dec}, {fd, 32, 4, 4096, true, {0, 1, 2}},
      {fd, 32, 1, 16384, true, {0, 1, 2}}, {fd, 32, 16, 1024, true, {0, 1, 2}}, {vl, 32, 4, 4096, true, {0}}};
  std::printf("| backend | kind | q/kv | batch | KV | variant | µs | GB/s | TFLOP/s | CTAs | splits |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const point& p : points)
    for (int v : p.variants) {
      setenv("ACTORSERVE_ATTN_VARIANT", std::to_string(v).c_str(), 1);
      const result_row r = run_config(st, p.layout, p.H, p.batch, p.kv, p.prefill, p.prefill ? 5 : 15);
      std::printf("| %s | %s | %d/%d | %d | %d | %d | %.1f | %.0f | %.1f | %d | %d |\n", r.backend.c_str(),
                  r.kind.c_str(), r.H, KVH, r.batch, r.kv, v, r.us, r.gbs, r.tflops, r.ctas, r.splits);
    }
  unsetenv("ACTORSERVE_ATTN_VARIANT");
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  bool quick = false, variants = false;
  std::vector<std::string> one;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--variants")) variants = true;
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
  CK(cudaMalloc(&st.out, st.max_tokens * 64 * D * 2));
  st.max_partials = 32 * size_t(prop.multiProcessorCount) * 2;
  CK(cudaMalloc(reinterpret_cast<void**>(&st.part_o), st.max_partials * cuda::attn_tile_rows * D * 4));
  CK(cudaMalloc(reinterpret_cast<void**>(&st.part_lse), st.max_partials * cuda::attn_tile_rows * 2 * 4));
  CK(cudaEventCreate(&st.a));
  CK(cudaEventCreate(&st.b));
  if (variants) {
    run_variants(st, copy_gbs(st));
    return 0;
  }
  if (!one.empty()) {
    const auto layout = one[0] == "vllm" ? kv_cache_layout::vllm : kv_cache_layout::flash_decoding;
    const result_row r =
        run_config(st, layout, std::atoi(one[2].c_str()), std::atoi(one[3].c_str()), std::atoi(one[4].c_str()),
                   one[1] == "prefill", 1);
    std::printf("%s %s: %.1f us, %.0f GB/s, %.1f TFLOP/s\n", r.backend.c_str(), r.kind.c_str(), r.us, r.gbs, r.tflops);
    return 0;
  }
  const double copy = copy_gbs(st);
  const int reps = quick ? 5 : 15;
  std::vector<result_row> rows;
  const std::vector<int> batches = quick ? std::vector<int>{1, 32, 256} : std::vector<int>{1, 8, 32, 64, 128, 256};
  for (kv_cache_layout layout : {kv_cache_layout::flash_decoding, kv_cache_layout::vllm}) {
    for (int H : {32, 64}) {
      for (int b : batches)
        for (int kv : {512, 2048, 8192}) rows.push_back(run_config(st, layout, H, b, kv, false, reps));
      for (int b : {1, 8}) rows.push_back(run_config(st, layout, H, b, 32768, false, reps));
    }
    const std::pair<int, int> prefills[] = {{1, 4096}, {4, 4096}, {1, 16384}, {16, 1024}};
    for (auto [b, n] : prefills) rows.push_back(run_config(st, layout, 32, b, n, true, quick ? 3 : 7));
  }
  std::string table = "| backend | kind | q/kv heads | batch | KV len | µs | GB/s | TFLOP/s | CTAs | splits |\n"
                      "|---|---|---|---|---|---|---|---|---|---|\n";
  char line[256];
  for (const result_row& r : rows) {
    std::snprintf(line, sizeof line, "| %s | %s | %d/%d | %d | %d | %.1f | %.0f | %.1f | %d | %d |\n",
                  r.backend.c_str(), r.kind.c_str(), r.H, KVH, r.batch, r.kv, r.us, r.gbs, r.tflops, r.ctas,
                  r.splits);
    table += line;
  }
  // Targets of the attention issue.
  auto find = [&](const std::string& be, const char* kind, int H, int b, int kv) -> const result_row* {
    for (const result_row& r : rows)
      if (r.backend == be && r.kind == kind && r.H == H && r.batch == b && r.kv == kv) return &r;
    return nullptr;
  };
  double fd_min_big = 1e30, worst_ratio = 1e30;
  for (const result_row& r : rows) {
    if (r.kind != "decode") continue;
    if (r.backend == "flash-decoding" && r.batch >= 32 && r.kv >= 2048) fd_min_big = std::min(fd_min_big, r.gbs);
    if (r.backend == "vllm")
      if (const result_row* f = find("flash-decoding", "decode", r.H, r.batch, r.kv)) worst_ratio = std::min(worst_ratio, r.gbs / f->gbs);
  }
  std::string summary;
  std::snprintf(line, sizeof line, "device: %s, %d SMs; device-to-device copy %.0f GB/s (read + write)\n", prop.name,
                prop.multiProcessorCount, copy);
  summary += line;
  std::snprintf(line, sizeof line, "flash-decoding, batch >= 32 and KV >= 2048, worst: %.0f GB/s (target 3800)\n",
                fd_min_big);
  summary += line;
  for (int H : {32, 64})
    if (const result_row* r = find("flash-decoding", "decode", H, 1, 32768)) {
      std::snprintf(line, sizeof line, "flash-decoding batch 1 x 32768, %d/8: %.0f GB/s (target 3000)\n", H, r->gbs);
      summary += line;
    }
  std::snprintf(line, sizeof line, "vllm / flash-decoding, worst over the decode grid: %.2f (target >= 0.75)\n",
                worst_ratio);
  summary += line;
  for (const char* be : {"flash-decoding", "vllm"})
    if (const result_row* r = find(be, "prefill", 32, 4, 4096)) {
      std::snprintf(line, sizeof line, "%s prefill 4 x 4096 causal: %.1f TFLOP/s (target 450)\n", be, r->tflops);
      summary += line;
    }
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
