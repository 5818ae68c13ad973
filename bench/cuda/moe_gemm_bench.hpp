#pragma once
// bench_cuda_kernels --only moe: the grouped expert GEMM at prefill sizes of Mixtral-8x7B,
// Qwen3-30B-A3B and DeepSeek-V2-Lite, each tile shape forced in turn (TFLOP/s of the routed rows'
// products; '-' where the device gives a block too little shared memory for the tile), beside
// cuBLAS on one dense product of the same rows and sizes; the same GEMM at decode batches (µs
// and the touched experts' weight bandwidth per projection and tile); then the whole routed FFN
// of a chunk (moe_ffn::run) on the grouped GEMM and on the per-expert cuBLAS path. The data the
// thresholds of gpu/cuda/moe/moe_tile.hpp are set from.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/model/dummy_fill.hpp"
#include "gpu/cuda/moe/moe_ffn.hpp"
#include "gpu/cuda/moe/moe_kernels.hpp"
#include "gpu/cuda/programmatic_launch.hpp"

namespace actorserve::bench_cuda {

/// A model's experts: E experts, top_k a token, gate/up [E][2 * inter][hidden], down [E][hidden][inter].
struct moe_bench_model {
  const char* name;
  int experts, top_k, hidden, inter;
};

/// The models the MoE benchmarks take.
inline const moe_bench_model moe_bench_models[] = {{"Mixtral-8x7B", 8, 2, 4096, 14336},
                                                   {"Qwen3-30B-A3B", 128, 8, 2048, 768},
                                                   {"DeepSeek-V2-Lite", 64, 6, 2048, 1408}};

/// Each token's top_k distinct experts, uniformly at random (a balanced router's load).
inline std::vector<int32_t> moe_bench_routes(int tokens, int experts, int top_k, std::mt19937& rng) {
  std::vector<int32_t> ids(static_cast<size_t>(experts)), out;
  std::iota(ids.begin(), ids.end(), 0);
  out.reserve(size_t(tokens) * top_k);
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < top_k; ++j) {
      std::swap(ids[size_t(j)], ids[size_t(j) + rng() % size_t(experts - j)]);
      out.push_back(ids[size_t(j)]);
    }
  return out;
}

/// One model's stacked expert weights (random bf16) and the grouped GEMM's buffers for up to
/// `max_tokens` tokens; each timing permutes its routing for the tile it times.
struct moe_gemm_operands {
  const moe_bench_model& m;
  void* w_gate_up = nullptr;  ///< [E][2 x inter][hidden]
  void* w_down = nullptr;     ///< [E][hidden][inter]
  void* x = nullptr;          ///< [max_tokens][hidden]: the tokens gate/up gathers
  void* act = nullptr;        ///< [pairs][inter]: gate/up's output, down's input
  void* y = nullptr;          ///< [pairs][max(2 x inter, hidden)] fp32
  int32_t *offsets = nullptr, *tile_offsets = nullptr, *sorted = nullptr, *pair_rows = nullptr;

  moe_gemm_operands(const moe_bench_model& model, int max_tokens) : m(model) {
    namespace cuda = gpu::cuda;
    constexpr cuda::act_dtype dt = cuda::act_dtype::bf16;
    const size_t E = size_t(m.experts), P = size_t(max_tokens) * m.top_k;
    const size_t gate_up_elems = E * 2 * m.inter * m.hidden, down_elems = E * m.hidden * m.inter;
    w_gate_up = dmalloc(gate_up_elems * 2);
    w_down = dmalloc(down_elems * 2);
    (void)cuda::fill_dummy_act(gpu::dummy_fill{.seed = 1, .tensor_id = 1}, dt, w_gate_up, gate_up_elems, nullptr);
    (void)cuda::fill_dummy_act(gpu::dummy_fill{.seed = 1, .tensor_id = 2}, dt, w_down, down_elems, nullptr);
    x = upload(normal_bf16(size_t(max_tokens) * m.hidden, 1.0f, 3));
    act = dmalloc(P * m.inter * 2);
    y = dmalloc(P * std::max(2 * m.inter, m.hidden) * 4);
    (void)cuda::fill_dummy_act(gpu::dummy_fill{.seed = 1, .tensor_id = 3}, dt, act, P * m.inter, nullptr);
    offsets = static_cast<int32_t*>(dmalloc((E + 1) * 4));
    tile_offsets = static_cast<int32_t*>(dmalloc((E + 1) * 4));
    sorted = static_cast<int32_t*>(dmalloc(P * 4));
    pair_rows = static_cast<int32_t*>(dmalloc(P * 4));
  }
  moe_gemm_operands(const moe_gemm_operands&) = delete;
  moe_gemm_operands& operator=(const moe_gemm_operands&) = delete;
  ~moe_gemm_operands() {
    for (void* p : {w_gate_up, w_down, x, act, y, static_cast<void*>(offsets), static_cast<void*>(tile_offsets),
                    static_cast<void*>(sorted), static_cast<void*>(pair_rows)})
      cudaFree(p);
  }

  /// ms of one grouped GEMM with `tile` over the `pairs` routed pairs `d_routes` (a device copy of
  /// moe_bench_routes'): gate/up with SiLU, or down into fp32.
  double time_gemm(gpu::cuda::moe_gemm_tile tile, const int32_t* d_routes, int pairs, bool gate_up) {
    namespace cuda = gpu::cuda;
    const cuda::moe_permute_args pa{.experts = d_routes, .num_pairs = pairs, .num_experts = m.experts,
                                    .offsets = offsets, .tile = tile, .tile_offsets = tile_offsets,
                                    .sorted_pairs = sorted, .pair_rows = pair_rows};
    (void)cuda::moe_permute(pa, nullptr);
    cuda::grouped_gemm_args g{.offsets = offsets, .tile_offsets = tile_offsets, .tile = tile, .num_pairs = pairs,
                              .num_experts = m.experts, .k = gate_up ? m.hidden : m.inter};
    if (gate_up) {
      g.a = x;
      g.a_rows = sorted;
      g.a_rows_div = m.top_k;
      g.w = w_gate_up;
      g.n = m.inter;
      g.y = act;
      g.silu_and_mul = true;
    } else {
      g.a = act;
      g.w = w_down;
      g.n = m.hidden;
      g.y = y;
    }
    return time_ms([&] { (void)cuda::grouped_gemm(cuda::act_dtype::bf16, g, nullptr); });
  }
};

/// The table's header cells of every tile, "| m16 | m32 | ..." and its "|---|..." row.
inline std::string moe_tile_header(const char* before, const char* after) {
  std::string head = before, rule;
  for (gpu::cuda::moe_gemm_tile t : gpu::cuda::moe_gemm_tiles) head += " m" + std::to_string(gpu::cuda::moe_tile_rows(t)) + " |";
  head += after;
  for (char c : head)
    if (c == '|') rule += rule.empty() ? "|" : "---|";
  return head + "\n" + rule + "\n";
}

/// The routed products of `tokens` tokens: gate/up with SiLU (flops 2 x pairs x 2 inter x hidden)
/// and down into fp32 (2 x pairs x hidden x inter), one row per token count, a column per tile.
inline void bench_moe_grouped_gemm() {
  namespace cuda = gpu::cuda;
  constexpr cuda::act_dtype dt = cuda::act_dtype::bf16;
  const int token_counts[] = {64, 256, 1024, 2048, 4096, 8192};  // 8,192: moe_ffn_chunk_tokens
  constexpr int kMaxTokens = 8192;
  const cuda::moe_gemm_tile largest = cuda::largest_moe_gemm_tile();
  cuda::set_programmatic_launch(false);  // kernels one after another, as timed
  cuda::gemm_runner dense;
  if (!dense.init(nullptr, size_t(32) << 20).ok()) return;
  std::mt19937 rng(5);
  report("\n## Grouped expert GEMM (bf16, random balanced routing; TFLOP/s of the routed rows; cuBLAS: one dense "
         "product of as many rows)\n");
  report("%s", moe_tile_header("| model | tokens | rows/expert | gemm | n x k |", " chosen | cuBLAS dense |").c_str());
  for (const moe_bench_model& m : moe_bench_models) {
    moe_gemm_operands ops(m, kMaxTokens);
    const size_t P = size_t(kMaxTokens) * m.top_k;
    void* dense_a = dmalloc(P * std::max(m.inter, m.hidden) * 2);
    (void)cuda::fill_dummy_act(gpu::dummy_fill{.seed = 1, .tensor_id = 4}, dt, dense_a,
                               P * std::max(m.inter, m.hidden), nullptr);
    for (int tokens : token_counts) {
      const auto routes = moe_bench_routes(tokens, m.experts, m.top_k, rng);
      auto* d_routes = upload(routes);
      const int pairs = int(routes.size());
      const cuda::moe_gemm_tile chosen = cuda::choose_moe_gemm_tile(pairs, m.experts, largest);
      for (bool gate_up : {true, false}) {
        const int n = gate_up ? 2 * m.inter : m.hidden, k = gate_up ? m.hidden : m.inter;
        const double flops = 2.0 * pairs * n * k;
        report("| %s | %d | %.0f | %s | %d x %d |", m.name, tokens, double(pairs) / m.experts,
               gate_up ? "gate_up + SiLU" : "down", n, k);
        for (cuda::moe_gemm_tile tile : cuda::moe_gemm_tiles) {
          if (!cuda::moe_gemm_tile_runs(tile, largest)) {  // more shared memory than a block gets
            report(" - |");
            continue;
          }
          report(" %.0f |", flops / ops.time_gemm(tile, d_routes, pairs, gate_up) / 1e9);
        }
        const double dense_ms = time_ms([&] {
          if (gate_up) (void)dense.run_act(dt, dense_a, pairs, k, ops.w_gate_up, n, ops.y);
          else (void)dense.run(dt, dense_a, pairs, k, ops.w_down, n, static_cast<float*>(ops.y));
        });
        report(" m%d | %.0f |\n", cuda::moe_tile_rows(chosen), flops / dense_ms / 1e9);
      }
      cudaFree(d_routes);
    }
    cudaFree(dense_a);
  }
  if (auto e = cudaGetLastError(); e != cudaSuccess) report("CUDA error: %s\n", cudaGetErrorString(e));
  cuda::set_programmatic_launch(true);
}

/// Decode batches, where the grouped GEMM streams the selected experts' weights: per projection
/// (gate/up with SiLU; down into fp32) and tile, µs a launch and the weight bandwidth it reaches,
/// GB/s of the weights of the experts the routing touches (each read once) over that time. The
/// data moe_m16_max_rows_per_expert and moe_m48_min_rows_per_expert are set from.
inline void bench_moe_decode_gemm() {
  namespace cuda = gpu::cuda;
  struct decode_case {
    const moe_bench_model& m;
    std::vector<int> token_counts;
  };
  // The offline workloads' decode batches among them: Qwen3-30B-A3B at 500 sequences (31 rows an
  // expert), Mixtral-8x7B at 196 (49: one row past an m48 tile) and 256 (64).
  const decode_case cases[] = {{moe_bench_models[1], {128, 256, 512, 784}},  // Qwen3-30B-A3B: 8 to 49 rows an expert
                               {moe_bench_models[0], {16, 64, 160, 196, 256}},  // Mixtral-8x7B: 4 to 64
                               {moe_bench_models[2], {256}}};                  // DeepSeek-V2-Lite: 24
  const cuda::moe_gemm_tile largest = cuda::largest_moe_gemm_tile();
  cuda::set_programmatic_launch(false);  // kernels one after another, as timed
  std::mt19937 rng(11);
  report("\n## Grouped expert GEMM at decode batches (bf16, random balanced routing; per tile: µs a launch, GB/s "
         "of the touched experts' weights)\n");
  report("%s", moe_tile_header("| model | tokens | rows/expert | experts touched | gemm | weight MB |", " chosen |").c_str());
  for (const decode_case& c : cases) {
    const moe_bench_model& m = c.m;
    moe_gemm_operands ops(m, *std::max_element(c.token_counts.begin(), c.token_counts.end()));
    for (int tokens : c.token_counts) {
      const auto routes = moe_bench_routes(tokens, m.experts, m.top_k, rng);
      auto* d_routes = upload(routes);
      const int pairs = int(routes.size());
      std::vector<char> touched(size_t(m.experts), 0);
      for (int32_t e : routes) touched[size_t(e)] = 1;
      const int experts_touched = int(std::count(touched.begin(), touched.end(), 1));
      const cuda::moe_gemm_tile chosen = cuda::choose_moe_gemm_tile(pairs, m.experts, largest);
      for (bool gate_up : {true, false}) {
        // gate/up: 2 x inter rows of hidden an expert; down: hidden rows of inter; bf16.
        const double bytes = double(experts_touched) * (gate_up ? 2.0 : 1.0) * m.inter * m.hidden * 2;
        report("| %s | %d | %.1f | %d | %s | %.1f |", m.name, tokens, double(pairs) / m.experts, experts_touched,
               gate_up ? "gate_up + SiLU" : "down", bytes / 1e6);
        for (cuda::moe_gemm_tile tile : cuda::moe_gemm_tiles) {
          if (!cuda::moe_gemm_tile_runs(tile, largest)) {
            report(" - |");
            continue;
          }
          const double ms = ops.time_gemm(tile, d_routes, pairs, gate_up);
          report(" %.1f µs, %.0f GB/s |", ms * 1e3, bytes / ms / 1e6);
        }
        report(" m%d |\n", cuda::moe_tile_rows(chosen));
      }
      cudaFree(d_routes);
    }
  }
  if (auto e = cudaGetLastError(); e != cudaSuccess) report("CUDA error: %s\n", cudaGetErrorString(e));
  cuda::set_programmatic_launch(true);
}

/// One chunk of `tokens` tokens through moe_ffn::run (router GEMM and routing, permutation, the
/// experts' products, combine), the experts on the grouped GEMM and on the per-expert cuBLAS path
/// (its host wait for the row offsets included), with a random router over random tokens: ms and
/// TFLOP/s of the routed products (6 x pairs x hidden x inter), the two paths' ratio and the path
/// the default rule (moe_cublas_min_rows_for the model's experts) picks. Each count is one chunk,
/// up to 65,536 tokens (an offline step), beyond the model's own chunk (moe_chunk_tokens_for,
/// printed per model), so the table shows what larger chunks would give.
inline void bench_moe_ffn_paths() {
  namespace cuda = gpu::cuda;
  constexpr cuda::act_dtype dt = cuda::act_dtype::bf16;
  constexpr int kMaxTokens = 65536;
  const int token_counts[] = {1024, 2048, 4096, 6144, 8192, 16384, 32768, 65536};
  cuda::set_programmatic_launch(false);  // kernels one after another, as timed
  cuda::gemm_runner gemm;
  if (!gemm.init(nullptr, size_t(32) << 20).ok()) return;
  report("\n## Routed FFN of one chunk: grouped GEMM against one cuBLAS GEMM per expert (bf16, random router; "
         "router, permutation and combine included in both; TFLOP/s of the routed products)\n");
  for (const moe_bench_model& m : moe_bench_models)
    report("%s: the engine's chunks hold %d tokens (moe_chunk_tokens_for)\n", m.name,
           cuda::moe_chunk_tokens_for(m.experts, m.top_k, m.hidden, m.inter, 2));
  report("cuBLAS: one GEMM per expert piece on the path's lanes (moe_ffn::cublas_lanes, below each model), "
         "cuBLAS 1 lane: all on one stream\n");
  report("| model | tokens | rows/expert | grouped ms | grouped TFLOP/s | cuBLAS ms | cuBLAS TFLOP/s "
         "| cuBLAS 1 lane ms | cuBLAS 1 lane TFLOP/s | cuBLAS first run ms | cuBLAS / grouped | default path |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const moe_bench_model& m : moe_bench_models) {
    const size_t E = size_t(m.experts);
    const size_t gate_up_elems = E * 2 * m.inter * m.hidden, down_elems = E * m.hidden * m.inter;
    std::vector<void*> owned;
    const auto device = [&](size_t bytes) { return owned.emplace_back(dmalloc(bytes)); };
    void* router = upload(normal_bf16(E * m.hidden, 0.02f, 7));
    owned.push_back(router);
    void* w_gate_up = device(gate_up_elems * 2);
    void* w_down = device(down_elems * 2);
    (void)cuda::fill_dummy_act(gpu::dummy_fill{.seed = 2, .tensor_id = 1}, dt, w_gate_up, gate_up_elems, nullptr);
    (void)cuda::fill_dummy_act(gpu::dummy_fill{.seed = 2, .tensor_id = 2}, dt, w_down, down_elems, nullptr);
    void* x = upload(normal_bf16(size_t(kMaxTokens) * m.hidden, 1.0f, 9));
    owned.push_back(x);
    auto* out = static_cast<float*>(device(size_t(kMaxTokens) * m.hidden * 4));
    moe_config cfg;
    cfg.num_experts = m.experts;
    cfg.top_k = m.top_k;
    cfg.expert_intermediate_size = m.inter;
    cfg.renormalize = true;
    cuda::moe_ffn ffn;
    const cuda::moe_ffn::alloc_fn alloc = [&](size_t bytes, void** p) -> status {
      *p = device(std::max<size_t>(bytes, 16));
      return {};
    };
    if (auto st = ffn.init(cfg, m.hidden, dt, kMaxTokens, alloc, kMaxTokens); !st) {
      report("moe_ffn init: %s\n", st.err().message.c_str());
      for (void* p : owned) cudaFree(p);
      break;
    }
    const cuda::device_experts w{.router = router, .gate_up = w_gate_up, .down = w_down};
    report("%s: %d lanes\n", m.name, ffn.cublas_lanes());
    for (int tokens : token_counts) {
      double first_ms = 0;  // the wall time of the untimed first run, its new GEMM shapes' set-up included
      const auto run_ms = [&](int min_rows, int lanes = cuda::moe_cublas_lanes) -> double {
        ffn.set_cublas_min_rows_per_expert(min_rows);
        ffn.set_cublas_lanes_in_use(lanes);
        const auto t0 = std::chrono::steady_clock::now();
        if (auto st = ffn.run(gemm, w, x, tokens, out, false, nullptr); !st) {  // once untimed: it runs
          report("moe_ffn::run: %s\n", st.err().message.c_str());
          return NAN;
        }
        (void)cudaDeviceSynchronize();
        first_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return time_ms([&] { (void)ffn.run(gemm, w, x, tokens, out, false, nullptr); }, 10);
      };
      const double grouped = run_ms(INT_MAX), cublas = run_ms(0);
      const double cublas_first_ms = first_ms;  // before one lane's run: the lanes' shapes new
      const double one_lane = run_ms(0, 1);
      const int pairs = tokens * m.top_k;
      const double flops = 6.0 * pairs * m.hidden * m.inter;
      ffn.set_cublas_min_rows_per_expert(cuda::moe_cublas_rows_by_expert_size);
      const bool by_default = cuda::reaches_moe_cublas_rows(pairs, m.experts, ffn.cublas_min_rows_per_expert());
      report("| %s | %d | %.0f | %.3f | %.0f | %.3f | %.0f | %.3f | %.0f | %.3f | %.2f | %s |\n", m.name, tokens,
             double(pairs) / m.experts, grouped, flops / grouped / 1e9, cublas, flops / cublas / 1e9, one_lane,
             flops / one_lane / 1e9, cublas_first_ms, cublas / grouped, by_default ? "cuBLAS" : "grouped");
    }
    for (void* p : owned) cudaFree(p);
  }
  if (auto e = cudaGetLastError(); e != cudaSuccess) report("CUDA error: %s\n", cudaGetErrorString(e));
  cuda::set_programmatic_launch(true);
}

}  // namespace actorserve::bench_cuda
