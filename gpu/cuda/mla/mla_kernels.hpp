#pragma once
/// The kernels of DeepSeek-V2's multi-head latent attention on the device (docs/mla.md): the
/// latent norm, rope and cache write, and the absorbed attention over the latent cache, in which
/// every head of a token reads the same stream of (r + dr)-wide keys whose first r values are
/// also the values (an MQA shape). Every launch size depends on host-known counts only (tokens,
/// heads, splits), so a decode step that runs them is capturable in a CUDA graph. Launchers are
/// plain C++; each returns its cudaError_t as an int.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/mla/mla_splits.hpp"

namespace actorserve::gpu::cuda {

/// Widest latent (kv_lora_rank) latent_attention takes: its per-thread accumulators.
inline constexpr int mla_max_rank = 512;
/// Widest rope part (qk_rope_head_dim) the kernels take.
inline constexpr int mla_max_rope_dim = 128;

/// out[t] = rmsnorm(x[t] + bias) * weight rounded to dt, in fp32 (q_a_layernorm over q_a_proj's
/// output, bias from attention_bias or null).
int mla_rmsnorm(act_dtype dt, const float* x, const float* bias, const float* weight, float eps, int n, int width,
                void* out, cudaStream_t s);

/// Per token: the latent and rope key (kv_a_proj_with_mqa's output) normalised, rotated and
/// written into the latent cache, and each head's q_pe rotated into the absorbed query. The rope
/// is DeepSeek's interleaved one ((x[2i], x[2i+1]) times cos_i + i sin_i), its cos and sin times
/// attention_factor (YaRN), as gpu/model/rope's apply_rope_interleaved.
struct mla_latent_args {
  const float* kv_a = nullptr;       ///< [n][r + dr]: c_kv before kv_a_layernorm, then k_pe before rope
  const float* kv_a_bias = nullptr;  ///< [r + dr] or null
  const float* kv_a_norm = nullptr;  ///< [r]: kv_a_layernorm's weights
  float eps = 1e-6f;
  /// [n][H][dn + dr] of dt: the query projection's output; each head's q_pe is rotated in place
  /// (the up-projected prefill's query)
  void* q = nullptr;
  /// Or null: the query projection's fp32 output, rows q_f32_stride floats apart (the one-token
  /// GEMV's, which projects the query and kv_a together). The kernel rounds it to dt, as the
  /// projection's dt output is rounded, and writes q from it (q's prior contents unused).
  const float* q_f32 = nullptr;
  int q_f32_stride = 0;
  float* q_abs = nullptr;            ///< [n][H][r + dr]: receives each head's rotated q_pe at r
  const int32_t* positions = nullptr;  ///< [n]
  const int32_t* slots = nullptr;    ///< [n]: block * block_size + offset; negative: no cache write
  const float* inv_freq = nullptr;   ///< [dr / 2]
  float attention_factor = 1.0f;
  void* cache = nullptr;             ///< one layer: [num_blocks * block_size][r + dr] of dt
  int n = 0, num_heads = 0, rank = 0, nope_dim = 0, rope_dim = 0;
};
int mla_latent_write(act_dtype dt, const mla_latent_args& a, cudaStream_t s);

/// Causal absorbed attention over the latent cache: for token t at position p and head h,
///   score(j) = (q_abs[t][h][:r] . c_kv(j) + q_abs[t][h][r:] . k_pe(j)) * scale,   j = 0 .. p
///   out[t][h] = sum_j softmax(score)(j) c_kv(j)                                   (r wide)
/// Grid (n, ceil(H / 16), num_splits): each CTA takes 16 heads of one token over one contiguous
/// piece of its context, so the heads share each key read. A row's context of c keys is cut into
/// pieces of max(ceil(c / num_splits), mla_min_piece) keys rounded up to whole 32-key tiles
/// (fewer than num_splits for a short context). With one piece its CTA writes the output. With
/// more, cluster_merge (compute capability 9.x): a row's head group is one thread-block cluster
/// of num_splits CTAs, whose pieces' unnormalised sums and (max, sum) stay in shared memory and
/// are merged by all of the cluster's CTAs, each a share of the outputs, through distributed
/// shared memory (num_splits past the largest cluster the GPU places, 16 or 8, run as that
/// many); otherwise the pieces' sums go to the partial buffers and the CTA that stores the last
/// piece of a (row, head group), told by its counter, merges them. No second launch either way.
struct latent_attention_args {
  const float* q_abs = nullptr;        ///< [n][H][r + dr]: q_lat = W_UK^T q_nope, then the rotated q_pe
  const void* cache = nullptr;         ///< one layer: [num_blocks * block_size][r + dr] of dt
  const int32_t* block_tables = nullptr;
  const attn_seq* seqs = nullptr;
  const int32_t* token_seqs = nullptr; ///< [n]: each row's sequence; negative: a padding row (zeros out)
  const int32_t* positions = nullptr;  ///< [n]: a row attends to keys 0 .. its position
  int n = 0, num_heads = 0, rank = 0, rope_dim = 0, block_size = 0, num_splits = 1;
  float scale = 1.0f;                  ///< softmax scale (YaRN's mscale correction included)
  /// The pieces merge within their cluster (sm_90 code on a 9.x GPU); the partial buffers and
  /// counters are then not used.
  bool cluster_merge = false;
  float* partial_o = nullptr;          ///< [num_splits][n][H][r] (num_splits > 1 without cluster_merge)
  float* partial_ml = nullptr;         ///< [num_splits][n][H][2]: running max and sum
  /// [n][ceil(H / mla_heads_per_cta)] (num_splits > 1): pieces stored per (row, head group); zeros before the
  /// first launch, and zeros again after each, which the merging CTA resets
  int32_t* split_counters = nullptr;
  void* out = nullptr;                 ///< [n][H][r] of dt: the normalised latent output
};
/// rank at most mla_max_rank, rope_dim at most mla_max_rope_dim, r + dr a multiple of 8,
/// num_splits in [1, mla_max_splits], and with num_splits > 1 and no cluster_merge the partial
/// buffers and counters (cudaErrorInvalidValue otherwise). One launch: with num_splits > 1 the pieces merge in it.
int latent_attention(act_dtype dt, const latent_attention_args& a, cudaStream_t s);

/// The up-projected form's operands for one sequence's context of c tokens (mla_prefill):
/// its latents gathered from the paged cache into [c][r] of dt (kv_b_proj's input), and its rope
/// key copied into every head's key, k[j][h][dn, dn + dr) of the [c][H][dn + dr] keys.
struct mla_gather_args {
  const void* cache = nullptr;         ///< one layer: [num_blocks * block_size][r + dr] of dt
  const int32_t* block_table = nullptr;  ///< the sequence's blocks
  void* latents = nullptr;             ///< [c][r] of dt
  void* k = nullptr;                   ///< [c][H][dn + dr] of dt
  int context = 0, num_heads = 0, rank = 0, nope_dim = 0, rope_dim = 0, block_size = 0;
};
int mla_gather_latents(act_dtype dt, const mla_gather_args& a, cudaStream_t s);

/// Widest up-projected query / key head (qk_nope_head_dim + qk_rope_head_dim) and value head
/// (v_head_dim) mla_up_projected_attention takes: DeepSeek-V2's and V3's 192 and 128.
inline constexpr int mla_max_up_projected_qk = 192;
inline constexpr int mla_max_up_projected_v = 128;

/// Queries a CTA of mla_up_projected_attention takes (8 warps of 16 rows).
inline constexpr int mla_up_projected_rows = 128;
/// Pieces and CTAs (a head's) one launch takes: its arguments travel by value.
inline constexpr int mla_up_projected_max_pieces = 16;
inline constexpr int mla_up_projected_max_items = 256;
/// Queries [q_row, q_row + queries) of the step's rows (the last queries of a chunk, or all of
/// them), which see keys [0, context) of the rows of k and v from kv_row.
struct mla_up_projected_piece {
  int32_t q_row = 0, queries = 0, kv_row = 0, context = 0;
};

/// A CTA's work (one head's): query tile `tile` (queries [128 tile, 128 tile + 128)) of a piece.
struct mla_up_projected_item {
  uint16_t piece = 0, tile = 0;
};

/// One launch: its pieces, and its CTAs a head, the tiles whose last query sees the most keys
/// first.
struct mla_up_projected_launch {
  int32_t num_pieces = 0, num_items = 0;
  mla_up_projected_piece pieces[mla_up_projected_max_pieces];
  mla_up_projected_item items[mla_up_projected_max_items];
};

/// Causal attention of prefill chunks over their up-projected contexts (FlashAttention-2 on
/// tensor cores, fp32 sums, probabilities rounded to dt for P V): for each piece p of `launch`,
/// its query i of head h (row p.q_row + i, at position p.context - p.queries + i) attends to
/// keys 0 .. that position of head h (rows p.kv_row + j of k and v),
///   out[row][h] = sum_j softmax_j(q[row][h] . k[p.kv_row + j][h] x scale) v[p.kv_row + j][h].
/// A CTA takes one item (a query tile of a piece) of one head: grid (launch.num_items, H).
struct mla_up_projected_args {
  const void* q = nullptr;    ///< [rows][H][qk_dim] of dt: the step's queries, q_pe rotated
  const void* k = nullptr;    ///< [context rows][H][qk_dim] of dt: k_nope, then the shared k_pe
  const void* v = nullptr;    ///< [context rows][H][v_dim] of dt
  void* out = nullptr;        ///< [rows][H][v_dim] of dt
  int num_heads = 0, qk_dim = 0, v_dim = 0;
  float scale = 1.0f;         ///< softmax scale (YaRN's mscale correction included)
  mla_up_projected_launch launch;
};
/// Whether the kernels take these widths: multiples of 8 up to mla_max_up_projected_qk / _v.
bool mla_up_projected_supported(int qk_dim, int v_dim);
/// cudaErrorInvalidValue for widths it does not take, a piece of more queries than context, or
/// an item past its piece's queries.
int mla_up_projected_attention(act_dtype dt, const mla_up_projected_args& a, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
