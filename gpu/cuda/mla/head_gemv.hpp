#pragma once
/// The absorbed form's per-head products at decode-sized row counts: W_UK (q_lat = q_nope x W_UK,
/// a head's [dn][r] block of kv_b_proj read with its latent columns contiguous) and W_UV (out =
/// o_lat x W_UV^T, a head's [dv][r] block), for every head in one launch that reads each head's
/// block once for all rows. cuBLAS's strided-batched GEMM does the same at any row count; at one
/// to mla_head_gemv_max_rows rows this kernel is bandwidth-bound where cuBLAS's is not (see
/// docs/mla.md).
#include <cuda_runtime_api.h>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/mla/mla_kernels.hpp"

namespace actorserve::gpu::cuda {

/// Most rows (decode tokens) mla_head_gemv takes: its accumulators are rows x 8 floats a thread.
inline constexpr int mla_head_gemv_max_rows = 4;
/// Longest rows of A mla_head_gemv takes (V2's kv_lora_rank 512 and qk_nope_head_dim 128 fit).
inline constexpr int mla_head_gemv_max_k = 1024;

/// The operands of one strided-batched product, as gemm_runner::run_batched takes them (row-major):
/// for head h < batch, C_h[m][n] = A_h[m][k] x B_h, where A_h's rows are lda elements apart and
/// head h's A_h starts stride_a elements after head h - 1's (likewise B and C), and B_h is [k][n]
/// (b_rows_are_n false, rows ldb apart) or [n][k] (true: C = A B^T). A and B are the activation
/// dtype; C is fp32 (c_f32) or the activation dtype.
struct head_gemv_args {
  int batch = 0, m = 0, n = 0, k = 0;
  const void* a = nullptr;
  /// Or, for mla_head_gemv (not cuBLAS), A in fp32 at the same offsets, each value rounded to
  /// the activation dtype before use (the one-token GEMV's query, which the latent write rounds
  /// into `a` at the same time: mla_head_gemv_latent_write).
  const float* a_f32 = nullptr;
  int lda = 0;
  long long stride_a = 0;
  const void* b = nullptr;
  bool b_rows_are_n = false;
  int ldb = 0;
  long long stride_b = 0;
  void* c = nullptr;
  bool c_f32 = false;
  int ldc = 0;
  long long stride_c = 0;
};

/// Whether mla_head_gemv takes these operands: 1 to mla_head_gemv_max_rows rows, B's rows and head
/// blocks and its base on 16-byte boundaries (multiples of 8 elements), n a multiple of 8 for
/// [k][n] and k a multiple of 8 for [n][k], k at most mla_head_gemv_max_k (A's rows staged in
/// shared memory).
bool mla_head_gemv_supported(const head_gemv_args& g);

/// The product for every head in one launch (a programmatic dependent of the kernel before it);
/// cudaErrorInvalidValue where mla_head_gemv_supported is false.
int mla_head_gemv(act_dtype dt, const head_gemv_args& g, cudaStream_t s);

/// W_UK's product ([k][n] B) and mla_latent_write(la) in one launch: the latent rows by extra
/// blocks beside the product's, one a row. They touch different data (the product reads q_nope,
/// from g.a_f32 where the latent write rounds it into q; the latent write rotates q_pe), so the
/// results equal the two launches'. cudaErrorInvalidValue where mla_head_gemv_supported is
/// false, B is [n][k], or la.n exceeds g.batch.
int mla_head_gemv_latent_write(act_dtype dt, const head_gemv_args& g, const mla_latent_args& la, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
