#pragma once
/// Tensor parallelism's lock-step group (--tensor-parallel-size N): one `executor` over N shard
/// executors, each holding its slice of the model (shard_plan) on its own device (CUDA) or thread
/// pool (CPU) and running on its own thread. Every step goes to every shard, which compute it
/// together, exchanging partial sums through their collective (gpu/parallel/host_collective.hpp
/// on the CPU, gpu/cuda/parallel/device_collective.hpp on GPUs); the step is done when all N
/// shards are, and its result is shard 0's (every shard samples the same tokens from the same
/// gathered logits, so each can resolve `previous_token` itself).
///
/// A failed shard step fails the group's step: the group aborts the collective at once (the
/// other shards, waiting for the failed one's partial sums, return with an error instead of
/// hanging), reports the first shard's error and refuses later steps; the engine's supervisor then
/// makes a new group (executor_factory) and the scheduler recomputes, as after any failed step.
#include <functional>
#include <memory>
#include <vector>

#include "gpu/executor.hpp"

namespace actorserve::gpu {

class executor_group final : public executor {
 public:
  /// `shards` in rank order (at least one); `abort_collective` wakes shards blocked in a
  /// collective (called once, on the first failure, and before the shards are destroyed).
  executor_group(std::vector<std::unique_ptr<executor>> shards, std::function<void()> abort_collective);
  ~executor_group() override;

  /// Shard 0's, with num_blocks the smallest of the shards' and host_kv_cache_bytes their sum.
  const executor_info& info() const override { return info_; }
  void submit(step_batch batch, done_fn done) override;
  bool supports_logit_bias() const override;
  bool supports_token_masks() const override;

  int64_t size() const { return static_cast<int64_t>(shards_.size()); }
  executor& shard(int64_t rank) { return *shards_[static_cast<size_t>(rank)]; }

 private:
  struct impl;
  std::vector<std::unique_ptr<executor>> shards_;
  std::unique_ptr<impl> impl_;
  executor_info info_;
};

}  // namespace actorserve::gpu
