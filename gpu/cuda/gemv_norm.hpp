#pragma once
/// One-token GEMVs that take over the residual add + RMSNorm (add_rmsnorm) between projections, so
/// a decode step at m = 1 runs no norm kernel. The projection that produces a residual delta (o,
/// down) adds it into the residual stream in its epilogue; the projection that reads the normed
/// residual (qkv, gate/up, lm_head) normalises it itself once per thread block, into shared
/// memory, after waiting for the previous kernel. Its sum of squares runs in add_rmsnorm's exact
/// order and its x is rounded as add_rmsnorm rounds it, so the outputs equal add_rmsnorm followed
/// by the GEMVs of gemv_kernel.hpp bit for bit. Plain C++ interface (no device code).
///
/// Opt-in (fused_norm_decode(), off by default): on the H200 (random Llama-3-8B, batch 1,
/// bench/results/h200-step-20261129e.md) it does not beat add_rmsnorm + the fused GEMVs. At its
/// best grid (3 sub-blocks, 4 gate/up rows) the simulated step is 4.395 vs 4.494 ms, but end to
/// end 219.05 vs 220.92 tok/s: the 64 norm launches go (-0.165 ms) and o/down get faster (-0.065)
/// while qkv and gate/up get slower (+0.14 and +0.08 ms at 6 sub-blocks): their normalisation sits
/// on the critical path after the dependency wait, where add_rmsnorm ran overlapped with the
/// previous kernel's tail under programmatic launch, and the joins between kernels did not shrink
/// with 64 fewer launches (whole step minus the sum of its classes: 0.326 vs 0.329 ms).
#include <cuda_runtime_api.h>

#include "gpu/cuda/kernels.hpp"

namespace actorserve::gpu::cuda {

/// The normed input of a GEMV: x = rmsnorm(residual[0 .. hidden)) * weight in the act dtype, the
/// values add_rmsnorm(dt, residual, nullptr, nullptr, weight, eps, nullptr, 1, hidden, x) writes.
struct norm_input {
  const float* residual = nullptr;  ///< fp32 [hidden]
  const float* weight = nullptr;    ///< fp32 norm weight [hidden]
  float eps = 1e-5f;
  int hidden = 0;                   ///< the GEMV's k
};

/// Whether the executor's one-token steps, without the folded norms, let the o and down
/// projections add into the residual (gemv_add_residual) and run the norm kernels without a delta
/// (the same logits). Process-wide; default off: not measured end to end yet. In the folded
/// step's class timings on the H200 these projections took 0.299 and 0.901 ms a step against the
/// plain GEMV's 0.309 and 0.956 (ACTORSERVE_RESIDUAL_GEMV=1 turns it on).
void set_residual_gemv_decode(bool on);
bool residual_gemv_decode();

/// The largest hidden size the normed GEMVs take (their x lives in shared memory).
inline constexpr int norm_gemv_max_hidden = 16384;

/// Whether the normed GEMVs run `in` against a weight matrix w: hidden a positive multiple of 8 up
/// to norm_gemv_max_hidden; the residual, the norm weight and w 16-byte aligned.
bool norm_gemv_supported(const norm_input& in, const void* w);

/// Whether the executor's one-token steps fold the norms into the GEMVs (when fused_decode() is
/// on too). Process-wide; default off (see above). For benchmarks and tests.
void set_fused_norm_decode(bool on);
bool fused_norm_decode();

/// Thread blocks per SM of the normed GEMVs, each looping over its share of the weight rows:
/// 0 (default) as many as fit at once (one wave, each block normalising x once), n > 0 at most
/// n, -1 one block per group of rows (as gemv_kernel.hpp's kernels). For benchmarks and tests.
void set_norm_gemv_blocks_per_sm(int blocks);

/// 128-thread sub-blocks per block of the normed GEMVs (1 to 6; default 3): the sub-blocks of a
/// block share one normalised x, each streaming its own groups of rows as a 128-thread block
/// would (fewer copies of x per SM, larger blocks). H200 whole step: 1: 5.563 ms, 2: 4.413,
/// 3: 4.395, 6: 4.590 (4 gate/up rows). For benchmarks and tests.
void set_norm_gemv_sub_blocks(int subs);

/// (These knobs start from ACTORSERVE_FUSED_NORM, ACTORSERVE_NORM_GEMV_BLOCKS and
/// ACTORSERVE_NORM_GEMV_SUBBLOCKS when set; gemv_norm_gate_up_silu's default rows per block from
/// ACTORSERVE_NORM_GATE_UP_ROWS. Two more knobs were measured on the H200 and removed: a build
/// held to 64 registers a thread, slower by 0.04-0.13 ms a step at 2, 3 and 6 sub-blocks, and an
/// sm_90 bulk L2 prefetch of the next weights before the dependency wait, slower by 0.14-0.39 ms
/// a step in every grid: bench/results/h200-step-20261129e.md.)

/// residual[r] = residual[r] + ((W x)[r] + bias[r]) for r < n, in add_rmsnorm's order of
/// operations (bias may be null); x: [k] of dt, as gemv_supported(x, 1, k, w) requires.
int gemv_add_residual(act_dtype dt, const void* x, int k, const void* w, int n, float* residual, const float* bias,
                      cudaStream_t s);

/// gemv_qkv_rope over the normed input (w: [(H + 2*KVH) * D, in.hidden]).
int gemv_norm_qkv_rope(act_dtype dt, const norm_input& in, const void* w, const rope_kv_args& a, cudaStream_t s);

/// gemv_gate_up_silu over the normed input (w: [2 * inter, in.hidden]); rows_per_block 2 or 4, or
/// 0 for the default (4).
int gemv_norm_gate_up_silu(act_dtype dt, const norm_input& in, const void* w, int inter, void* act,
                           int rows_per_block, cudaStream_t s);

/// y[r] = (W x)[r] for r < n over the normed input (the final norm and lm_head of one token).
int gemv_norm(act_dtype dt, const norm_input& in, const void* w, int n, float* y, cudaStream_t s);

}  // namespace actorserve::gpu::cuda
