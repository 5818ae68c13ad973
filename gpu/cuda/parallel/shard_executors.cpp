#include "gpu/cuda/parallel/shard_executors.hpp"

#include <fmt/format.h>

#include <mutex>
#include <optional>
#include <thread>

#include "gpu/cuda/parallel/device_collective.hpp"

namespace actorserve::gpu::cuda {

result<std::vector<std::unique_ptr<executor>>> start_shard_executors(
    const std::string& model_dir, const cuda_executor_options& base, const std::vector<int>& devices,
    const std::vector<std::shared_ptr<device_collective>>& collectives) {
  const size_t n = collectives.size();
  if (n == 0 || devices.size() != n)
    return make_error(error_code::invalid_argument,
                      fmt::format("--tensor-parallel-size: {} collectives for {} devices", n, devices.size()));
  std::vector<std::unique_ptr<executor>> shards(n);
  std::mutex mu;
  std::optional<error> first_error;
  std::vector<std::thread> starts;
  starts.reserve(n);
  for (size_t r = 0; r < n; ++r)
    starts.emplace_back([&, r] {
      cuda_executor_options o = base;
      o.device = devices[r];
      o.tensor_parallel_rank = static_cast<int>(r);
      o.tensor_parallel_size = static_cast<int>(n);
      o.collective = collectives[r];
      auto ex = make_cuda_executor(model_dir, o);
      std::lock_guard lock(mu);
      if (ex) {
        shards[r] = std::move(ex).value();
        return;
      }
      if (first_error) return;  // a shard that waited for the failed one
      first_error = make_error(ex.err().code, fmt::format("shard {} on CUDA device {}: {}", r, devices[r],
                                                          ex.err().message));
      for (const auto& c : collectives) c->abort();
    });
  for (std::thread& t : starts) t.join();
  if (first_error) return *first_error;
  return shards;
}

}  // namespace actorserve::gpu::cuda
