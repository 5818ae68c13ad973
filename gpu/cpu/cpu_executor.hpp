#pragma once
/// The fp32 CPU executor: the reference implementation of `executor` over a paged KV cache.
/// Steps run on the executor's own worker thread, in submission order; matmuls and attention
/// are spread over a small thread pool.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/error.hpp"
#include "gpu/attention/cascade_plan.hpp"
#include "gpu/cpu/tensor_parallel_model.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "gpu/model/dummy_weights.hpp"
#include "gpu/executor.hpp"

namespace actorserve::gpu {

struct cpu_executor_options {
  int32_t block_size = 16;                  ///< tokens per KV block
  int32_t num_blocks = 0;                   ///< KV blocks; 0: as many as kv_cache_bytes holds
  int64_t kv_cache_bytes = int64_t{1} << 30;
  int32_t threads = 0;                      ///< compute threads; 0: all cores
  int32_t max_model_len = 0;                ///< 0: config.json's max_position_embeddings
  /// How latent attention (DeepSeek-V2) computes: automatic picks, per sequence of each step, the
  /// form with fewer multiply-adds (docs/mla.md); the others force one form (tests, A/B runs).
  cpu::mla_form mla_form = cpu::mla_form::automatic;
  /// Tensor-parallel shards the model is split over (tensor_parallel_model); 1: no split.
  int32_t tensor_parallel_size = 1;
  /// --enable-expert-parallel: the shards hold whole routed experts instead of a slice of each
  /// (shard_plan, moe_parallelism::expert); a mixture-of-experts model only.
  bool expert_parallel = false;
  /// --quantization fp8: a float checkpoint's linear weights are rounded to FP8 E4M3 at load, one
  /// scale per output channel (a checkpoint that is FP8 already loads as it is).
  bool quantize_weights_fp8 = false;
  /// --kv-cache-dtype fp8: K/V are stored rounded to E4M3 with the checkpoint's per-layer
  /// self_attn.k_scale / v_scale, else 1.0 (docs/fp8.md).
  bool kv_cache_fp8 = false;
  /// Cascade attention: decodes sharing prefix blocks attend to the prefix in one pass per group
  /// where gpu::plan_cascade finds it reads fewer bytes; --disable-cascade-attn turns it off.
  bool cascade_attention = true;
  weight_source weights;                    ///< --load-format dummy: generated, not read
};

class cpu_executor final : public executor {
 public:
  /// Loads the model directory and allocates the cache; errors name the file, tensor or option.
  static result<std::unique_ptr<cpu_executor>> create(const std::string& model_dir, const cpu_executor_options& opts);
  ~cpu_executor() override;

  const executor_info& info() const override { return info_; }
  void submit(step_batch batch, done_fn done) override;
  bool supports_logit_bias() const override { return true; }
  bool supports_token_masks() const override { return true; }

  /// Runs one step on the calling thread (tests, tools). Not to be mixed with concurrent submits
  /// whose order matters. When `last_logits` is set it receives, per sequence of the batch, the
  /// raw logits at its last new token (before sampling).
  step_result run_step_sync(const step_batch& batch, std::vector<std::vector<float>>* last_logits = nullptr);
  const model_config& config() const { return model_->config(); }

 private:
  cpu_executor() = default;
  status validate(const step_batch& batch) const;
  /// The step's cascade groups (none when cascade is off or the model cannot take it).
  cascade_plan plan_cascade_step(std::span<const cpu::forward_seq> seqs) const;
  void worker_loop();

  executor_info info_;
  std::unique_ptr<cpu::tensor_parallel_model> model_;
  std::unique_ptr<thread_pool> pool_;
  /// Whether steps are planned for cascade attention, and what its byte rule weighs.
  bool cascade_ = false;
  cascade_costs cascade_costs_;
  std::mutex compute_mu_;                   ///< one step computes at a time
  std::vector<float> logits_;               ///< scratch, guarded by compute_mu_
  /// Tokens sampled by the last step, by sequence (resolves gpu::previous_token); compute_mu_.
  std::unordered_map<uint64_t, int32_t> last_sampled_;
  std::vector<int32_t> resolved_;           ///< scratch: one step's new tokens, placeholders resolved
  std::chrono::steady_clock::time_point last_end_{};  ///< end of the last step (idle accounting)
  bool has_last_end_ = false;

  struct queued_step {
    step_batch batch;
    done_fn done;
  };
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<queued_step> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

/// Creates a CPU executor for `model_dir` (the factory the engine uses).
result<std::unique_ptr<executor>> make_cpu_executor(const std::string& model_dir, const cpu_executor_options& opts);

}  // namespace actorserve::gpu
