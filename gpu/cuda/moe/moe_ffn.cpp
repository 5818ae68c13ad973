#include "gpu/cuda/moe/moe_ffn.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/moe/cublas_lanes.hpp"
#include "gpu/cuda/moe/moe_kernels.hpp"
#include "gpu/cuda/ops/elementwise.hpp"

namespace actorserve::gpu::cuda {

namespace {
/// cuBLAS workspace of each lane past the first (the executor's own runner has as much).
constexpr size_t lane_workspace_bytes = size_t(32) << 20;
}  // namespace

moe_ffn::~moe_ffn() {
  release_lanes();
  if (host_offsets_) cudaFreeHost(host_offsets_);
}

void moe_ffn::release_lanes() {
  for (cublas_lane& l : lanes_) {
    l.gemm.reset();
    if (l.done) cudaEventDestroy(l.done);
    if (l.stream) cudaStreamDestroy(l.stream);
  }
  lanes_.clear();
  if (fork_) cudaEventDestroy(fork_);
  fork_ = nullptr;
}

status moe_ffn::make_lanes(int n) {
  release_lanes();
  lanes_.resize(static_cast<size_t>(std::max(1, n)));
  if (lanes_.size() > 1) AS_CUDA_TRY(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  for (size_t l = 1; l < lanes_.size(); ++l) {
    cublas_lane& lane = lanes_[l];
    AS_CUDA_TRY(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
    AS_CUDA_TRY(cudaEventCreateWithFlags(&lane.done, cudaEventDisableTiming));
    lane.gemm = std::make_unique<gemm_runner>();
    if (auto st = lane.gemm->init(lane.stream, lane_workspace_bytes); !st) return st;
  }
  return {};
}

status moe_ffn::fork_lanes(int n, cudaStream_t s) {
  if (n <= 1) return {};
  AS_CUDA_TRY(cudaEventRecord(fork_, s));
  for (int l = 1; l < n; ++l) AS_CUDA_TRY(cudaStreamWaitEvent(lanes_[size_t(l)].stream, fork_, 0));
  return {};
}

status moe_ffn::join_lanes(int n, cudaStream_t s) {
  for (int l = 1; l < n; ++l) {
    const cublas_lane& lane = lanes_[size_t(l)];
    AS_CUDA_TRY(cudaEventRecord(lane.done, lane.stream));
    AS_CUDA_TRY(cudaStreamWaitEvent(s, lane.done, 0));
  }
  return {};
}

status moe_ffn::init(const moe_config& cfg, int hidden, act_dtype dt, int max_tokens, const alloc_fn& alloc,
                     int chunk_tokens, bool e4m3_experts) {
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
  // The cuBLAS path's rounded pieces run up to moe_cublas_row_multiple - 1 rows past a chunk's
  // last pair: act_ and y_ hold that many rows more.
  const size_t CP = size_t(std::min(max_tokens, chunk_tokens)) * top_k_;
  const size_t spare = moe_cublas_row_multiple;
  pair_rows_capacity_ = static_cast<int>(CP + spare);
  // y_ also holds the gathered rows and at least one rounded gate/up piece behind them (below).
  const size_t gathered_bytes = (CP + spare) * hidden_ * es, piece_row_bytes = size_t(2) * inter_ * es;
  const size_t y_bytes = std::max((CP + spare) * hidden_ * 4, gathered_bytes + spare * piece_row_bytes);
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
      {(CP + spare) * inter_ * es, &act_},
      {y_bytes, reinterpret_cast<void**>(&y_)},
  };
  for (const want& w : wants)
    if (auto st = alloc(w.bytes, w.where); !st) return st;
  expert_scratch_ = nullptr;
  if (e4m3_experts)
    if (auto st = alloc(size_t(2) * inter_ * hidden_ * es, &expert_scratch_); !st) return st;
  AS_CUDA_TRY(cudaMemset(route_counter_, 0, sizeof(int32_t)));
  // The cuBLAS path reads the offsets back into pinned memory and needs no device buffer of its
  // own: y_ ((CP + spare) x hidden fp32) is written by a chunk's down and read by its combine
  // only, so before down it holds the chunk's gathered rows (at most CP + spare rows of dt: its
  // first half at 2 bytes a value) and, behind them, the gate/up pieces of
  // [cublas_piece_rows_][2 x inter] of dt, one a lane: min(moe_cublas_piece_rows, what is left /
  // (2 x inter) / lanes) rows in multiples of moe_cublas_row_multiple (y_ grown to hold one where
  // a chunk's rows leave less), Mixtral-8x7B's 2,048 once a chunk holds 7,168 tokens
  // (CP x 4,096 x 2 bytes >= 2,048 x 2 x 14,336 x 2). As many lanes as moe_cublas_lanes whose
  // full pieces fit (Mixtral-8x7B's 8,192-token chunks: 1; DeepSeek-V2-Lite's and
  // Qwen3-30B-A3B's: 4); one for E4M3 experts (expert_scratch_ holds one expert).
  if (host_offsets_) cudaFreeHost(host_offsets_);
  host_offsets_ = nullptr;
  AS_CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(&host_offsets_), (E + 1) * sizeof(int32_t)));
  cublas_scratch_ = reinterpret_cast<uint8_t*>(y_) + gathered_bytes;
  const size_t fits = piece_row_bytes == 0 ? 0 : (y_bytes - gathered_bytes) / piece_row_bytes;
  const size_t full_pieces = fits / size_t(moe_cublas_piece_rows);
  const int lanes = e4m3_experts ? 1 : static_cast<int>(std::clamp<size_t>(full_pieces, 1, moe_cublas_lanes));
  cublas_piece_rows_ = static_cast<int>(std::min<size_t>(moe_cublas_piece_rows, fits / size_t(lanes)) /
                                        moe_cublas_row_multiple * moe_cublas_row_multiple);
  if (auto st = make_lanes(lanes); !st) return st;
  for (size_t l = 0; l < lanes_.size(); ++l)
    lanes_[l].scratch = static_cast<uint8_t*>(cublas_scratch_) + l * size_t(cublas_piece_rows_) * piece_row_bytes;
  return {};
}

bool moe_ffn::takes_norm(const gemm_runner& gemm, const device_experts& w, const void* x, int rows) const {
  return rows == 1 && gemm.uses_gemv(rows) && gemv_supported(x, 1, hidden_, w.router) &&
         moe_norm_route_supported(hidden_, num_experts_);
}

status moe_ffn::run(gemm_runner& gemm, const device_experts& w, const void* x, int rows, float* out, bool accumulate,
                    cudaStream_t s, const moe_norm_args* norm, uint32_t* counts, const int32_t* slots) {
  if (rows == 0) return {};
  if (norm && (norm->out != x || !takes_norm(gemm, w, x, rows)))
    return make_error(error_code::invalid_argument, "moe_ffn: the norm goes into the router only for one token on the "
                                                    "GEMV path of a shape moe_norm_route_supported takes, writing x");
  const moe_route_args ra{.logits = logits_, .n = rows, .num_experts = num_experts_, .top_k = top_k_,
                          .num_groups = num_groups_, .topk_groups = topk_groups_, .sigmoid = sigmoid_,
                          .renormalize = renormalize_, .scaling = scaling_,
                          .experts = experts_, .weights = weights_, .counts = counts, .slots = slots};
  const bool gemv = gemm.uses_gemv(rows);
  // The cuBLAS path waits for the stream (the experts' row offsets): never inside a graph.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (!gemv) AS_CUDA_TRY(cudaStreamIsCapturing(s, &capture));
  const bool cublas = !gemv && capture == cudaStreamCaptureStatusNone && cublas_piece_rows_ > 0;
  if (gemv && rows == 1 && gemv_supported(x, 1, hidden_, w.router)) {  // the logits gemm.run would give
    const moe_router_gemv_args rg{.x = x, .w = w.router, .hidden = hidden_, .logits = logits_,
                                  .counter = route_counter_};
    if (norm)
      AS_CUDA_TRY(moe_norm_route_gemv(dt_, *norm, rg, ra, s));
    else
      AS_CUDA_TRY(moe_route_gemv(dt_, rg, ra, s));
  } else {
    if (auto st = gemm.run(dt_, x, rows, hidden_, w.router, num_experts_, logits_); !st) return st;
    AS_CUDA_TRY(moe_route(ra, s));
  }
  const size_t x_row_bytes = size_t(hidden_) * act_size(dt_);
  for (int first = 0; first < rows; first += chunk_tokens_) {
    const int n = std::min(chunk_tokens_, rows - first);
    const void* xc = static_cast<const uint8_t*>(x) + size_t(first) * x_row_bytes;
    if (auto st = run_experts(gemm, w, xc, first, n, out + size_t(first) * hidden_, accumulate, gemv, cublas, s); !st)
      return st;
  }
  return {};
}

status moe_ffn::run_experts(gemm_runner& gemm, const device_experts& w, const void* x, int first, int rows,
                            float* out, bool accumulate, bool gemv, bool cublas, cudaStream_t s) {
  const int P = rows * top_k_;
  const int32_t* experts = experts_ + size_t(first) * top_k_;
  const float* weights = weights_ + size_t(first) * top_k_;
  if (gemv) {  // the rows the dense layers give the GEMV: each pair reads its expert
    // gate/up with SiLU-and-mul in its epilogue, then down with the combine in its epilogue.
    const expert_gemv_args gate_up{.a = x, .a_rows_div = top_k_, .experts = experts, .w = w.gate_up,
                                   .num_pairs = P, .n = inter_, .k = hidden_, .y = act_, .silu_and_mul = true,
                                   .fp8 = w.gate_up_fp8};
    AS_CUDA_TRY(expert_gemv(dt_, gate_up, s));
    const moe_down_combine_args down{.act = act_, .experts = experts, .weights = weights, .w = w.down,
                                     .n = rows, .top_k = top_k_, .hidden = hidden_, .k = inter_, .out = out,
                                     .accumulate = accumulate, .fp8 = w.down_fp8};
    AS_CUDA_TRY(moe_down_combine(dt_, down, s));
    return {};
  }
  // The tile by the chunk's rows an expert; the permutation cuts each expert's rows into its tiles.
  const moe_gemm_tile tile = choose_moe_gemm_tile(P, num_experts_, largest_tile_);
  const moe_permute_args pa{.experts = experts, .num_pairs = P, .num_experts = num_experts_, .offsets = offsets_,
                            .tile = tile, .tile_offsets = tile_offsets_, .sorted_pairs = sorted_pairs_,
                            .pair_rows = pair_rows_};
  AS_CUDA_TRY(moe_permute(pa, s));
  if (cublas && reaches_moe_cublas_rows(P, num_experts_, cublas_min_rows_per_expert())) {
    if (auto st = run_experts_cublas(gemm, w, x, P, s); !st) return st;
  } else {
    // gate/up with SiLU-and-mul in its epilogue: permuted row r holds pair p = t * top_k + j and
    // reads token p / top_k; gate and up are rounded to dt as HF's bf16/fp16 projections are.
    const grouped_gemm_args gate_up{.a = x, .a_rows = sorted_pairs_, .a_rows_div = top_k_, .w = w.gate_up,
                                    .offsets = offsets_, .tile_offsets = tile_offsets_, .tile = tile, .num_pairs = P,
                                    .num_experts = num_experts_, .n = inter_, .k = hidden_, .y = act_,
                                    .silu_and_mul = true, .fp8 = w.gate_up_fp8};
    AS_CUDA_TRY(grouped_gemm(dt_, gate_up, s));
    const grouped_gemm_args down{.a = act_, .w = w.down, .offsets = offsets_, .tile_offsets = tile_offsets_,
                                 .tile = tile, .num_pairs = P, .num_experts = num_experts_, .n = hidden_, .k = inter_,
                                 .y = y_, .fp8 = w.down_fp8};
    AS_CUDA_TRY(grouped_gemm(dt_, down, s));
  }
  const moe_combine_args ca{.y = y_, .pair_rows = pair_rows_, .experts = experts, .weights = weights, .n = rows,
                            .top_k = top_k_, .hidden = hidden_, .out = out, .accumulate = accumulate};
  AS_CUDA_TRY(moe_combine(ca, s));
  return {};
}

status moe_ffn::run_experts_cublas(gemm_runner& gemm, const device_experts& w, const void* x, int P,
                                   cudaStream_t s) {
  const int E = num_experts_;
  AS_CUDA_TRY(cudaMemcpyAsync(host_offsets_, offsets_, size_t(E + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  AS_CUDA_TRY(cudaStreamSynchronize(s));
  const int32_t* off = host_offsets_;
  bool ascending = off[0] == 0 && off[E] == P;
  for (int e = 0; e < E && ascending; ++e) ascending = off[e] <= off[e + 1];
  if (!ascending)
    return make_error(error_code::internal, fmt::format("moe_ffn: the permutation's row offsets do not ascend from 0 "
                                                        "to the chunk's {} pairs", P));
  // Each expert's rows contiguous in y_ (free until down writes it; init): row r of the chunk's
  // permuted order is token sorted_pairs_[r] / top_k's.
  const size_t es = act_size(dt_);
  auto* gathered = reinterpret_cast<uint8_t*>(y_);
  const moe_gather_args ga{.x = x, .rows = sorted_pairs_, .rows_div = top_k_, .num_rows = P, .width = hidden_,
                           .out = gathered};
  AS_CUDA_TRY(moe_gather(dt_, ga, s));
  // The pieces: each expert's rows in pieces of at most cublas_piece_rows_ (the scratch a lane
  // holds), each GEMM over its rows rounded up (moe_cublas_row_multiple), spread over the lanes.
  const int want_lanes = std::clamp(lanes_in_use_, 1, cublas_lanes());
  const std::vector<std::vector<moe_cublas_piece>> plan =
      plan_moe_cublas_lanes({off, size_t(E) + 1}, cublas_piece_rows_, moe_cublas_row_multiple, want_lanes);
  const int n = static_cast<int>(plan.size());
  // One phase: every piece's product on its lane between a fork and a join, the expert's matrix
  // of `m` ([rows][cols]) fetched once for each run of its pieces.
  const auto on_lanes = [&](const void* m, const moe_fp8_scales& f, int rows, int cols, auto&& product) -> status {
    if (auto st = fork_lanes(n, s); !st) return st;
    for (int l = 0; l < n; ++l) {
      int expert = -1;
      const void* we = nullptr;
      for (const moe_cublas_piece& p : plan[size_t(l)]) {
        if (p.expert != expert) {
          if (auto st = expert_matrix(m, f, p.expert, rows, cols, lane_stream(l, s), we); !st) return st;
          expert = p.expert;
        }
        if (auto st = product(lane_runner(l, gemm), lane_stream(l, s), lanes_[size_t(l)].scratch, p, we); !st)
          return st;
      }
    }
    return join_lanes(n, s);
  };
  // gate/up: an expert's [2 x inter][hidden] weights are its gate rows, then its up rows, so one
  // GEMM gives each row's gate in columns [0, inter) and its up in [inter, 2 x inter), rounded to
  // dt (run_act), into its lane's scratch, which silu_and_mul_act reads: the grouped GEMM's
  // epilogue's numbers, summed in cuBLAS's order. A GEMM's extra rows read the next expert's or
  // spare gathered rows; their outputs in the scratch are never read.
  // E4M3 experts (one lane): each expert with rows dequantized into expert_scratch_ before its
  // GEMMs, which the next one's dequantization follows on the stream.
  auto* act = static_cast<uint8_t*>(act_);
  const auto gate_up = [&](gemm_runner& g, cudaStream_t ls, void* scratch, const moe_cublas_piece& p,
                           const void* we) -> status {
    const void* rows = gathered + size_t(p.first) * hidden_ * es;
    if (auto st = g.run_act(dt_, rows, cublas_rows(p.rows), hidden_, we, 2 * inter_, scratch); !st) return st;
    AS_CUDA_TRY(silu_and_mul_act(dt_, scratch, p.rows, inter_, act + size_t(p.first) * inter_ * es, ls));
    return {};
  };
  if (auto st = on_lanes(w.gate_up, w.gate_up_fp8, 2 * inter_, hidden_, gate_up); !st) return st;
  // down: y_ rows of expert e = its act_ rows x its [hidden][inter] down weights^T, in fp32, in
  // the same rounded pieces, after every gate/up piece (the join): the gathered rows and scratches
  // in y_ are dead. A piece's extra rows write rows of the pieces after it on its lane, which
  // their own GEMMs overwrite later, or spare rows (the plan keeps them off other lanes' rows).
  const auto down = [&](gemm_runner& g, cudaStream_t, void*, const moe_cublas_piece& p, const void* we) {
    return g.run(dt_, act + size_t(p.first) * inter_ * es, cublas_rows(p.rows), inter_, we, hidden_,
                 y_ + size_t(p.first) * hidden_);
  };
  if (auto st = on_lanes(w.down, w.down_fp8, hidden_, inter_, down); !st) return st;
  cublas_chunks_.fetch_add(1);
  if (n > 1) multi_lane_chunks_.fetch_add(1);
  return {};
}

status moe_ffn::expert_matrix(const void* w, const moe_fp8_scales& f, int e, int rows, int cols, cudaStream_t s,
                              const void*& out) {
  const size_t n = size_t(rows) * cols;
  if (!f.scale) {
    out = static_cast<const uint8_t*>(w) + size_t(e) * n * act_size(dt_);
    return {};
  }
  if (!expert_scratch_)
    return make_error(error_code::internal, "moe_ffn: E4M3 experts on the cuBLAS path without init's scratch");
  const uint8_t* codes = static_cast<const uint8_t*>(w) + size_t(e) * n;
  if (f.mode == fp8_scale_mode::per_row) {
    AS_CUDA_TRY(fp8_dequantize(dt_, codes, f.scale + size_t(e) * rows, rows, cols, expert_scratch_, s));
  } else {  // each part with its own block grid
    const int part_rows = rows / f.parts;
    const size_t part_scales = fp8_blocks(size_t(part_rows)) * fp8_blocks(size_t(cols));
    for (int p = 0; p < f.parts; ++p)
      AS_CUDA_TRY(fp8_dequantize(dt_, codes + size_t(p) * part_rows * cols,
                                 f.scale + (size_t(e) * f.parts + p) * part_scales, part_rows, cols,
                                 static_cast<uint8_t*>(expert_scratch_) + size_t(p) * part_rows * cols * act_size(dt_),
                                 s, fp8_scale_mode::block128));
  }
  out = expert_scratch_;
  return {};
}

status moe_ffn::warm_cublas(gemm_runner& gemm, const device_experts& w, cudaStream_t s) {
  if (cublas_piece_rows_ == 0) return {};
  // Expert 0's weights (E4M3 experts: whatever the scratch holds) over whatever the buffers hold:
  // as run_experts_cublas's pieces of m rows.
  const void* gate_up = w.gate_up_fp8.scale ? expert_scratch_ : w.gate_up;
  const void* down = w.down_fp8.scale ? expert_scratch_ : w.down;
  if (!gate_up || !down)
    return make_error(error_code::internal, "moe_ffn: E4M3 experts on the cuBLAS path without init's scratch");
  // Lane by lane (the downs of two lanes would write y_ at once).
  const int most = std::min(cublas_piece_rows_, pair_rows_capacity_);
  for (int l = 0; l < cublas_lanes(); ++l) {
    gemm_runner& g = lane_runner(l, gemm);
    for (int m = moe_cublas_row_multiple; m <= most; m += moe_cublas_row_multiple) {
      if (auto st = g.run_act(dt_, y_, m, hidden_, gate_up, 2 * inter_, lanes_[size_t(l)].scratch); !st) return st;
      if (auto st = g.run(dt_, act_, m, inter_, down, hidden_, y_); !st) return st;
    }
    AS_CUDA_TRY(cudaStreamSynchronize(lane_stream(l, s)));
  }
  return {};
}

}  // namespace actorserve::gpu::cuda
