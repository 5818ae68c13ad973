#pragma once
/// A sparse layer's FFN on the device: router logits (one GEMM), the router, the permutation, the
/// grouped gate/up GEMM with SiLU-and-mul (or, at one token, the expert GEMV), the grouped down
/// GEMM and the weighted combine into the residual stream (docs/moe.md); a large chunk outside
/// CUDA graph capture runs the experts' products as one cuBLAS GEMM per expert instead, on up to
/// moe_cublas_lanes streams. No host round trip while capturing: a decode step that runs it is
/// capturable.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "config/error.hpp"
#include "config/moe_config.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/moe/moe_kernels.hpp"
#include "gpu/cuda/moe/moe_tile.hpp"

namespace actorserve::gpu::cuda {

class gemm_runner;
struct moe_norm_args;

/// The fewest tokens the routed experts take at once: a longer step's tokens go through the
/// permutation, the grouped GEMMs and the combine in chunks (moe_chunk_tokens_for), so that the
/// expert buffers (top_k rows a token, of the intermediate and the hidden width) are sized for a
/// chunk, not for the step: Mixtral-8x7B's at 65,536 tokens take ~0.7 GB instead of ~5.9 GB.
inline constexpr int moe_ffn_chunk_tokens = 8192;

/// Most permuted rows of one expert that one cuBLAS gate/up GEMM of the per-expert path takes: its
/// [rows][2 x inter] output in the activation dtype waits in a scratch (inside the fp32 down
/// output's buffer, moe_ffn::init) until SiLU-and-mul reads it, so an expert's rows go in pieces.
inline constexpr int moe_cublas_piece_rows = 2048;

/// The per-expert cuBLAS path runs each piece's rows rounded up to a multiple of this many (the
/// extra rows read the next expert's rows, or the buffers' spare rows past the last, and their
/// outputs are overwritten or never read), so that its GEMMs take at most piece rows / 64
/// shapes a projection, which moe_ffn::warm_cublas runs once at start: cuBLAS sets up each new
/// shape on its first call, and a step that met hundreds of new row counts spent most of a
/// second doing so.
inline constexpr int moe_cublas_row_multiple = 64;

/// Streams ("lanes") the per-expert cuBLAS path spreads a chunk's GEMMs over (cublas_lanes.hpp),
/// where the scratch behind the gathered rows holds a full gate/up piece for each: the other
/// lanes' tiles fill the SMs that one GEMM's last partial wave, a small piece's few tiles or the
/// gap between two GEMMs leave idle. Each lane past the first has its own cuBLAS handle and
/// 32 MiB workspace.
inline constexpr int moe_cublas_lanes = 4;

/// The rows an expert a chunk is grown to hold on average, and the most bytes its expert buffers
/// (act and y: top_k rows a token of inter values in the activation dtype and of hidden fp32
/// values) may take for it (moe_chunk_tokens_for).
inline constexpr int moe_chunk_rows_per_expert = moe_cublas_piece_rows;
inline constexpr long long moe_chunk_max_bytes = 3LL << 30;

/// The chunk of a model's experts: moe_ffn_chunk_tokens, or more where that leaves an expert fewer
/// than moe_chunk_rows_per_expert rows on average, so that many small experts still give cuBLAS
/// products of a full piece (Qwen3-30B-A3B's 128 experts of top 8 get 512 rows at 8,192 tokens,
/// 2,048 at 32,768), at most as many tokens as moe_chunk_max_bytes of buffers hold; in multiples of
/// 1,024 tokens. Mixtral-8x7B 8,192; DeepSeek-V2-Lite 22,528; Qwen3-30B-A3B 32,768.
constexpr int moe_chunk_tokens_for(int num_experts, int top_k, int hidden, int inter, int act_bytes) {
  const long long k = top_k > 0 ? top_k : 1, e = num_experts > 0 ? num_experts : 1;
  const long long want = ((moe_chunk_rows_per_expert * e + k - 1) / k + 1023) / 1024 * 1024;
  const long long per_token = k * (static_cast<long long>(inter) * act_bytes + static_cast<long long>(hidden) * 4);
  const long long fits = per_token > 0 ? moe_chunk_max_bytes / per_token / 1024 * 1024 : want;
  const long long tokens = want < fits ? want : fits;
  return static_cast<int>(tokens > moe_ffn_chunk_tokens ? tokens : moe_ffn_chunk_tokens);
}

/// One sparse layer's weights on the device, in the activation dtype, or the routed experts'
/// in FP8 E4M3 with their scales.
struct device_experts {
  void* router = nullptr;    ///< [E][hidden]
  void* gate_up = nullptr;   ///< [E][2 * inter][hidden]: each expert's gate rows, then its up rows
  void* down = nullptr;      ///< [E][hidden][inter]
  /// With scales set, gate_up and down hold E4M3 codes (gate_up: parts 2, down: parts 1).
  moe_fp8_scales gate_up_fp8, down_fp8;
  /// DeepSeek-V2's shared experts as one dense SwiGLU MLP of shared_inter = n_shared_experts x
  /// the experts' intermediate size, added after the routed sum; null without them.
  void* shared_gate_up = nullptr;   ///< [2 * shared_inter][hidden], gate rows first
  void* shared_down = nullptr;      ///< [hidden][shared_inter]
};

class moe_ffn {
 public:
  using alloc_fn = std::function<status(size_t bytes, void** out)>;

  moe_ffn() = default;
  moe_ffn(const moe_ffn&) = delete;
  moe_ffn& operator=(const moe_ffn&) = delete;
  ~moe_ffn();

  /// Sizes the buffers for up to `max_tokens` tokens a step, run through the experts in chunks of
  /// at most `chunk_tokens` (> 0), through `alloc` (whose memory the caller owns and frees); the
  /// pinned host copy of the experts' row offsets is this object's. `e4m3_experts`: the experts
  /// are E4M3 (device_experts' scales), and the per-expert cuBLAS path dequantizes one expert's
  /// matrix at a time into a scratch of 2 x inter x hidden values of dt.
  status init(const moe_config& cfg, int hidden, act_dtype dt, int max_tokens, const alloc_fn& alloc,
              int chunk_tokens = moe_ffn_chunk_tokens, bool e4m3_experts = false);

  /// Chunks of at least `rows` routed rows an expert on average (0: every batched chunk) run the
  /// experts through cuBLAS while the stream is not capturing a graph; moe_cublas_rows_by_expert_size
  /// (the default): moe_cublas_min_rows_for this model's experts. cuda_tuning's
  /// moe_cublas_min_rows_per_expert, tests and benchmarks set it.
  void set_cublas_min_rows_per_expert(int rows) { cublas_min_rows_ = rows; }
  /// The rows an expert from which a chunk takes cuBLAS (the default resolved; valid after init).
  int cublas_min_rows_per_expert() const {
    return cublas_min_rows_ >= 0 ? cublas_min_rows_ : moe_cublas_min_rows_for(inter_, hidden_);
  }
  /// Chunks whose experts ran through cuBLAS so far.
  int64_t cublas_chunks() const { return cublas_chunks_.load(); }
  /// Lanes the cuBLAS path has (valid after init): moe_cublas_lanes where the scratch holds a
  /// full piece for each, else 1 (and 1 for E4M3 experts, whose one dequantization scratch the
  /// GEMMs share).
  int cublas_lanes() const { return static_cast<int>(lanes_.size()); }
  /// Runs the cuBLAS path on at most `lanes` of them (1: every GEMM on the caller's stream, in
  /// ascending rows); for benchmarks and tests.
  void set_cublas_lanes_in_use(int lanes) { lanes_in_use_ = lanes; }
  /// Chunks whose cuBLAS GEMMs ran on more than one lane so far.
  int64_t cublas_multi_lane_chunks() const { return multi_lane_chunks_.load(); }

  /// Runs the per-expert cuBLAS path's GEMMs once at every row count it takes (multiples of
  /// moe_cublas_row_multiple up to its piece rows), on expert 0 of `w` into this object's
  /// buffers, on every lane's cuBLAS handle, so that no step meets a GEMM shape for the first
  /// time; nothing when the path never runs. At start, outside graph capture; the outputs are
  /// discarded.
  status warm_cublas(gemm_runner& gemm, const device_experts& w, cudaStream_t s);

  /// out[t] (+)= the experts' weighted sum for each of `rows` tokens of x ([rows][hidden] of dt):
  /// added into out when `accumulate` (the residual), else written (a delta added later). Rows
  /// that `gemm` gives its GEMV (one token) take expert_gemv with SiLU-and-mul fused over the
  /// (token, slot) pairs, then moe_down_combine; more take the permutation and the grouped GEMM.
  /// One such token also takes the router GEMV and the routing in one launch (moe_route_gemv).
  /// The router runs over all rows at once, the experts chunk by chunk; a token's output is the
  /// same whichever chunk it falls in. A chunk of at least the cuBLAS threshold's rows an expert
  /// takes the per-expert cuBLAS path unless `s` is capturing a graph: it waits for the stream
  /// once (the experts' row offsets) and gives the grouped GEMM's numbers within the rounding of
  /// its 16-bit gate/up and activations (cuBLAS sums in another order). `gemm` enqueues on `s`.
  /// With `norm` (where takes_norm says so; its out is x), the router's launch runs the
  /// post-attention add_rmsnorm that writes x first (moe_norm_route_gemv), the same bits.
  /// With `counts` ([E], moe_route_args::counts) the router adds each token's top-k experts to
  /// it, but not those of rows whose `slots` entry is negative (padding; null: every row counts).
  status run(gemm_runner& gemm, const device_experts& w, const void* x, int rows, float* out, bool accumulate,
             cudaStream_t s, const moe_norm_args* norm = nullptr, uint32_t* counts = nullptr,
             const int32_t* slots = nullptr);
  /// Whether run() takes the add_rmsnorm that writes x (`rows` rows) into the router's launch:
  /// one token on the GEMV path, of a shape moe_norm_route_supported takes.
  bool takes_norm(const gemm_runner& gemm, const device_experts& w, const void* x, int rows) const;

 private:
  /// The experts of `rows` (<= chunk_tokens_) routed tokens from token `first` on: x and out
  /// point at token `first`'s rows; `gemv` takes the one-token kernels; `cublas`: the stream is not
  /// capturing, so a chunk past the threshold takes the per-expert cuBLAS path.
  status run_experts(gemm_runner& gemm, const device_experts& w, const void* x, int first, int rows, float* out,
                     bool accumulate, bool gemv, bool cublas, cudaStream_t s);
  /// The experts' products of the P permuted rows (moe_permute has run on `s`) through cuBLAS:
  /// the offsets read back, the rows gathered, per expert gate/up in pieces with SiLU-and-mul into
  /// act_, then down into y_; the pieces spread over the lanes (plan_moe_cublas_lanes), all
  /// gate/up pieces before any down piece (down's fp32 rows overwrite the gathered ones).
  status run_experts_cublas(gemm_runner& gemm, const device_experts& w, const void* x, int P, cudaStream_t s);
  /// One lane of the cuBLAS path: lane 0 is the caller's stream and gemm_runner; the others
  /// their own stream, handle and an event that marks their work's end.
  struct cublas_lane {
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
    std::unique_ptr<gemm_runner> gemm;
    void* scratch = nullptr;  ///< its gate/up pieces: [cublas_piece_rows_][2 x inter] of dt
  };
  /// Creates lanes 1..n-1 (streams, events, handles); lane 0 needs none.
  status make_lanes(int n);
  void release_lanes();
  /// Lanes 1..n-1 wait for what `s` has enqueued so far.
  status fork_lanes(int n, cudaStream_t s);
  /// `s` waits for lanes 1..n-1's work so far.
  status join_lanes(int n, cudaStream_t s);
  /// Lane l's gemm_runner and stream: the caller's for lane 0.
  gemm_runner& lane_runner(int l, gemm_runner& caller) const { return l == 0 ? caller : *lanes_[size_t(l)].gemm; }
  cudaStream_t lane_stream(int l, cudaStream_t caller) const { return l == 0 ? caller : lanes_[size_t(l)].stream; }
  /// Expert e's [rows][cols] matrix of w for a cuBLAS GEMM of the act dtype: in place, or for
  /// E4M3 experts (f's scales set) dequantized into expert_scratch_ on `s`, each part with its
  /// scales (fp8_dequantize's values, those the grouped GEMM converts to).
  status expert_matrix(const void* w, const moe_fp8_scales& f, int e, int rows, int cols, cudaStream_t s,
                       const void*& out);
  /// The rows a cuBLAS GEMM of the path runs for a piece of m rows: m rounded up to
  /// moe_cublas_row_multiple (at most cublas_piece_rows_, itself a multiple).
  static int cublas_rows(int m) {
    return (m + moe_cublas_row_multiple - 1) / moe_cublas_row_multiple * moe_cublas_row_multiple;
  }

  act_dtype dt_ = act_dtype::bf16;
  int hidden_ = 0, inter_ = 0, num_experts_ = 0, top_k_ = 0, chunk_tokens_ = moe_ffn_chunk_tokens;
  moe_gemm_tile largest_tile_ = moe_gemm_tile::m32;  ///< the largest grouped-GEMM tile the device runs
  int num_groups_ = 1, topk_groups_ = 1;   ///< group_limited_greedy's limits; 1, 1 for greedy
  bool sigmoid_ = false, renormalize_ = false;
  float scaling_ = 1.0f;
  // The router's buffers hold the step's tokens, the experts' a chunk's.
  float* logits_ = nullptr;           ///< [tokens][E]
  int32_t* route_counter_ = nullptr;  ///< moe_route_gemv's count of finished blocks (0 between launches)
  int32_t* experts_ = nullptr;        ///< [tokens][top_k]
  float* weights_ = nullptr;          ///< [tokens][top_k]
  int32_t* offsets_ = nullptr;        ///< [E + 1]
  int32_t* tile_offsets_ = nullptr;   ///< [E + 1]
  int32_t* sorted_pairs_ = nullptr;   ///< [chunk * top_k]
  int32_t* pair_rows_ = nullptr;      ///< [chunk * top_k]
  void* act_ = nullptr;               ///< [chunk * top_k][inter] of dt
  float* y_ = nullptr;                ///< [chunk * top_k][hidden]
  // The cuBLAS path.
  int cublas_min_rows_ = moe_cublas_rows_by_expert_size;  ///< set_cublas_min_rows_per_expert
  int cublas_piece_rows_ = 0;         ///< rows of a gate/up piece the scratch holds (0: the path never runs)
  int pair_rows_capacity_ = 0;        ///< rows of act_ and y_: a chunk's pairs and the rounding's spare rows
  void* cublas_scratch_ = nullptr;    ///< the lanes' gate/up pieces: inside y_, behind the gathered rows
  std::vector<cublas_lane> lanes_;    ///< at least one once init has run
  int lanes_in_use_ = moe_cublas_lanes;  ///< set_cublas_lanes_in_use
  cudaEvent_t fork_ = nullptr;        ///< the point of `s` the lanes wait for
  std::atomic<int64_t> multi_lane_chunks_{0};
  void* expert_scratch_ = nullptr;    ///< E4M3 experts: one expert's matrix dequantized (init)
  int32_t* host_offsets_ = nullptr;   ///< [E + 1]: offsets_ read back (cudaMallocHost)
  std::atomic<int64_t> cublas_chunks_{0};  ///< chunks run through cuBLAS
};

}  // namespace actorserve::gpu::cuda
