#include "gpu/cuda/parallel/shard_executors.hpp"

#include <fmt/format.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "gpu/cuda/cuda_executor_impl.hpp"
#include "gpu/cuda/parallel/device_collective.hpp"

namespace actorserve::gpu::cuda {
namespace {

/// Holds every shard's start before its first collective until all have loaded their weights
/// and allocated the pool of their memory-planning step, or one has failed. NOTE: a load frees
/// its staging memory (cudaFree waits for the whole device), so on a GPU that several shards
/// share a load beside another shard's waiting collective kernel would wait for that kernel,
/// which waits for the loading shard.
class start_gate {
 public:
  explicit start_gate(size_t n) : n_(n) {}
  /// True once all have arrived; false as soon as one has failed.
  bool arrive_and_wait() {
    std::unique_lock lock(mu_);
    ++arrived_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return failed_ || arrived_ == n_; });
    return !failed_;
  }
  void fail() {
    std::lock_guard lock(mu_);
    failed_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t n_, arrived_ = 0;
  bool failed_ = false;
};

}  // namespace

result<std::vector<std::unique_ptr<executor>>> start_shard_executors(
    const std::string& model_dir, const cuda_executor_options& base, const std::vector<int>& devices,
    const std::vector<std::shared_ptr<device_collective>>& collectives) {
  const size_t n = collectives.size();
  if (n == 0 || devices.size() != n)
    return make_error(error_code::invalid_argument,
                      fmt::format("--tensor-parallel-size: {} collectives for {} devices", n, devices.size()));
  std::vector<std::unique_ptr<executor>> shards(n);
  start_gate loaded(n);
  std::mutex mu;
  std::optional<error> first_error;
  // The first failure (in time) is the cause: it opens the gate and aborts the collectives, so
  // the shards waiting for the failed one return too.
  const auto fail = [&](size_t r, const error& e) {
    {
      std::lock_guard lock(mu);
      if (first_error) return;
      first_error = make_error(e.code, fmt::format("shard {} on CUDA device {}: {}", r, devices[r], e.message));
    }
    loaded.fail();
    for (const auto& c : collectives) c->abort();
  };
  std::vector<std::thread> starts;
  starts.reserve(n);
  for (size_t r = 0; r < n; ++r)
    starts.emplace_back([&, r] {
      cuda_executor_options o = base;
      o.device = devices[r];
      o.tensor_parallel_rank = static_cast<int>(r);
      o.tensor_parallel_size = static_cast<int>(n);
      o.collective = collectives[r];
      auto ex = std::make_unique<cuda_executor>();
      if (status st = ex->load(model_dir, o); !st) return fail(r, st.err());
      // A shard stopped at the gate (another failed) adds nothing: fail() keeps the first error.
      if (status st = ex->plan_memory([&] { return loaded.arrive_and_wait(); }); !st) return fail(r, st.err());
      shards[r] = std::move(ex);
    });
  for (std::thread& t : starts) t.join();
  if (first_error) return *first_error;
  return shards;
}

}  // namespace actorserve::gpu::cuda
