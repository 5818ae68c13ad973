#include "gpu/cuda/moe/moe_ffn.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::gpu::cuda {

status moe_ffn::init(const moe_config& cfg, int hidden, act_dtype dt, int max_tokens, const alloc_fn& alloc,
                     int chunk_tokens) {
  if (chunk_tokens <= 0)
    return make_error(error_code::invalid_argument,
                      fmt::format("moe_ffn: a chunk of {} tokens; it takes at least one", chunk_tokens));
  dt_ = dt;
  chunk_tokens_ = chunk_tokens;
  largest_tile_ = largest_moe_gemm_tile();
  hidden_ = hidden;
  inter_ = static_cast<int>(cfg.expert_intermediate_size);
  num_experts_ = static_cast<int>(cfg.num_experts);
  top_k_ = static_cast<int>(cfg.top_k);
  if (cfg.topk_method == moe_topk_method::group_limited_greedy) {
    num_groups_ = static_cast<int>(cfg.num_groups);
    topk_groups_ = static_cast<int>(cfg.topk_groups);
  }
  sigmoid_ = cfg.scoring == moe_scoring::sigmoid;
  renormalize_ = cfg.renormalize;
  scaling_ = static_cast<float>(cfg.routed_scaling_factor);
  // The router's buffers for every token of a step (P pairs), the experts' for one chunk's (CP).
  const size_t T = size_t(max_tokens), P = T * top_k_, E = size_t(num_experts_), es = act_size(dt);
  const size_t CP = size_t(std::min(max_tokens, chunk_tokens)) * top_k_;
  struct want { size_t bytes; void** where; };
  const want wants[] = {
      {T * E * 4, reinterpret_cast<void**>(&logits_)},
      {4, reinterpret_cast<void**>(&route_counter_)},
      {P * 4, reinterpret_cast<void**>(&experts_)},
      {P * 4, reinterpret_cast<void**>(&weights_)},
      {(E + 1) * 4, reinterpret_cast<void**>(&offsets_)},
      {(E + 1) * 4, reinterpret_cast<void**>(&tile_offsets_)},
      {CP * 4, reinterpret_cast<void**>(&sorted_pairs_)},
      {CP * 4, reinterpret_cast<void**>(&pair_rows_)},
      {CP * inter_ * es, &act_},
      {CP * hidden_ * 4, reinterpret_cast<void**>(&y_)},
  };
  for (const want& w : wants)
    if (auto st = alloc(w.bytes, w.where); !st) return st;
  AS_CUDA_TRY(cudaMemset(route_counter_, 0, sizeof(int32_t)));
  return {};
}

status moe_ffn::run(gemm_runner& gemm, const device_experts& w, const void* x, int rows, float* out, bool accumulate,
                    cudaStream_t s) {
  if (rows == 0) return {};
  const moe_route_args ra{.logits = logits_, .n = rows, .num_experts = num_experts_, .top_k = top_k_,
                          .num_groups = num_groups_, .topk_groups = topk_groups_, .sigmoid = sigmoid_,
                          .renormalize = renormalize_, .scaling = scaling_,
                          .experts = experts_, .weights = weights_};
  const bool gemv = gemm.uses_gemv(rows);
  if (gemv && rows == 1 && gemv_supported(x, 1, hidden_, w.router)) {  // the logits gemm.run would give
    const moe_router_gemv_args rg{.x = x, .w = w.router, .hidden = hidden_, .logits = logits_,
                                  .counter = route_counter_};
    AS_CUDA_TRY(moe_route_gemv(dt_, rg, ra, s));
  } else {
    if (auto st = gemm.run(dt_, x, rows, hidden_, w.router, num_experts_, logits_); !st) return st;
    AS_CUDA_TRY(moe_route(ra, s));
  }
  const size_t x_row_bytes = size_t(hidden_) * act_size(dt_);
  for (int first = 0; first < rows; first += chunk_tokens_) {
    const int n = std::min(chunk_tokens_, rows - first);
    const void* xc = static_cast<const uint8_t*>(x) + size_t(first) * x_row_bytes;
    if (auto st = run_experts(w, xc, first, n, out + size_t(first) * hidden_, accumulate, gemv, s); !st) return st;
  }
  return {};
}

status moe_ffn::run_experts(const device_experts& w, const void* x, int first, int rows, float* out, bool accumulate,
                            bool gemv, cudaStream_t s) {
  const int P = rows * top_k_;
  const int32_t* experts = experts_ + size_t(first) * top_k_;
  const float* weights = weights_ + size_t(first) * top_k_;
  if (gemv) {  // the rows the dense layers give the GEMV: each pair reads its expert
    // gate/up with SiLU-and-mul in its epilogue, then down with the combine in its epilogue.
    const expert_gemv_args gate_up{.a = x, .a_rows_div = top_k_, .experts = experts, .w = w.gate_up,
                                   .num_pairs = P, .n = inter_, .k = hidden_, .y = act_, .silu_and_mul = true};
    AS_CUDA_TRY(expert_gemv(dt_, gate_up, s));
    const moe_down_combine_args down{.act = act_, .experts = experts, .weights = weights, .w = w.down,
                                     .n = rows, .top_k = top_k_, .hidden = hidden_, .k = inter_, .out = out,
                                     .accumulate = accumulate};
    AS_CUDA_TRY(moe_down_combine(dt_, down, s));
    return {};
  }
  // The tile by the chunk's rows an expert; the permutation cuts each expert's rows into its tiles.
  const moe_gemm_tile tile = choose_moe_gemm_tile(P, num_experts_, largest_tile_);
  const moe_permute_args pa{.experts = experts, .num_pairs = P, .num_experts = num_experts_, .offsets = offsets_,
                            .tile = tile, .tile_offsets = tile_offsets_, .sorted_pairs = sorted_pairs_,
                            .pair_rows = pair_rows_};
  AS_CUDA_TRY(moe_permute(pa, s));
  // gate/up with SiLU-and-mul in its epilogue: permuted row r holds pair p = t * top_k + j and
  // reads token p / top_k; gate and up are rounded to dt as HF's bf16/fp16 projections are.
  const grouped_gemm_args gate_up{.a = x, .a_rows = sorted_pairs_, .a_rows_div = top_k_, .w = w.gate_up,
                                  .offsets = offsets_, .tile_offsets = tile_offsets_, .tile = tile, .num_pairs = P,
                                  .num_experts = num_experts_, .n = inter_, .k = hidden_, .y = act_,
                                  .silu_and_mul = true};
  AS_CUDA_TRY(grouped_gemm(dt_, gate_up, s));
  const grouped_gemm_args down{.a = act_, .w = w.down, .offsets = offsets_, .tile_offsets = tile_offsets_,
                               .tile = tile, .num_pairs = P, .num_experts = num_experts_, .n = hidden_, .k = inter_,
                               .y = y_};
  AS_CUDA_TRY(grouped_gemm(dt_, down, s));
  const moe_combine_args ca{.y = y_, .pair_rows = pair_rows_, .experts = experts, .weights = weights, .n = rows,
                            .top_k = top_k_, .hidden = hidden_, .out = out, .accumulate = accumulate};
  AS_CUDA_TRY(moe_combine(ca, s));
  return {};
}

}  // namespace actorserve::gpu::cuda
