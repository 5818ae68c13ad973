#pragma once
/// The CUDA executor's tuning choices, each a field with its default here: the defaults are what
/// ships. The executor takes them in cuda_executor_options::tuning; bench_cuda_attention and
/// bench_cuda_kernels set them from their flags for A/B runs (bench/README.md). Plain C++ (no
/// CUDA headers): included by the executor's public header.
#include <cstdint>

namespace actorserve::gpu {

/// The causal prefill kernels of the tensor-core attention backends (gpu/cuda/attention/).
enum class prefill_kernel : uint8_t {
  /// wgmma_tma_persistent where it is built and runs (bf16, head dim 128, a block size a TMA box
  /// covers, compute capability 9.x), else mma_sync.
  automatic,
  /// Hopper wgmma with FlashAttention-3's scheduling: a producer warpgroup fills a K/V ring by
  /// TMA, two consumer warpgroups take 64 rows each of a 128-row item, one persistent CTA per SM
  /// (bf16, head dim 128; other shapes, and a cache without TMA descriptors, run wgmma_cp_async).
  wgmma_tma_persistent,
  /// Hopper wgmma over 128-row items: two warpgroups sharing a 3-stage cp.async K/V ring.
  wgmma_cp_async,
  /// mma.sync m16n8k16 over 64-row items, 64-key tiles in 2 stages (any GPU the build targets).
  mma_sync,
};

/// The decode kernels of the flash-decoding backend (the vllm backend has one kernel: each warp
/// walks its own 16-token blocks).
enum class decode_kernel : uint8_t {
  /// 64-token K/V tiles brought in by TMA (tiles that are not whole 64-token boxes by cp.async);
  /// cp_async where the cache's TMA descriptors cannot be made.
  tma,
  /// 64-token K/V tiles copied by every thread with cp.async.
  cp_async,
};

/// Where the split-K pieces of a long decode are merged.
enum class split_merge : uint8_t {
  last_piece,       ///< by the CTA that finishes the split's last piece (separate_kernel without a device)
  separate_kernel,  ///< by a merge kernel launched after the decode kernel
};

/// Kernel choices of the attention backends.
struct attention_tuning {
  prefill_kernel prefill = prefill_kernel::automatic;
  decode_kernel decode = decode_kernel::tma;
  split_merge merge = split_merge::last_piece;
  /// Whether rope writes the queries of prefill tokens as 16-bit, pre-scaled values that the
  /// persistent wgmma prefill copies in (it converts fp32 q itself otherwise).
  bool prefill_q16 = true;
};

/// Which one-token GEMVs stream their weights through the bulk-copy engine into a shared-memory
/// ring (gemv_bulk.hpp; the register kernels of gemv_kernel.hpp otherwise), and that ring's grid.
struct bulk_gemv_tuning {
  bool plain = true;    ///< the plain GEMV at m = 1 with beta 0 (o, down, lm_head)
  bool qkv = true;      ///< the QKV + rope GEMV
  bool gate_up = true;  ///< the gate/up + SiLU GEMV
  /// 4 blocks per SM of 3 16-KiB stages: 196 KiB of shared memory an SM, so the next kernel's
  /// blocks are placed as this one's leave, evenly.
  int blocks_per_sm = 4;
  int stages = 3;       ///< 1 to 13
  int qkv_pairs = 2;    ///< rotary pairs per group of the QKV GEMV: 1 (2 rows) or 2 (4 rows)
  bool evict_first = true;  ///< the weights' L2 lines marked first to evict
};

/// Everything the CUDA executor lets a benchmark choose.
struct cuda_tuning {
  attention_tuning attention;
  bulk_gemv_tuning bulk;
  /// One-token steps fuse the element-wise kernel after the qkv (rope + KV write) and gate/up
  /// (SiLU-and-mul) projections into their GEMVs.
  bool fused_decode = true;
  /// Batched steps (cuBLAS) write gate/up in the activation dtype, as HF transformers and vLLM
  /// do for a bf16 model, instead of fp32 (half the bytes written and read).
  bool gate_up_16bit = true;
  /// Batched o and down projections add into the fp32 residual in cuBLAS's epilogue (beta 1)
  /// instead of writing a delta that the next add_rmsnorm adds (a projection with a bias keeps
  /// the delta).
  bool residual_gemm = true;
  /// In a step with prefill tokens that reads prefill_q16, rope writes fp32 q only for its decode
  /// tokens (the decode kernels read it; the prefill kernel reads the 16-bit copy).
  bool q32_decode_only = true;
  /// In such a step the QKV GEMM writes the activation dtype (rope reads half the bytes).
  bool qkv_16bit = false;
  /// FP8 weights past the FP8 GEMV's rows multiply on the tensor cores in FP8, the activations
  /// quantized per token (gemm_runner, fp8_gemm.hpp); false dequantizes the weight to the
  /// activation dtype for cuBLAS instead (bf16/fp16 activations, about 4x the bf16 GEMM's time),
  /// the path the CPU comparisons of weight loading and scales use.
  bool fp8_activations = true;
  /// A prefill-carrying step's last layer runs on every row past its K/V writes, not only on
  /// the sampled rows (the same logits; for comparisons).
  bool last_layer_all_rows = false;
};

}  // namespace actorserve::gpu
