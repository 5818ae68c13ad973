#pragma once
/// A small fork-join pool for the CPU executor: `parallel_for` splits an index range over the
/// pool's threads plus the calling thread and returns when every range is done.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace actorserve::gpu {

class thread_pool {
 public:
  using range_fn = std::function<void(size_t begin, size_t end)>;

  /// `num_threads` counts the caller too (1: everything runs inline).
  explicit thread_pool(int num_threads);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  /// Calls fn(begin, end) over [0, n) in chunks of `grain` items; one caller at a time.
  void parallel_for(size_t n, const range_fn& fn, size_t grain = 1);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;       ///< bumped per job; workers wait for a new one
  int busy_ = 0;                  ///< workers still inside the current job
  bool stop_ = false;
  // The current job (read by workers after they see a new generation).
  const range_fn* fn_ = nullptr;
  size_t n_ = 0, grain_ = 1;
  std::atomic<size_t> next_{0};
};

}  // namespace actorserve::gpu
