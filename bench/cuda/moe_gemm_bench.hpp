#pragma once
// bench_cuda_kernels --only moe: the grouped expert GEMM at prefill sizes of Mixtral-8x7B,
// Qwen3-30B-A3B and DeepSeek-V2-Lite, each tile shape forced in turn (TFLOP/s of the routed rows'
// products; '-' where the device gives a block too little shared memory for the tile), beside
// cuBLAS on one dense product of the same rows and sizes; then the whole routed FFN of a chunk
// (moe_ffn::run) on the grouped GEMM and on the per-expert cuBLAS path. The data the thresholds
// of gpu/cuda/moe/moe_tile.hpp are set from.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <random>
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

/// The routed products of `tokens` tokens: gate/up with SiLU (flops 2 x pairs x 2 inter x hidden)
/// and down into fp32 (2 x pairs x hidden x inter), one row per tile shape and token count.
inline void bench_moe_grouped_gemm() {
  namespace cuda = gpu::cuda;
  constexpr cuda::act_dtype dt = cuda::act_dtype::bf16;
  const int token_counts[] = {64, 256, 1024, 2048, 4096, 8192};  // 8,192: moe_ffn_chunk_tokens
  const cuda::moe_gemm_tile tiles[] = {cuda::moe_gemm_tile::m32, cuda::moe_gemm_tile::m64, cuda::moe_gemm_tile::m128};
  constexpr int kMaxTokens = 8192;
  const cuda::moe_gemm_tile largest = cuda::largest_moe_gemm_tile();
  cuda::set_programmatic_launch(false);  // kernels one after another, as timed
  cuda::gemm_runner dense;
  if (!dense.init(nullptr, size_t(32) << 20).ok()) return;
  std::mt19937 rng(5);
  report("\n## Grouped expert GEMM (bf16, random balanced routing; TFLOP/s of the routed rows; cuBLAS: one dense "
         "product of as many rows)\n");
  report("| model | tokens | rows/expert | gemm | n x k | m32 | m64 | m128 | chosen | cuBLAS dense |\n"
         "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const moe_bench_model& m : moe_bench_models) {
    const size_t E = size_t(m.experts), P = size_t(kMaxTokens) * m.top_k;
    const size_t gate_up_elems = E * 2 * m.inter * m.hidden, down_elems = E * m.hidden * m.inter;
    void* w_gate_up = dmalloc(gate_up_elems * 2);
    void* w_down = dmalloc(down_elems * 2);
    (void)cuda::fill_dummy_act(gpu::dummy_fill{.seed = 1, .tensor_id = 1}, dt, w_gate_up, gate_up_elems, nullptr);
    (void)cuda::fill_dummy_act(gpu::dummy_fill{.seed = 1, .tensor_id = 2}, dt, w_down, down_elems, nullptr);
    void* x = upload(normal_bf16(size_t(kMaxTokens) * m.hidden, 1.0f, 3));
    void* act = dmalloc(P * m.inter * 2);  // gate/up's output, down's input
    void* y = dmalloc(P * std::max(2 * m.inter, m.hidden) * 4);
    void* dense_a = dmalloc(P * std::max(m.inter, m.hidden) * 2);
    (void)cuda::fill_dummy_act(gpu::dummy_fill{.seed = 1, .tensor_id = 3}, dt, act, P * m.inter, nullptr);
    (void)cuda::fill_dummy_act(gpu::dummy_fill{.seed = 1, .tensor_id = 4}, dt, dense_a,
                               P * std::max(m.inter, m.hidden), nullptr);
    auto* offsets = static_cast<int32_t*>(dmalloc((E + 1) * 4));
    auto* tile_offsets = static_cast<int32_t*>(dmalloc((E + 1) * 4));
    auto* sorted = static_cast<int32_t*>(dmalloc(P * 4));
    auto* pair_rows = static_cast<int32_t*>(dmalloc(P * 4));
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
        for (cuda::moe_gemm_tile tile : tiles) {
          if (cuda::moe_tile_rows(tile) > cuda::moe_tile_rows(largest)) {  // more shared memory than a block gets
            report(" - |");
            continue;
          }
          const cuda::moe_permute_args pa{.experts = d_routes, .num_pairs = pairs, .num_experts = m.experts,
                                          .offsets = offsets, .tile = tile, .tile_offsets = tile_offsets,
                                          .sorted_pairs = sorted, .pair_rows = pair_rows};
          (void)cuda::moe_permute(pa, nullptr);
          cuda::grouped_gemm_args g{.offsets = offsets, .tile_offsets = tile_offsets, .tile = tile,
                                    .num_pairs = pairs, .num_experts = m.experts, .k = k};
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
          const double ms = time_ms([&] { (void)cuda::grouped_gemm(dt, g, nullptr); });
          report(" %.0f |", flops / ms / 1e9);
        }
        const double dense_ms = time_ms([&] {
          if (gate_up) (void)dense.run_act(dt, dense_a, pairs, k, w_gate_up, n, y);
          else (void)dense.run(dt, dense_a, pairs, k, w_down, n, static_cast<float*>(y));
        });
        report(" m%d | %.0f |\n", cuda::moe_tile_rows(chosen), flops / dense_ms / 1e9);
      }
      cudaFree(d_routes);
    }
    for (void* p : {w_gate_up, w_down, x, act, y, dense_a, static_cast<void*>(offsets),
                    static_cast<void*>(tile_offsets), static_cast<void*>(sorted), static_cast<void*>(pair_rows)})
      cudaFree(p);
  }
  if (auto e = cudaGetLastError(); e != cudaSuccess) report("CUDA error: %s\n", cudaGetErrorString(e));
  cuda::set_programmatic_launch(true);
}

/// One chunk of `tokens` tokens through moe_ffn::run (router GEMM and routing, permutation, the
/// experts' products, combine), the experts on the grouped GEMM and on the per-expert cuBLAS path
/// (its host wait for the row offsets included), with a random router over random tokens: ms and
/// TFLOP/s of the routed products (6 x pairs x hidden x inter), the two paths' ratio and the path
/// moe_cublas_min_rows_per_expert picks.
inline void bench_moe_ffn_paths() {
  namespace cuda = gpu::cuda;
  constexpr cuda::act_dtype dt = cuda::act_dtype::bf16;
  constexpr int kMaxTokens = cuda::moe_ffn_chunk_tokens;
  const int token_counts[] = {1024, 2048, 4096, 6144, 8192};
  cuda::set_programmatic_launch(false);  // kernels one after another, as timed
  cuda::gemm_runner gemm;
  if (!gemm.init(nullptr, size_t(32) << 20).ok()) return;
  report("\n## Routed FFN of one chunk: grouped GEMM against one cuBLAS GEMM per expert (bf16, random router; "
         "router, permutation and combine included in both; TFLOP/s of the routed products)\n");
  report("| model | tokens | rows/expert | grouped ms | grouped TFLOP/s | cuBLAS ms | cuBLAS TFLOP/s "
         "| cuBLAS / grouped | default path |\n|---|---|---|---|---|---|---|---|---|\n");
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
    if (auto st = ffn.init(cfg, m.hidden, dt, kMaxTokens, alloc); !st) {
      report("moe_ffn init: %s\n", st.err().message.c_str());
      for (void* p : owned) cudaFree(p);
      break;
    }
    const cuda::device_experts w{.router = router, .gate_up = w_gate_up, .down = w_down};
    for (int tokens : token_counts) {
      const auto run_ms = [&](int min_rows) -> double {
        ffn.set_cublas_min_rows_per_expert(min_rows);
        if (auto st = ffn.run(gemm, w, x, tokens, out, false, nullptr); !st) {  // once untimed: it runs
          report("moe_ffn::run: %s\n", st.err().message.c_str());
          return NAN;
        }
        return time_ms([&] { (void)ffn.run(gemm, w, x, tokens, out, false, nullptr); }, 10);
      };
      const double grouped = run_ms(INT_MAX), cublas = run_ms(0);
      const int pairs = tokens * m.top_k;
      const double flops = 6.0 * pairs * m.hidden * m.inter;
      const bool by_default = cuda::reaches_moe_cublas_rows(pairs, m.experts, cuda::moe_cublas_min_rows_per_expert);
      report("| %s | %d | %.0f | %.3f | %.0f | %.3f | %.0f | %.2f | %s |\n", m.name, tokens, double(pairs) / m.experts,
             grouped, flops / grouped / 1e9, cublas, flops / cublas / 1e9, cublas / grouped,
             by_default ? "cuBLAS" : "grouped");
    }
    for (void* p : owned) cudaFree(p);
  }
  if (auto e = cudaGetLastError(); e != cudaSuccess) report("CUDA error: %s\n", cudaGetErrorString(e));
  cuda::set_programmatic_launch(true);
}

}  // namespace actorserve::bench_cuda
