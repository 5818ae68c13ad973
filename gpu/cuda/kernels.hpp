#pragma once
/// Launchers for the executor's own CUDA kernels. Plain C++ (no device code): callable from .cpp
/// files. Activations that feed a GEMM are bf16 or fp16 (`act_dtype`); everything that accumulates
/// (residual stream, GEMM outputs, logits, query vectors) is fp32. Each launcher enqueues on
/// `stream` and returns the launch's cudaError_t as an int (0 = success).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace actorserve::gpu::cuda {

/// Whether the step's kernels (embedding, norms, rope, SiLU, the sampler and the GEMV) launch as
/// programmatic dependents of the kernel before them (sm_90 PDL): their blocks are scheduled while
/// that one drains and wait for it before touching its outputs. Process-wide; default on.
void set_programmatic_launch(bool on);
bool programmatic_launch();

/// Element type of weights, GEMM inputs and the KV cache.
enum class act_dtype { bf16, fp16 };

/// Storage dtype of host data to convert on the device.
enum class src_dtype { f32, bf16, f16 };

/// Bytes of one act_dtype element.
inline constexpr size_t act_size(act_dtype) { return 2; }

/// dst[i] = convert(src[i]) for n elements (weights upload).
int convert_to_act(act_dtype dt, const void* src, src_dtype sd, void* dst, size_t n, cudaStream_t s);

/// dst[i] = float(src[i]) for n elements (norm weights, biases).
int convert_to_f32(const void* src, src_dtype sd, float* dst, size_t n, cudaStream_t s);

/// out[t, :] = float(table[ids[t], :]) for t < n (the residual stream starts in fp32).
int embedding_gather(act_dtype dt, const void* table, const int32_t* ids, int n, int hidden, float* out,
                     cudaStream_t s);

/// dst[i, :] = src[rows[i] * src_stride, :] for i < n: `width` fp32 values per row (the last
/// layer of a prefill-carrying step gathers the residual and q rows of its sampled tokens).
int gather_rows(const float* src, int src_stride, const int32_t* rows, int n, int width, float* dst, cudaStream_t s);

/// For i < n, r = rows ? rows[i] : i:
///   residual[r] += delta[r] (+ bias) when delta is not null; out[i] = rmsnorm(residual[r]) * weight.
/// The norm is computed in fp32 and rounded to `dt` once, as HF does.
int add_rmsnorm(act_dtype dt, float* residual, const float* delta, const float* bias, const float* weight,
                float eps, const int32_t* rows, int n, int hidden, void* out, cudaStream_t s);

/// out[t, i] = silu(gu[t, i]) * gu[t, inter + i]; gu is [n, 2*inter] fp32, out [n, inter].
int silu_and_mul(act_dtype dt, const float* gate_up, int n, int inter, void* out, cudaStream_t s);
/// The same over a gate_up of `dt` (a GEMM's rounded output, gemm_runner::run_act): SiLU in fp32.
int silu_and_mul_act(act_dtype dt, const void* gate_up, int n, int inter, void* out, cudaStream_t s);

/// The fused QKV projection's epilogue. qkv is [n, (H + 2*KVH) * D] fp32 (q, then k, then v):
/// adds `bias` (same layout, may be null), rotates q in place and k (rotate_half convention,
/// angle = positions[t] * inv_freq[i]), and writes k and v into the paged cache at
/// slots[t] = block * block_size + offset (a negative slot writes nothing).
/// Cache layout: [num_blocks, block_size, KVH, D] of `dt`.
struct rope_kv_args {
  float* qkv = nullptr;
  /// When set: the input instead of qkv, in the same layout as `dt` (the QKV GEMM's rounded
  /// output, gemm_runner::run_act); qkv then only receives the rotated fp32 q.
  const void* qkv16 = nullptr;
  /// When set: per token, whether its rotated fp32 q is written to qkv (the decode kernels read
  /// it; the prefill kernel reads q16). Null: every token's is.
  const int32_t* q32 = nullptr;
  const float* bias = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* slots = nullptr;
  const float* inv_freq = nullptr;   ///< [D/2]
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int n = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  /// When set: each rotated q also goes here as the activation dtype, times q16_scale
  /// ([n, num_heads, head_dim]; what the persistent prefill kernel copies in as it is).
  void* q16 = nullptr;
  float q16_scale = 1.0f;
};
/// head_dim must be a multiple of 8 of at most 256 (cudaErrorInvalidValue otherwise).
int rope_kv_write(act_dtype dt, const rope_kv_args& a, cudaStream_t s);

/// Copies whole KV blocks: for each pair p, block pairs[2p] -> pairs[2p+1] in every one of the
/// `num_caches` caches (K and V of every layer) laid out back to back, each `cache_stride` bytes,
/// a block being `block_bytes`.
int copy_kv_blocks(void* pool, const int32_t* pairs, int num_pairs, int num_caches, size_t cache_stride,
                   size_t block_bytes, cudaStream_t s);

/// One sequence of an attention call.
struct attn_seq {
  int32_t q_start = 0;       ///< first of its query tokens in the step's token order
  int32_t q_len = 0;         ///< its query tokens this step
  int32_t context_len = 0;   ///< tokens in the cache once this step's are written
  int32_t bt_offset = 0;     ///< its block table starts at block_tables[bt_offset]
};

/// One thread block's work: a tile of query tokens of one sequence and one KV head, over the key
/// range [kv_begin, kv_end). partial >= 0: an unnormalised partial result goes to that slot.
struct attn_item {
  int32_t seq = 0, q_begin = 0, q_len = 0, kv_head = 0;
  int32_t kv_begin = 0, kv_end = 0, partial = -1, pad = 0;
  /// Copies of seqs[seq]'s fields: a decode CTA finds its block table without first reading the
  /// sequence, one dependent load fewer before its first K/V copy.
  int32_t bt_offset = 0, context_len = 0;
  /// Decode pieces: the block holding key kv_begin (set_first_blocks), so the flash-decoding
  /// kernel issues its first K/V copy without reading the block table; -1: read the table.
  int32_t first_block = -1;
};

/// Merges `num_splits` consecutive partial slots starting at `first_partial` into the output of
/// the tile (q_begin, q_len, kv_head).
struct attn_combine {
  int32_t q_begin = 0, q_len = 0, kv_head = 0, first_partial = 0, num_splits = 0, pad[3] = {0, 0, 0};
};

/// Query rows (tokens x heads of one KV group) a thread block handles.
inline constexpr int attn_tile_rows = 32;

struct attention_args {
  const float* q = nullptr;          ///< token t, head h at q[t * q_stride + h * D]
  int q_stride = 0;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* block_tables = nullptr;
  const attn_seq* seqs = nullptr;
  const attn_item* items = nullptr;
  const attn_combine* combines = nullptr;
  const int32_t* counts = nullptr;   ///< device: [0] items, [1] combines (grids may be larger)
  int item_grid = 0, combine_grid = 0;
  float* partial_acc = nullptr;      ///< [slots, attn_tile_rows, D]
  float* partial_ml = nullptr;       ///< [slots, attn_tile_rows, 2] (max in log2 units, sum)
  void* out = nullptr;               ///< [tokens, H * D] of dt
  int num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.0f;                ///< softmax scale (1/sqrt(D))
};

/// Causal paged attention for prefill chunks and decode alike: each query token at position p
/// attends to cached keys [0, p]. Head dims: multiples of 8 up to 256.
int paged_attention(act_dtype dt, const attention_args& a, cudaStream_t s);

/// Per-sequence sampling controls for the device sampler.
struct sample_seq {
  float temperature = 0.0f;          ///< < 1e-5: greedy
  float top_p = 1.0f;
  int32_t top_k = -1;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f;
  int32_t num_logprobs = 0;          ///< top logprobs wanted (0..max_top_logprobs)
  uint64_t seed = 0;
  uint64_t counter = 0;              ///< num_generated
  int32_t penalty_begin = 0, penalty_count = 0;  ///< entries in `penalty_tokens`
  int32_t mask_begin = 0, mask_count = 0;        ///< ids forced to -inf in `mask_ids`
};

/// The most top logprobs the device sampler returns per sequence.
inline constexpr int max_top_logprobs = 20;

/// What the sampler writes per sequence.
struct sample_out {
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t top_ids[max_top_logprobs];
  float top_logprobs[max_top_logprobs];
};

/// One token the penalties touch: id, whether it is anywhere in prompt + output (repetition),
/// and how often it occurs in the output (presence, frequency).
struct penalty_token {
  int32_t id = 0;
  int32_t in_history = 0;
  int32_t output_count = 0;
};

/// Samples one token per row of logits ([num_seqs, vocab] fp32, modified in place), the CPU
/// sampler's semantics: penalties, masks, logprobs (before temperature), then greedy or
/// temperature/top-k/top-p/min-p and one counter-based draw.
int sample_tokens(float* logits, int num_seqs, int vocab, const sample_seq* seqs,
                  const penalty_token* penalty_tokens, const int32_t* mask_ids, sample_out* out,
                  cudaStream_t s);

}  // namespace actorserve::gpu::cuda
