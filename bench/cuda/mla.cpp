// DeepSeek-V2-Lite's latent attention on the device, one layer stage by stage (random bf16
// weights, gpu/cuda/mla): the projections, the absorbed form's W_UK, latent write, attention
// kernel (its split pieces merged as the executor merges them: within clusters on a 9.x GPU) and
// W_UV for decode batches of 1, 32
// and 196 at context 1,100 (each stage replayed as a CUDA graph, as decode steps run); and a
// 45,000-token prefill step of 1,000-token sequences in both forms (eager, as prefill steps run):
// the absorbed kernel over every row, and the up-projected one per sequence (gather, kv_b_proj's
// expansion, scores, causal softmax, P V).
// Each table gives ms per layer, ms over the 27 layers, and the whole of mla_attention::run plus
// o_proj as the executor launches it. A last table gives the absorbed attention kernel alone at
// decode batches 1, 32, 64 and 196 and contexts 1,100, 2,048 and 4,096: its GB/s of latent-cache
// reads (rows x context x 576 x 2 bytes over its time), each launch over another layer's cache
// as decode steps run, so that the caches' sum outgrows L2, with the split pieces merged within
// clusters (9.x GPUs) and by the last piece's CTA.
// With --probe, only the kernel's copy pipeline without its math (bench/README.md).
//   bench_cuda_mla [--out DIR] [--probe]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bench_timing.hpp"
#include "bench/cuda/probe/probe.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/mla/mla_attention.hpp"
#include "gpu/cuda/mla/mla_kernels.hpp"
#include "gpu/cuda/mla/up_projected_plan.hpp"
#include "gpu/cuda/model/cuda_model.hpp"

namespace cuda = actorserve::gpu::cuda;
using namespace actorserve::bench_cuda;

namespace {

constexpr int kHidden = 2048, kHeads = 16, kRank = 512, kNope = 128, kRope = 64, kV = 128, kLayers = 27;
constexpr int kQk = kNope + kRope, kW = kRank + kRope, kBlock = 16;
constexpr cuda::act_dtype kDt = cuda::act_dtype::bf16;

/// The GPU runs the cluster merge (compute capability 9.x, as cuda_tuning_for allows it).
bool g_cluster = false;
constexpr long long kKvbHead = static_cast<long long>(kNope + kV) * kRank;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(cudaGetLastError()));
    std::exit(1);
  }
}

/// Device memory freed at the end of a scenario.
struct arena {
  std::vector<void*> blocks;
  void* get(size_t bytes) {
    blocks.push_back(dmalloc(bytes));
    return blocks.back();
  }
  ~arena() {
    for (void* p : blocks) cudaFree(p);
  }
};

/// `num_seqs` sequences of `q_len` new tokens at the end of `context`, each over its own blocks;
/// up_projected: their rows are left to the up-projected form (token_seqs -1).
struct scenario {
  int rows = 0, context = 0;
  std::vector<cuda::attn_seq> seqs;
  std::vector<int32_t> tables, positions, slots, token_seqs;
};

scenario make_scenario(int num_seqs, int q_len, int context, bool up_projected) {
  scenario sc;
  sc.context = context;
  const int blocks = (context + kBlock - 1) / kBlock;
  for (int i = 0; i < num_seqs; ++i) {
    cuda::attn_seq a;
    a.q_start = sc.rows;
    a.q_len = q_len;
    a.context_len = context;
    a.bt_offset = static_cast<int32_t>(sc.tables.size());
    for (int b = 0; b < blocks; ++b) sc.tables.push_back(i * blocks + b);
    for (int k = 0; k < q_len; ++k) {
      const int pos = context - q_len + k;
      sc.positions.push_back(pos);
      sc.slots.push_back(sc.tables[size_t(a.bt_offset + pos / kBlock)] * kBlock + pos % kBlock);
      sc.token_seqs.push_back(up_projected ? -1 : i);
    }
    sc.seqs.push_back(a);
    sc.rows += q_len;
  }
  return sc;
}

struct stage {
  std::string name;
  double ms;
};

void print_table(const char* title, const std::vector<stage>& stages, const stage& whole) {
  double sum = 0.0;
  for (const stage& st : stages) sum += st.ms;
  report("\n%s\n", title);
  report("| stage | ms per layer | ms x %d layers | share |\n|---|---|---|---|\n", kLayers);
  for (const stage& st : stages)
    report("| %s | %.3f | %.2f | %.1f %% |\n", st.name.c_str(), st.ms, st.ms * kLayers, 100.0 * st.ms / sum);
  report("| sum of the stages | %.3f | %.2f | |\n", sum, sum * kLayers);
  report("| %s | %.3f | %.2f | |\n", whole.name.c_str(), whole.ms, whole.ms * kLayers);
}

/// One layer's weights, shared by the scenarios.
struct layer {
  cuda::device_mla w;
  void* o_proj = nullptr;
  float* inv_freq = nullptr;
};

layer make_layer() {
  layer l;
  l.w.q_proj = upload(normal_bf16(size_t(kHeads) * kQk * kHidden, 0.02f, 1));
  l.w.kv_a_proj = upload(normal_bf16(size_t(kW) * kHidden, 0.02f, 2));
  l.w.kv_a_norm = upload(std::vector<float>(kRank, 1.0f));
  l.w.kv_b_proj = upload(normal_bf16(size_t(kHeads) * (kNope + kV) * kRank, 0.05f, 3));
  l.o_proj = upload(normal_bf16(size_t(kHidden) * kHeads * kV, 0.02f, 4));
  std::vector<float> inv(kRope / 2);
  for (int i = 0; i < kRope / 2; ++i) inv[i] = 1.0f / std::pow(10000.0f, 2.0f * i / kRope);
  l.inv_freq = upload(inv);
  return l;
}

actorserve::model_config lite_config() {
  actorserve::model_config c;
  c.hidden_size = kHidden;
  c.num_heads = kHeads;
  c.num_kv_heads = kHeads;
  c.mla = actorserve::mla_config{.q_lora_rank = 0, .kv_lora_rank = kRank, .qk_nope_head_dim = kNope,
                                 .qk_rope_head_dim = kRope, .v_head_dim = kV};
  return c;
}

/// One scenario: its stages, then mla_attention::run and o_proj as the executor launches them.
void bench_scenario(cuda::gemm_runner& gemm, const layer& l, cudaStream_t s, int num_sms, const char* title,
                    int num_seqs, int q_len, int context, bool up_projected) {
  const bool decode = q_len == 1;
  const scenario sc = make_scenario(num_seqs, q_len, context, up_projected);
  const int n = sc.rows, H = kHeads;
  arena mem;
  const auto act = [&](size_t elems) { return mem.get(elems * 2); };
  const auto f32 = [&](size_t elems) { return static_cast<float*>(mem.get(elems * 4)); };
  void* x = upload(normal_bf16(size_t(n) * kHidden, 1.0f, 5));
  mem.blocks.push_back(x);
  void* q = act(size_t(n) * H * kQk);
  float* kv_a = f32(size_t(n) * kW);
  float* q_abs = f32(size_t(n) * H * kW);
  void* o_lat = act(size_t(n) * H * kRank);
  void* attn = act(size_t(n) * H * kV);
  float* residual = f32(size_t(n) * kHidden);
  const int splits = cuda::mla_num_splits(n, H, num_sms, cuda::mla_partial_rows(n, H, num_sms));
  float* partial_o = splits > 1 ? f32(size_t(splits) * n * H * kRank) : nullptr;
  float* partial_ml = splits > 1 ? f32(size_t(splits) * n * H * 2) : nullptr;
  const size_t counter_bytes = size_t(n) * cuda::mla_head_groups(H) * 4;
  auto* split_counters = static_cast<int32_t*>(mem.get(counter_bytes));
  check(cudaMemset(split_counters, 0, counter_bytes) == cudaSuccess, "counters");
  // Every context token's latent: random values (the timed latent write rewrites the new ones).
  void* cache = upload(normal_bf16(sc.tables.size() * kBlock * kW, 1.0f, 6));
  mem.blocks.push_back(cache);
  const auto dev = [&](const auto& v) {
    void* p = upload(v);
    mem.blocks.push_back(p);
    return p;
  };
  const auto* positions = static_cast<const int32_t*>(dev(sc.positions));
  const auto* slots = static_cast<const int32_t*>(dev(sc.slots));
  const auto* token_seqs = static_cast<const int32_t*>(dev(sc.token_seqs));
  const auto* tables = static_cast<const int32_t*>(dev(sc.tables));
  const auto* seqs = static_cast<const cuda::attn_seq*>(dev(sc.seqs));
  const float scale = 1.0f / std::sqrt(float(kQk));
  // Decode stages replay as graphs; prefill stages run eagerly, 3 times after 3 warm-ups.
  const auto timed = [&](const std::function<void()>& f) { return decode ? graph_ms(s, f) : time_ms(f, 3); };
  const auto ok = [](const auto& st, const char* what) { check(bool(st), what); };
  const cuda::mla_latent_args la{.kv_a = kv_a, .kv_a_bias = nullptr, .kv_a_norm = l.w.kv_a_norm, .eps = 1e-6f,
                                 .q = q, .q_abs = q_abs, .positions = positions, .slots = slots,
                                 .inv_freq = l.inv_freq, .attention_factor = 1.0f, .cache = cache, .n = n,
                                 .num_heads = H, .rank = kRank, .nope_dim = kNope, .rope_dim = kRope};
  const cuda::latent_attention_args aa{.q_abs = q_abs, .cache = cache, .block_tables = tables, .seqs = seqs,
                                       .token_seqs = token_seqs, .positions = positions, .n = n, .num_heads = H,
                                       .rank = kRank, .rope_dim = kRope, .block_size = kBlock,
                                       .num_splits = splits, .scale = scale,
                                       .cluster_merge = cuda::mla_merges_in_cluster(g_cluster, splits),
                                       .partial_o = partial_o,
                                       .partial_ml = partial_ml, .split_counters = split_counters,
                                       .out = o_lat};
  const char* w_uv = static_cast<const char*>(l.w.kv_b_proj) + size_t(kNope) * kRank * 2;
  // The absorbed form's per-head products as the executor runs them (mla_head_product: the head
  // GEMV at up to mla_head_gemv_max_rows rows, cuBLAS's strided-batched GEMM past them).
  const cuda::head_gemv_args w_uk_args{.batch = H, .m = n, .n = kRank, .k = kNope, .a = q, .lda = H * kQk,
                                       .stride_a = kQk, .b = l.w.kv_b_proj, .b_rows_are_n = false, .ldb = kRank,
                                       .stride_b = kKvbHead, .c = q_abs, .c_f32 = true, .ldc = H * kW, .stride_c = kW};
  const cuda::head_gemv_args w_uv_args{.batch = H, .m = n, .n = kV, .k = kRank, .a = o_lat, .lda = H * kRank,
                                       .stride_a = kRank, .b = w_uv, .b_rows_are_n = true, .ldb = kRank,
                                       .stride_b = kKvbHead, .c = attn, .c_f32 = false, .ldc = H * kV, .stride_c = kV};
  const auto by_cublas = [&](const cuda::head_gemv_args& g) {
    ok(gemm.run_batched(kDt, g.batch, g.m, g.n, g.k, g.a, g.lda, g.stride_a, g.b, g.b_rows_are_n, g.ldb, g.stride_b,
                        g.c, g.c_f32, g.ldc, g.stride_c),
       "strided-batched GEMM");
  };
  const bool head_gemv = !up_projected && cuda::mla_head_gemv_supported(w_uk_args);
  std::vector<stage> stages;
  stages.push_back({"q_proj", timed([&] { ok(gemm.run_act(kDt, x, n, kHidden, l.w.q_proj, H * kQk, q), "q_proj"); })});
  stages.push_back({"kv_a_proj_with_mqa", timed([&] {
                      ok(gemm.run(kDt, x, n, kHidden, l.w.kv_a_proj, kW, kv_a), "kv_a_proj");
                    })});
  if (!up_projected)
    stages.push_back({head_gemv ? "W_UK absorb (q_lat), head GEMV" : "W_UK absorb (q_lat)", timed([&] {
                        ok(cuda::mla_head_product(gemm, kDt, w_uk_args, s), "W_UK");
                      })});
  stages.push_back({"latent write (norm, rope, cache)",
                    timed([&] { check(cuda::mla_latent_write(kDt, la, s) == 0, "latent write"); })});
  if (!up_projected) {
    stages.push_back({"absorbed attention kernel (" + std::to_string(splits) + " splits, merged in it)",
                      timed([&] { check(cuda::latent_attention(kDt, aa, s) == 0, "latent attention"); })});
    stages.push_back({head_gemv ? "W_UV (o_lat to heads), head GEMV" : "W_UV (o_lat to heads)", timed([&] {
                        ok(cuda::mla_head_product(gemm, kDt, w_uv_args, s), "W_UV");
                      })});
  } else {
    // The up-projected pieces, by the groups and launches of mla_prefill.
    cuda::mla_prefill_workspace ws;
    ws.tokens = cuda::mla_prefill_workspace_tokens(H, context);
    ws.latents = act(size_t(ws.tokens) * kRank);
    ws.k = act(size_t(ws.tokens) * H * kQk);
    ws.v = act(size_t(ws.tokens) * H * kV);
    const std::vector<cuda::mla_up_projected_group> groups = cuda::plan_up_projected(sc.seqs, ws.tokens);
    check(!groups.empty(), "a plan of the prefill");
    stages.push_back({"gather latents", timed([&] {
                        for (const cuda::mla_up_projected_group& g : groups)
                          for (size_t i = 0; i < g.kv_rows.size(); ++i) {
                            const cuda::attn_seq& a = sc.seqs[size_t(g.first) + i];
                            const size_t row = size_t(g.kv_rows[i]);
                            const cuda::mla_gather_args ga{
                                .cache = cache, .block_table = tables + a.bt_offset,
                                .latents = static_cast<char*>(ws.latents) + row * kRank * 2,
                                .k = static_cast<char*>(ws.k) + row * H * kQk * 2, .context = a.context_len,
                                .num_heads = H, .rank = kRank, .nope_dim = kNope, .rope_dim = kRope,
                                .block_size = kBlock};
                            check(cuda::mla_gather_latents(kDt, ga, s) == 0, "gather");
                          }
                      })});
    stages.push_back({"expand k_nope, v (kv_b_proj, a GEMM each a group)", timed([&] {
                        for (const cuda::mla_up_projected_group& g : groups) {
                          ok(gemm.run_batched(kDt, H, g.context_rows, kNope, kRank, ws.latents, kRank, 0,
                                              l.w.kv_b_proj, true, kRank, kKvbHead, ws.k, false, H * kQk, kQk),
                             "k_nope");
                          ok(gemm.run_batched(kDt, H, g.context_rows, kV, kRank, ws.latents, kRank, 0, w_uv,
                                              true, kRank, kKvbHead, ws.v, false, H * kV, kV),
                             "v");
                        }
                      })});
    size_t launches = 0;
    for (const cuda::mla_up_projected_group& g : groups) launches += g.launches.size();
    stages.push_back({"causal attention (tensor cores, " + std::to_string(launches) + " launches)", timed([&] {
                        for (const cuda::mla_up_projected_group& g : groups)
                          for (const cuda::mla_up_projected_launch& pl : g.launches) {
                            const cuda::mla_up_projected_args ua{.q = q, .k = ws.k, .v = ws.v, .out = attn,
                                                                 .num_heads = H, .qk_dim = kQk, .v_dim = kV,
                                                                 .scale = scale, .launch = pl};
                            check(cuda::mla_up_projected_attention(kDt, ua, s) == 0, "up-projected attention");
                          }
                      })});
  }
  stages.push_back({"o_proj", timed([&] {
                      ok(gemm.run(kDt, attn, n, H * kV, l.o_proj, kHidden, residual, 1.0f), "o_proj");
                    })});
  // The whole, as the executor launches it.
  cuda::mla_attention mla;
  const auto alloc = [&](size_t bytes, void** out) -> actorserve::status {
    *out = mem.get(bytes);
    return {};
  };
  ok(mla.init(lite_config(), kDt, l.inv_freq, 1.0f, n, context, num_sms, g_cluster, alloc), "mla init");
  cuda::mla_step step{.positions = positions, .slots = slots, .token_seqs = token_seqs, .block_tables = tables,
                      .seqs = seqs};
  if (up_projected) step.up_projected = sc.seqs;
  step.absorbed_rows = up_projected ? 0 : n;
  const stage whole{"whole: mla_attention::run + o_proj", timed([&] {
                      ok(mla.run(gemm, l.w, x, n, step, cache, kBlock, attn, s), "mla run");
                      ok(gemm.run(kDt, attn, n, H * kV, l.o_proj, kHidden, residual, 1.0f), "o_proj");
                    })};
  check(cudaStreamSynchronize(s) == cudaSuccess, "the scenario");
  print_table(title, stages, whole);
  if (head_gemv) {
    const double uk = timed([&] { by_cublas(w_uk_args); }), uv = timed([&] { by_cublas(w_uv_args); });
    check(cudaStreamSynchronize(s) == cudaSuccess, "the cuBLAS products");
    report("the same W_UK and W_UV by cuBLAS's strided-batched GEMM: %.4f and %.4f ms a layer\n", uk, uv);
  }
}

/// Latent-cache bytes the layers' caches of one bandwidth point hold at least (as many layers as
/// that takes, past the model's 27 for small batches): well past an H100's or H200's 50 MB of L2,
/// so that each launch reads its keys from HBM.
constexpr size_t kColdBytes = size_t(256) << 20;

/// The absorbed attention kernel alone for `batch` decode rows at `context` keys (as the
/// executor splits it): ms a launch and GB/s of latent-cache reads, the launches of one replayed
/// graph each over its own layer's cache.
void bench_kernel_bandwidth(cudaStream_t s, int num_sms, int batch, int context, bool probe = false) {
  const scenario sc = make_scenario(batch, 1, context, false);
  const int n = sc.rows, H = kHeads;
  arena mem;
  const size_t cache_bytes = sc.tables.size() * kBlock * size_t(kW) * 2;
  const int layers = int((kColdBytes + cache_bytes - 1) / cache_bytes);  // 202 at batch 1 x 1,100
  std::vector<void*> caches;
  caches.push_back(upload(normal_bf16(cache_bytes / 2, 1.0f, 6)));
  mem.blocks.push_back(caches[0]);
  for (int i = 1; i < layers; ++i) {
    caches.push_back(mem.get(cache_bytes));
    check(cudaMemcpy(caches[i], caches[0], cache_bytes, cudaMemcpyDeviceToDevice) == cudaSuccess, "cache copy");
  }
  const auto dev = [&](const auto& v) {
    void* p = upload(v);
    mem.blocks.push_back(p);
    return p;
  };
  std::vector<float> q(size_t(n) * H * kW);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.01f * float(int(i % 17) - 8);
  const int splits = cuda::mla_num_splits(n, H, num_sms, cuda::mla_partial_rows(n, H, num_sms));
  const size_t counter_bytes = size_t(n) * cuda::mla_head_groups(H) * 4;
  auto* counters = static_cast<int32_t*>(mem.get(counter_bytes));
  check(cudaMemset(counters, 0, counter_bytes) == cudaSuccess, "counters");
  cuda::latent_attention_args a{
      .q_abs = static_cast<const float*>(dev(q)), .cache = nullptr,
      .block_tables = static_cast<const int32_t*>(dev(sc.tables)),
      .seqs = static_cast<const cuda::attn_seq*>(dev(sc.seqs)),
      .token_seqs = static_cast<const int32_t*>(dev(sc.token_seqs)),
      .positions = static_cast<const int32_t*>(dev(sc.positions)), .n = n, .num_heads = H, .rank = kRank,
      .rope_dim = kRope, .block_size = kBlock, .num_splits = splits, .scale = 1.0f / std::sqrt(float(kQk)),
      .cluster_merge = false, .partial_o = splits > 1 ? static_cast<float*>(mem.get(size_t(splits) * n * H * kRank * 4)) : nullptr,
      .partial_ml = splits > 1 ? static_cast<float*>(mem.get(size_t(splits) * n * H * 2 * 4)) : nullptr,
      .split_counters = counters, .out = mem.get(size_t(n) * H * kRank * 2)};
  const auto launch_ms = [&](bool cluster) {
    a.cluster_merge = cluster;
    const double ms = graph_ms(s, [&] {
                        for (void* c : caches) {
                          a.cache = c;
                          check(cuda::latent_attention(kDt, a, s) == 0, "latent attention");
                        }
                      }) /
                      layers;
    check(cudaStreamSynchronize(s) == cudaSuccess, "the bandwidth point");
    return ms;
  };
  const double read = double(n) * context * kW * 2;
  char cluster[64] = "- | -";
  if (g_cluster) {
    const double ms = launch_ms(true);
    std::snprintf(cluster, sizeof cluster, "%.1f | %.0f", ms * 1e3, read / (ms * 1e6));
  }
  const double last = launch_ms(false);
  report("| %d | %d | %d | %.1f | %s | %.1f | %.0f |\n", batch, context, splits, read / 1e6, cluster, last * 1e3,
         read / (last * 1e6));
  if (!probe) return;
  auto* sink = static_cast<unsigned*>(mem.get(16));
  for (int ring = 0; ring < cuda::latent_probe_ring_count; ++ring)
    for (int spin : {0, 500, 1000, 2000}) {
      const double ms = graph_ms(s, [&] {
                          for (void* c : caches) {
                            a.cache = c;
                            check(cuda::launch_latent_stream_probe(ring, a, spin, sink, s) == 0, "probe");
                          }
                        }) /
                        layers;
      check(cudaStreamSynchronize(s) == cudaSuccess, "the probe");
      const auto& r = cuda::latent_probe_rings[ring];
      report("| probe | %d | %d | %d keys x %d stages | %s | %d CTAs/SM | spin %d ns | %.1f us | %.0f GB/s |\n", batch,
             context, r.keys, r.stages, r.bulk ? "bulk rows" : "cp.async", cuda::latent_probe_ctas_per_sm(ring), spin,
             ms * 1e3, read / (ms * 1e6));
    }
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  bool probe = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--probe") == 0) probe = true;
    if (i + 1 < argc && std::strcmp(argv[i], "--out") == 0) out_dir = argv[i + 1];
  }
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  if (!out_dir.empty()) g_out = std::fopen((out_dir + "/bench_cuda_mla.txt").c_str(), "w");
  const auto p = cuda::properties(0);
  g_cluster = p.sm_major == 9;
  report("device: %s, %d SMs; DeepSeek-V2-Lite's attention (hidden %d, %d heads, kv_lora_rank %d, qk %d + %d, "
         "v %d, bf16), one layer\n",
         p.name.c_str(), p.num_sms, kHidden, kHeads, kRank, kNope, kRope, kV);
  cudaStream_t s = nullptr;
  check(cudaStreamCreate(&s) == cudaSuccess, "stream");
  if (probe) {
    report("latent copy pipeline probe (no math): the real kernel's row first, then each ring\n");
    for (const auto& [batch, context] : {std::pair{32, 2048}, std::pair{196, 4096}, std::pair{196, 1100}, std::pair{64, 2048}})
      bench_kernel_bandwidth(s, p.num_sms, batch, context, true);
    return 0;
  }
  cuda::gemm_runner gemm;
  check(bool(gemm.init(s, size_t(32) << 20)), "cuBLAS");
  const layer l = make_layer();
  for (int batch : {1, 32, 196}) {
    const std::string title = "decode batch " + std::to_string(batch) + ", context 1100 (absorbed; CUDA graphs)";
    bench_scenario(gemm, l, s, p.num_sms, title.c_str(), batch, 1, 1100, false);
  }
  bench_scenario(gemm, l, s, p.num_sms, "prefill 45 x 1000 tokens, absorbed (eager)", 45, 1000, 1000, false);
  bench_scenario(gemm, l, s, p.num_sms, "prefill 45 x 1000 tokens, up-projected (eager)", 45, 1000, 1000, true);
  report("\nabsorbed attention kernel alone: latent-cache reads (bf16, 576 wide; CUDA graphs, each launch over "
         "another layer's cache)\n");
  report("| batch | context | splits | MB read | cluster merge: us a launch | GB/s | last-piece merge: us a launch | "
         "GB/s |\n|---|---|---|---|---|---|---|---|\n");
  for (int batch : {1, 32, 64, 196})
    for (int context : {1100, 2048, 4096}) bench_kernel_bandwidth(s, p.num_sms, batch, context);
  if (g_out) std::fclose(g_out);
  return 0;
}
