#pragma once
/// The CUDA executor: weights in device memory (bf16/fp16), cuBLAS GEMMs with fp32 accumulation,
/// the kernels of ops/, linear/, attention/ and sampling/, a paged KV pool sized from
/// --gpu-memory-utilization or --kv-cache-memory-bytes, steps staged in double-buffered pinned
/// memory and completed through cudaLaunchHostFunc on the executor's own thread, decode steps
/// replayed from CUDA graphs unless enforce_eager.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/engine_config.hpp"
#include "config/error.hpp"
#include "gpu/cuda/tuning.hpp"
#include "gpu/executor.hpp"
#include "gpu/model/dummy_weights.hpp"

namespace actorserve::gpu {

namespace cuda {
class device_collective;
}

struct cuda_executor_options {
  dtype_choice dtype = dtype_choice::auto_detect;   ///< auto: bf16 unless the checkpoint is fp16
  int32_t block_size = 16;                          ///< tokens per KV block
  kv_cache_layout kv_layout = kv_cache_layout::vllm;  ///< attention backend (--paged-kv-cache-type)
  std::optional<int64_t> num_blocks_override;       ///< --num-gpu-blocks-override
  double gpu_memory_utilization = 0.9;              ///< share of device memory this process may use
  /// --kv-cache-memory-bytes: the pool is this many bytes (all layers' K and V) whatever else
  /// uses the device, instead of the utilization's share; num_blocks_override wins over it.
  std::optional<int64_t> kv_cache_memory_bytes;
  int32_t max_num_batched_tokens = 2048;            ///< tokens per step at most
  int32_t max_num_seqs = 256;                       ///< sequences per step at most
  int32_t max_model_len = 0;                        ///< 0: max_position_embeddings of the model
  bool enforce_eager = false;                       ///< no CUDA graphs
  /// !--disable-cascade-attn: decodes sharing prefix blocks read the prefix once per group
  /// where gpu::plan_cascade finds it reads fewer bytes (flash-decoding backend only).
  bool cascade_attention = true;
  bool quantize_fp8 = false;                        ///< --quantization fp8: dense linear weights as E4M3
  /// --kv-cache-dtype fp8: K/V stored as E4M3 codes with the checkpoint's per-layer scales (one
  /// byte an element: twice the blocks in the same memory); flash-decoding layout only.
  bool kv_cache_fp8 = false;
  int device = 0;                                   ///< CUDA device ordinal
  bool keep_logits = false;                         ///< tests: keep each step's sampled-row logits
  /// --profile-steps: GPU and host-enqueue time per kernel class of the eager steps, printed to
  /// stderr when the executor stops (step_profile.hpp).
  bool profile_steps = false;
  cuda_tuning tuning;                               ///< kernel and path choices (tuning.hpp)
  /// --kernels: the choices of `tuning` the GPU cannot run are replaced by portable ones at
  /// start (cuda_tuning_for), and under portable every Hopper choice is.
  kernel_choice kernels = kernel_choice::automatic;
  weight_source weights;                            ///< --load-format dummy: filled on the device
  /// Tensor parallelism (--tensor-parallel-size): this executor holds shard
  /// `tensor_parallel_rank` of `tensor_parallel_size` (shard_plan) and exchanges partial sums and
  /// logits through `collective`, whose rank and size are these. One shard: the whole model, no
  /// collective. The shards of a group start together (each start runs a step through the
  /// collective to plan its memory).
  int tensor_parallel_rank = 0;
  int tensor_parallel_size = 1;
  std::shared_ptr<cuda::device_collective> collective;
};

/// Opens `model_dir`, uploads the weights, plans memory and starts the completion thread.
result<std::unique_ptr<executor>> make_cuda_executor(const std::string& model_dir,
                                                    const cuda_executor_options& options);

/// Implemented by the CUDA executor (reach it with dynamic_cast) for tests and benchmarks.
class cuda_executor_probe {
 public:
  virtual ~cuda_executor_probe() = default;
  /// Logits (before penalties) of the sampled rows of the last completed step, batch order;
  /// empty unless options.keep_logits.
  virtual std::vector<std::vector<float>> last_logits() const = 0;
  /// Decode steps replayed from a CUDA graph so far.
  virtual int64_t graph_replays() const = 0;
  /// Steps whose last layer ran past its K/V writes on the sampled rows only.
  virtual int64_t sampled_only_steps() const = 0;
  /// Mixture-of-experts chunks whose experts ran through the per-expert cuBLAS path so far.
  virtual int64_t moe_cublas_chunks() const = 0;
  /// Layers' one-token QKV projections that ran as a fused QKV + rope + KV-write GEMV so far
  /// (16-bit or FP8 weights; counted when enqueued, also while capturing a graph).
  virtual int64_t fused_qkv_gemvs() const = 0;
  /// Likewise the one-token gate/up projections that ran fused with SiLU-and-mul.
  virtual int64_t fused_gate_up_gemvs() const = 0;
};

}  // namespace actorserve::gpu
