#pragma once
/// The kernels of a mixture-of-experts FFN on the device: the router (scores, top-k, weights),
/// the token -> expert permutation, the grouped expert GEMM and the weighted combine. Every
/// size a launch depends on is known on the host (tokens, top_k, experts); what depends on the
/// routing (counts, offsets, rows per expert) stays on the device, so a step that runs them is
/// capturable in a CUDA graph. Launchers are plain C++; each returns its cudaError_t as an int.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/moe/moe_tile.hpp"

namespace actorserve::gpu::cuda {

/// Experts' weights in FP8 E4M3 (an FP8 checkpoint's, or rounded by --quantization fp8): one byte
/// a weight and fp32 scales. per_row: scale[e][r] for row r of expert e's [rows][K] matrix;
/// block128: each expert's matrix as `parts` stacked parts of rows / parts rows (gate/up: 2,
/// down: 1), each with its own 128 x 128 block grid, scale[e][part][fp8_blocks(rows / parts)]
/// [fp8_blocks(K)], so a part whose rows do not end on a block keeps its checkpoint's scales.
struct moe_fp8_scales {
  const float* scale = nullptr;  ///< null: the weights are of the activation dtype
  fp8_scale_mode mode = fp8_scale_mode::per_row;
  int parts = 1;
};

/// Most experts per token the router and combine kernels take.
inline constexpr int moe_max_top_k = 32;
/// Most routed experts the router kernel takes (their scores sit in shared memory).
inline constexpr int moe_max_experts = 1024;

/// gpu/model/moe_router's greedy (num_groups 1) or group-limited greedy top-k for each of n
/// tokens, in fp32.
struct moe_route_args {
  const float* logits = nullptr;   ///< [n][num_experts]
  int n = 0, num_experts = 0, top_k = 0;
  /// Group-limited greedy: experts in num_groups consecutive groups, the topk_groups groups with
  /// the best top expert kept (ties: the lower group), the top_k chosen among their experts.
  int num_groups = 1, topk_groups = 1;
  bool sigmoid = false;            ///< scores: sigmoid(logits), else softmax(logits)
  bool renormalize = false;        ///< divide the chosen scores by their sum
  float scaling = 1.0f;            ///< times routed_scaling_factor
  int32_t* experts = nullptr;      ///< [n][top_k]: by descending score, ties by ascending index
  float* weights = nullptr;        ///< [n][top_k]
  /// [num_experts] or null: each chosen expert's count gains 1 a token (atomically; modulo 2^32,
  /// so a reader takes differences of 32-bit values).
  uint32_t* counts = nullptr;
  /// [n] or null: the rows' KV slots; a row whose slot is negative (a decode graph's padding row)
  /// is routed but not counted.
  const int32_t* slots = nullptr;
};
int moe_route(const moe_route_args& a, cudaStream_t s);

/// The router of one token in one launch: logits = W_router x (the numbers gemv() gives, either
/// path of it), then moe_route on them (greedy or group-limited, either scoring, with the same
/// warp code). The GEMV's blocks write the logits; the last one to finish, counted on `counter`,
/// routes.
struct moe_router_gemv_args {
  const void* x = nullptr;     ///< [hidden] of dt
  const void* w = nullptr;     ///< [num_experts][hidden] of dt
  int hidden = 0;
  float* logits = nullptr;     ///< [num_experts]: written here, read back by the last block
  int32_t* counter = nullptr;  ///< 0 before the launch; the kernel leaves it 0
};
/// `a` as moe_route takes it with n = 1; its logits are g.logits. hidden must be a multiple of 8
/// and x, w 16-byte aligned (cudaErrorInvalidValue otherwise).
int moe_route_gemv(act_dtype dt, const moe_router_gemv_args& g, const moe_route_args& a, cudaStream_t s);

/// The post-attention residual add and RMSNorm of the one token whose normed row the router reads,
/// for moe_norm_route_gemv: residual += delta (+ bias), out = rmsnorm(residual) * weight as dt.
struct moe_norm_args {
  float* residual = nullptr;      ///< [hidden] fp32
  const float* delta = nullptr;   ///< [hidden] fp32, or null (nothing added)
  const float* bias = nullptr;    ///< [hidden] fp32, or null
  const float* weight = nullptr;  ///< [hidden] fp32
  float eps = 0.0f;
  void* out = nullptr;            ///< [hidden] of dt: the experts' input (16-byte aligned)
};
/// Most experts and largest hidden size moe_norm_route_gemv takes: its one block of 1,024 threads
/// reads the router's weights (at most 64 KB) before waiting for the previous kernel.
inline constexpr int moe_norm_route_max_experts = 8;
inline constexpr int moe_norm_route_max_hidden = 4096;
/// Whether moe_norm_route_gemv takes a model of this hidden size and expert count: hidden a
/// multiple of 8 in [1024, moe_norm_route_max_hidden], at most moe_norm_route_max_experts.
bool moe_norm_route_supported(int hidden, int num_experts);
/// add_rmsnorm of one row (n.out, the bits add_rmsnorm gives) and moe_route_gemv on that row (the
/// logits, experts and weights it gives) in one launch of one block, saving the launch between
/// them that a one-token step waits for in every sparse layer. g.x is not read (the row is
/// n.out); g.counter is not used. cudaErrorInvalidValue where moe_norm_route_supported says no,
/// a.n is not 1, or g.w or n.out is not 16-byte aligned.
int moe_norm_route_gemv(act_dtype dt, const moe_norm_args& n, const moe_router_gemv_args& g, const moe_route_args& a,
                        cudaStream_t s);

/// A stable counting sort of the (token, slot) pairs p = t * top_k + j by expert, as
/// gpu/model/expert_permutation: experts ascending, pairs ascending within one expert.
struct moe_permute_args {
  const int32_t* experts = nullptr;  ///< [num_pairs]
  int num_pairs = 0, num_experts = 0;
  int32_t* offsets = nullptr;        ///< [num_experts + 1]: expert e's rows are [offsets[e], offsets[e + 1])
  moe_gemm_tile tile = moe_gemm_tile::m32;  ///< the grouped GEMM's tile, whose rows tile_offsets counts in
  int32_t* tile_offsets = nullptr;   ///< [num_experts + 1]: expert e's tiles of moe_tile_rows(tile) rows start here
  int32_t* sorted_pairs = nullptr;   ///< [num_pairs]: the pair each permuted row holds
  int32_t* pair_rows = nullptr;      ///< [num_pairs]: the permuted row of each pair (the inverse)
};
int moe_permute(const moe_permute_args& a, cudaStream_t s);

/// The per-expert cuBLAS path's A operand: out[r, :] = x[rows[r] / rows_div, :] for r < num_rows
/// (the tokens' rows in permuted order, so that each expert's rows are contiguous).
struct moe_gather_args {
  const void* x = nullptr;          ///< [tokens][width] of dt
  const int32_t* rows = nullptr;    ///< [num_rows]: moe_permute_args::sorted_pairs
  int rows_div = 1;                 ///< top_k: pair p reads token p / top_k
  int num_rows = 0, width = 0;
  void* out = nullptr;              ///< [num_rows][width] of dt
};
/// width must be a multiple of 8 and x, out 16-byte aligned (cudaErrorInvalidValue otherwise).
int moe_gather(act_dtype dt, const moe_gather_args& a, cudaStream_t s);

/// Most tiles of shape `tile` a grouped GEMM over num_pairs rows can have: its grid's rows.
int moe_max_tiles(int num_pairs, int num_experts, moe_gemm_tile tile);

/// Y[r, :N] = A[r, :K] * W_e[N, K]^T for each permuted row r of expert e, on tensor cores (16-bit
/// operands, fp32 accumulation, K streamed through a multi-stage cp.async pipeline). Each CTA
/// finds its expert and tile from tile_offsets on the device and returns when its tile is past
/// the last one. Every tile shape gives the same bits: each output is the same chain of mma
/// instructions over K in ascending 16-wide steps, whatever rows and columns share its CTA.
struct grouped_gemm_args {
  const void* a = nullptr;           ///< [rows][K] of dt
  /// When set, permuted row r reads A row a_rows[r] / a_rows_div (sorted pairs -> tokens);
  /// otherwise A is in permuted order already.
  const int32_t* a_rows = nullptr;
  int a_rows_div = 1;
  const void* w = nullptr;           ///< [num_experts][N][K] of dt
  const int32_t* offsets = nullptr;       ///< moe_permute_args::offsets
  const int32_t* tile_offsets = nullptr;  ///< moe_permute_args::tile_offsets
  moe_gemm_tile tile = moe_gemm_tile::m32;  ///< the shape tile_offsets was cut for (moe_permute_args::tile)
  int num_pairs = 0, num_experts = 0, n = 0, k = 0;
  void* y = nullptr;                 ///< [num_pairs][N]: fp32, or dt when y_act
  bool y_act = false;
  /// silu_and_mul_act fused in: W_e is [2N][K] (gate rows, then up rows) and y, of dt, gets
  /// SiLU(gate) * up of the two products each rounded to dt, the product rounded to dt.
  bool silu_and_mul = false;
  /// E4M3 weights: w holds the codes (gate/up: parts 2 with block scales); each weight enters
  /// the products as e4m3 x its scale rounded once to dt, the operand fp8_dequantize gives, so
  /// the outputs are the bits of this GEMM over the dequantized weights.
  moe_fp8_scales fp8;
};
/// K must be a multiple of 8 (16 with E4M3 weights) and a, w 16-byte aligned
/// (cudaErrorInvalidValue otherwise); the
/// tile one the device runs (moe_gemm_tile_runs with largest_moe_gemm_tile(); else the launch's
/// error).
int grouped_gemm(act_dtype dt, const grouped_gemm_args& a, cudaStream_t s);

/// The largest of m32, m64 and m128 whose shared memory the current device lets a block take:
/// m128 on compute capability 9.x (227 KiB), m64 on 8.0 (163 KiB), m32 on 8.6 / 8.9 (99 KiB).
/// The decode tiles m16 and m48 run wherever m32 does.
moe_gemm_tile largest_moe_gemm_tile();

/// The one-token path: Y[p, :N] = A[p / a_rows_div, :K] * W_e[N, K]^T with e = experts[p], for
/// every pair p in pair order (no permutation), reading only the chosen experts' weights.
struct expert_gemv_args {
  const void* a = nullptr;           ///< [num_pairs / a_rows_div][K] of dt
  int a_rows_div = 1;
  const int32_t* experts = nullptr;  ///< [num_pairs]
  const void* w = nullptr;           ///< [num_experts][N][K] of dt
  int num_pairs = 0, n = 0, k = 0;
  void* y = nullptr;                 ///< [num_pairs][N]: fp32, or dt when y_act
  bool y_act = false;
  /// silu_and_mul_act fused in: W_e is [2N][K] (gate rows, then up rows) and y, of dt, gets
  /// SiLU(gate) * up of the two products each rounded to dt, the product rounded to dt.
  bool silu_and_mul = false;
  /// E4M3 weights: w is [num_experts][2N][K] codes (parts 2 with block scales). Each row's dot
  /// product sums the exact E4M3 values times x in fp32 and takes its row's scale once
  /// (per_row), or each 16-weight partial sum takes its block's scale (block128), in fp8_gemv's
  /// form; silu_and_mul then rounds gate and up to dt as above.
  moe_fp8_scales fp8;
};
/// K must be a multiple of 8 and a, w 16-byte aligned (cudaErrorInvalidValue otherwise); E4M3
/// weights only with silu_and_mul and K a multiple of 16.
int expert_gemv(act_dtype dt, const expert_gemv_args& a, cudaStream_t s);

/// The one-token down projection and combine in one: out[t, c] (+)= sum over slots j, in ascending
/// expert order, of weights[t, j] * (act[t * top_k + j, :K] . Wdown_e[c, :K]) with e = experts[t, j]:
/// the numbers expert_gemv (fp32 y) then moe_combine (no pair_rows) give, without y.
struct moe_down_combine_args {
  const void* act = nullptr;         ///< [n * top_k][K] of dt, pair order
  const int32_t* experts = nullptr;  ///< [n][top_k]
  const float* weights = nullptr;    ///< [n][top_k]: moe_route's, renormalised and scaled already
  const void* w = nullptr;           ///< [num_experts][hidden][K] of dt
  int n = 0, top_k = 0, hidden = 0, k = 0;
  float* out = nullptr;              ///< [n][hidden]
  bool accumulate = false;           ///< add into out (the residual) instead of overwriting it
  /// E4M3 down weights (w [num_experts][hidden][K] codes; parts 1): each slot's dot product in
  /// expert_gemv's E4M3 form, then combined as above.
  moe_fp8_scales fp8;
};
/// K must be a multiple of 8 (16 with E4M3 weights), act and w 16-byte aligned, top_k in
/// [1, moe_max_top_k]. Rows of
/// at least moe_down_slot_warps_min_k take a warp a slot (Mixtral-8x7B's 14,336: 217.5 against
/// 216.4 tok/s on an H100), shorter ones a warp a column with two slots at a time (a warp a slot
/// lost 10 % on Qwen3-30B-A3B's 768 and 3.5 % on DeepSeek-V2-Lite's 1,408); the same bits.
inline constexpr int moe_down_slot_warps_min_k = 4096;
int moe_down_combine(act_dtype dt, const moe_down_combine_args& a, cudaStream_t s);

/// out[t] (+)= sum over slots j of weights[t, j] * y[pair_rows[t * top_k + j]], the slots summed
/// in ascending expert order (expert_permutation's combine_rows).
struct moe_combine_args {
  const float* y = nullptr;          ///< [n * top_k][hidden], permuted rows
  const int32_t* pair_rows = nullptr;  ///< null: y in pair order (expert_gemv's output)
  const int32_t* experts = nullptr;  ///< [n][top_k]
  const float* weights = nullptr;    ///< [n][top_k]
  int n = 0, top_k = 0, hidden = 0;
  float* out = nullptr;              ///< [n][hidden]
  bool accumulate = false;           ///< add into out (the residual) instead of overwriting it
};
int moe_combine(const moe_combine_args& a, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
