#pragma once
/// The CUDA executor's tuning choices, each a field with its default here: the defaults are what
/// ships on Hopper, and cuda_tuning_for (below) replaces the choices a GPU cannot run with the
/// portable kernels. The executor takes them in cuda_executor_options::tuning; bench_cuda_attention
/// and bench_cuda_kernels set them from their flags for A/B runs (bench/README.md). Plain C++ (no
/// CUDA headers): included by the executor's public header and by the CPU tests.
#include <cstdint>
#include <string>

#include "config/engine_config.hpp"
#include "gpu/cuda/moe/moe_tile.hpp"

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
  /// A layer with cascade prefix pieces runs them on a second stream of the flash-decoding
  /// backend beside the decode pieces (forked and joined by events; a decode graph captures the
  /// two branches), one prefix CTA an SM. Off (the default): the prefix pieces run after the
  /// decode pieces on the step's stream, tiled for the decode kernel's resident CTAs, which
  /// measured faster (docs/attention.md, Decisions).
  bool cascade_overlap = false;
  /// The latent (MLA) decode kernel merges a row's split pieces within a thread-block cluster,
  /// through distributed shared memory (compute capability 9.x); off: through partial buffers in
  /// global memory, by the CTA of the last piece (mla_kernels.hpp, latent_attention_args).
  bool latent_cluster_merge = true;
};

/// Which one-token GEMVs stream their weights through the bulk-copy engine into a shared-memory
/// ring (gemv_bulk.hpp; the register kernels of gemv_kernel.hpp otherwise), and that ring's grid.
struct bulk_gemv_tuning {
  bool plain = true;    ///< the plain GEMV at m = 1 with beta 0 (o, down, lm_head)
  bool qkv = true;      ///< the QKV + rope GEMV
  bool gate_up = true;  ///< the gate/up + SiLU GEMV
  /// The FP8 GEMVs at m = 1 (fp8_gemv_bulk.hpp): gemm_runner's, and with qkv / gate_up the fused
  /// FP8 ones (fp8_gemv_fused.hpp).
  bool fp8 = true;
  /// 4 blocks per SM of 3 16-KiB stages: 196 KiB of shared memory an SM, so the next kernel's
  /// blocks are placed as this one's leave, evenly.
  int blocks_per_sm = 4;
  int stages = 3;       ///< 1 to 13
  int qkv_pairs = 2;    ///< rotary pairs per group of the 16-bit QKV GEMV: 1 (2 rows) or 2 (4 rows)
  /// Weight rows per group of the FP8 GEMVs, plain and fused: 4 or 8 (8: half the block
  /// reductions and activation unpacks per weight byte; the fused ones then take 4 rotary pairs
  /// or 4 gate/up pairs a group, 4: 2; the same outputs either way).
  int fp8_rows = 8;
  /// With fp8: FP8 GEMVs of fp8_mma_min_rows to 8 rows with per-row scales (the one-token ones
  /// plain and fused where it is 1) multiply on the tensor cores (fp8_gemv_mma.hpp: groups of 16
  /// weight rows as one MMA tile's M, the tokens as its N) in place of the register GEMV or the
  /// FP8 GEMM; 0: never. From a few rows the CUDA-core GEMVs are bound by their instructions;
  /// at one row the ring above streams faster.
  int fp8_mma_min_rows = 3;
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
  /// The step's kernels launch as programmatic dependents of the kernel before them
  /// (set_programmatic_launch; compute capability 9.0 on).
  bool programmatic_launch = true;
  /// A mixture-of-experts chunk of at least this many routed rows an expert on average (0: every
  /// batched chunk) runs its experts' products as one cuBLAS GEMM per expert instead of the
  /// grouped GEMM, outside CUDA graph capture (moe_ffn; docs/moe.md). Default
  /// (moe_cublas_rows_by_expert_size): cuda::moe_cublas_min_rows_for the model's experts.
  int moe_cublas_min_rows_per_expert = cuda::moe_cublas_rows_by_expert_size;
};

/// What a GPU offers the kernels: its compute capability and the target of the kernel code the
/// driver loaded for it (gpu/cuda/device_info.hpp reads both at start).
struct gpu_target {
  int sm_major = 9, sm_minor = 0;
  /// __CUDA_ARCH__ / 10 of the loaded code: 90 for the sm_90a machine code, 80 where the driver
  /// compiled compute_80 PTX for the GPU.
  int code_arch = 90;
  /// That code is sm_90a's (the wgmma and setmaxnreg kernels are built only there).
  bool code_sm90a = true;
};

/// The oldest compute capability the kernels run on (cp.async, mma.sync bf16, ldmatrix: Ampere).
inline constexpr int kMinSmMajor = 8;

/// The Hopper (compute capability 9.x) kernels' requirements: wgmma needs sm_90a code on a 9.x
/// GPU; TMA, the bulk-copy engine and programmatic dependent launch need sm_90 code on a GPU of
/// 9.0 on. Only 9.x takes TMA and the bulk-copy GEMVs (their shared-memory rings are sized for
/// Hopper's 228 KiB an SM); newer GPUs run the portable kernels from the compute_90 PTX, with PDL.
inline bool runs_wgmma(const gpu_target& t) { return t.sm_major == 9 && t.code_arch >= 90 && t.code_sm90a; }
inline bool runs_tma(const gpu_target& t) { return t.sm_major == 9 && t.code_arch >= 90; }
inline bool runs_pdl(const gpu_target& t) { return t.sm_major >= 9 && t.code_arch >= 90; }

/// `requested` with every choice `t` cannot run replaced by the portable one, and every Hopper
/// choice replaced under kernel_choice::portable (--kernels portable): the cp.async decode
/// kernel, the mma.sync prefill, the register GEMVs instead of the bulk-copy ones, plain
/// launches instead of PDL. The MoE kernels, cuBLAS and the element-wise kernels run everywhere.
inline cuda_tuning cuda_tuning_for(cuda_tuning requested, const gpu_target& t, kernel_choice kernels) {
  const bool hopper = kernels == kernel_choice::automatic;
  cuda_tuning out = requested;
  if (!hopper || !runs_wgmma(t)) out.attention.prefill = prefill_kernel::mma_sync;
  if (!hopper || !runs_tma(t)) {
    out.attention.decode = decode_kernel::cp_async;
    out.attention.latent_cluster_merge = false;
    out.bulk.plain = out.bulk.qkv = out.bulk.gate_up = out.bulk.fp8 = false;
  }
  if (!hopper || !runs_pdl(t)) out.programmatic_launch = false;
  return out;
}

/// The kernel choices of `t` in a line for the start-up log.
inline std::string describe_kernels(const cuda_tuning& t) {
  std::string s = "prefill ";
  switch (t.attention.prefill) {
    case prefill_kernel::automatic: s += "wgmma (TMA persistent where it applies)"; break;
    case prefill_kernel::wgmma_tma_persistent: s += "wgmma TMA persistent"; break;
    case prefill_kernel::wgmma_cp_async: s += "wgmma cp.async"; break;
    case prefill_kernel::mma_sync: s += "mma.sync"; break;
  }
  s += t.attention.decode == decode_kernel::tma ? ", flash-decoding TMA" : ", flash-decoding cp.async";
  s += t.attention.latent_cluster_merge ? ", latent merge in clusters" : ", latent merge by the last piece";
  const bool bulk = t.bulk.plain || t.bulk.qkv || t.bulk.gate_up || t.bulk.fp8;
  s += bulk ? ", one-token GEMVs bulk-copy" : ", one-token GEMVs register";
  if (t.bulk.fp8 && t.bulk.fp8_mma_min_rows > 0)
    s += ", FP8 GEMVs on tensor cores from " + std::to_string(t.bulk.fp8_mma_min_rows) + " rows";
  s += t.programmatic_launch ? ", programmatic dependent launch" : ", plain launches";
  return s;
}

}  // namespace actorserve::gpu
