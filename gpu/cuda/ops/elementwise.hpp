#pragma once
/// The step's elementwise and row kernels: dtype conversion, embedding gather, residual add +
/// RMSNorm, SiLU-and-mul, rope with the KV-cache write, KV block copies.
/// Launchers are plain C++ (no device code): callable from .cpp files. Each enqueues on `stream`
/// and returns the launch's cudaError_t as an int (0 = success).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"

namespace actorserve::gpu::cuda {

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
/// Cache layout: [num_blocks, block_size, KVH, D] of `dt`, or of E4M3 bytes when kv_fp8 is set.
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
  /// cos and sin are multiplied with it: YaRN's attention factor (rope_attention_factor), 1 else.
  float attention_factor = 1.0f;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int n = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  /// When set: each rotated q also goes here as the activation dtype, times q16_scale
  /// ([n, num_heads, head_dim]; what the persistent prefill kernel copies in as it is).
  void* q16 = nullptr;
  float q16_scale = 1.0f;
  /// --kv-cache-dtype fp8: the cache holds one E4M3 byte per element, the code of x / k_scale
  /// (x / v_scale for v) rounded as gpu::e4m3_encode rounds (IEEE division of the fp32 value,
  /// ties to even, saturating at 448): the CPU executor's write_kv, bit for bit.
  bool kv_fp8 = false;
  float k_scale = 1.0f, v_scale = 1.0f;
};
/// head_dim must be a multiple of 8 of at most 256 (cudaErrorInvalidValue otherwise).
int rope_kv_write(act_dtype dt, const rope_kv_args& a, cudaStream_t s);

/// Copies whole KV blocks: for each pair p, block pairs[2p] -> pairs[2p+1] in every one of the
/// `num_caches` caches (K and V of every layer) laid out back to back, each `cache_stride` bytes,
/// a block being `block_bytes`.
int copy_kv_blocks(void* pool, const int32_t* pairs, int num_pairs, int num_caches, size_t cache_stride,
                   size_t block_bytes, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
