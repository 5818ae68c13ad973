#pragma once
/// The fp32 CPU executor: the reference implementation of `executor` over a paged KV cache.
/// Steps run on the executor's own worker thread, in submission order; matmuls and attention
/// are spread over a small thread pool.
///
/// Under tensor parallelism (--tensor-parallel-size N) one cpu_executor is one shard (rank r of
/// N, cpu::model_shard): it holds its slice of the weights and its own KV cache, and computes each
/// step with the other shards through their host_collective. Every shard gets the same steps (an
/// executor_group drives them in lock-step) and samples the same tokens from the same gathered
/// logits, so each resolves gpu::previous_token from its own last result.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/error.hpp"
#include "gpu/attention/cascade_plan.hpp"
#include "gpu/cpu/model_shard.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "gpu/model/dummy_weights.hpp"
#include "gpu/executor.hpp"
#include "gpu/executor_group.hpp"
#include "gpu/parallel/host_collective.hpp"

namespace actorserve::gpu {

struct cpu_executor_options {
  int32_t block_size = 16;                  ///< tokens per KV block
  int32_t num_blocks = 0;                   ///< KV blocks; 0: as many as the byte budget holds
  int64_t kv_cache_bytes = int64_t{1} << 30;  ///< --cpu-kv-cache-space: the budget of all shards together
  /// --kv-cache-memory-bytes: each shard's budget instead (fp32 K and V of every layer, as
  /// vLLM's per-GPU bytes); the pool is as many blocks as the largest shard's fit in it.
  std::optional<int64_t> kv_cache_memory_bytes;
  int32_t threads = 0;                      ///< compute threads (over all shards); 0: all cores
  int32_t max_model_len = 0;                ///< 0: config.json's max_position_embeddings
  /// How latent attention (DeepSeek-V2) computes: automatic picks, per sequence of each step, the
  /// form with fewer multiply-adds (docs/mla.md); the others force one form (tests, A/B runs).
  cpu::mla_form mla_form = cpu::mla_form::automatic;
  /// Tensor-parallel shards the model is split over (model_shard, one executor each); 1: no split.
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
  /// Loads the model directory and allocates the cache of a whole-model executor
  /// (opts.tensor_parallel_size 1; make_cpu_executor makes shards); errors name the file, tensor
  /// or option.
  static result<std::unique_ptr<cpu_executor>> create(const std::string& model_dir, const cpu_executor_options& opts);
  /// The opts.tensor_parallel_size shards of the model in rank order, joined by `collective` (of
  /// as many ranks; null at size 1). The model directory is read once; the KV budget gives the
  /// number of blocks over all shards' bytes, and every shard has that many; opts.threads is
  /// split over the shards (at least one each).
  static result<std::vector<std::unique_ptr<cpu_executor>>> create_shards(
      const std::string& model_dir, const cpu_executor_options& opts, std::shared_ptr<host_collective> collective);
  ~cpu_executor() override;

  const executor_info& info() const override { return info_; }
  void submit(step_batch batch, done_fn done) override;
  bool supports_logit_bias() const override { return true; }
  bool supports_token_masks() const override { return true; }

  /// Runs one step on the calling thread (tests, tools). Not to be mixed with concurrent submits
  /// whose order matters; a shard of several computes it with the others, so every shard must
  /// run the same steps (an executor_group submits them). When `last_logits` is set it receives,
  /// per sequence of the batch, the raw logits at its last new token (before sampling).
  step_result run_step_sync(const step_batch& batch, std::vector<std::vector<float>>* last_logits = nullptr);
  const model_config& config() const { return model_->config(); }
  /// Tests: from now on every step keeps, per sequence of its batch, the raw logits at its last
  /// new token (last_logits), as run_step_sync's `last_logits` does. Set on every shard of a
  /// group alike: the shards gather the logits of the same rows.
  void keep_last_logits(bool on) { keep_logits_ = on; }
  /// The logits the last step kept (keep_last_logits).
  std::vector<std::vector<float>> last_logits() const;

 private:
  struct loaded_model;
  cpu_executor() = default;
  /// Shard `rank` of `m`'s plan, computing over a pool of `threads`.
  static result<std::unique_ptr<cpu_executor>> create_shard(const loaded_model& m, int64_t rank,
                                                            std::shared_ptr<host_collective> collective,
                                                            const cpu_executor_options& opts, int threads);
  status validate(const step_batch& batch) const;
  /// The step's cascade groups (none when cascade is off or the model cannot take it).
  cascade_plan plan_cascade_step(std::span<const cpu::forward_seq> seqs) const;
  void worker_loop();

  executor_info info_;
  std::unique_ptr<cpu::model_shard> model_;
  std::unique_ptr<thread_pool> pool_;
  /// Whether steps are planned for cascade attention, and what its byte rule weighs.
  bool cascade_ = false;
  cascade_costs cascade_costs_;
  mutable std::mutex compute_mu_;           ///< one step computes at a time
  std::vector<float> logits_;               ///< scratch, guarded by compute_mu_
  /// Tokens sampled by the last step, by sequence (resolves gpu::previous_token); compute_mu_.
  std::unordered_map<uint64_t, int32_t> last_sampled_;
  std::vector<int32_t> resolved_;           ///< scratch: one step's new tokens, placeholders resolved
  std::chrono::steady_clock::time_point last_end_{};  ///< end of the last step (idle accounting)
  bool has_last_end_ = false;
  std::atomic<bool> keep_logits_{false};
  std::vector<std::vector<float>> kept_logits_;   ///< keep_last_logits; compute_mu_

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

/// Wraps shard `rank` of a group before the group is made (tests: a fault in one shard).
using shard_wrapper = std::function<std::unique_ptr<executor>(int64_t rank, std::unique_ptr<executor> shard)>;

/// The shards of opts.tensor_parallel_size (create_shards), each passed through `wrap` when set,
/// as an executor_group whose abort hook aborts their host_collective; a group of one over a size
/// of 1.
result<std::unique_ptr<executor_group>> make_cpu_executor_group(const std::string& model_dir,
                                                               const cpu_executor_options& opts,
                                                               const shard_wrapper& wrap = {});

/// Creates the CPU executor for `model_dir` (the factory the engine uses): a whole-model
/// cpu_executor, or over several shards their executor_group.
result<std::unique_ptr<executor>> make_cpu_executor(const std::string& model_dir, const cpu_executor_options& opts);

}  // namespace actorserve::gpu
