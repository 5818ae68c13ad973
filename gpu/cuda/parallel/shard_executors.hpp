#pragma once
/// Starts the CUDA executors of one tensor-parallel group (--tensor-parallel-size N): shard r on
/// its device with its rank's collective. They start together, one thread each: each loads its
/// weights and allocates the pool of its memory-planning step, waits until every shard has (an
/// allocation's device-wide synchronisation must not meet another shard's waiting collective on
/// a shared GPU), then plans its memory with a worst-case step through the collective, which
/// waits for all N shards.
#include <memory>
#include <string>
#include <vector>

#include "config/error.hpp"
#include "gpu/cuda/cuda_executor.hpp"
#include "gpu/executor.hpp"

namespace actorserve::gpu::cuda {

class device_collective;

/// Shard r of `collectives.size()` on `devices[r]` with `collectives[r]` (rank r of the group),
/// each with `base` otherwise; the executors in rank order. A shard that fails to start aborts
/// the collectives (the others, waiting for it, then fail too) and its error is returned, the
/// first in time.
result<std::vector<std::unique_ptr<executor>>> start_shard_executors(
    const std::string& model_dir, const cuda_executor_options& base, const std::vector<int>& devices,
    const std::vector<std::shared_ptr<device_collective>>& collectives);

}  // namespace actorserve::gpu::cuda
