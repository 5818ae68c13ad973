#include "gpu/parallel/host_collective.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorserve::gpu {

host_collective::host_collective(int size) : size_(size), parts_(static_cast<size_t>(std::max(size, 1))) {
  if (size < 1) throw std::invalid_argument(fmt::format("host_collective: {} ranks", size));
}

void host_collective::check_rank(int rank) const {
  if (rank < 0 || rank >= size_)
    throw std::invalid_argument(fmt::format("host_collective: rank {} outside a group of {}", rank, size_));
}

void host_collective::arrive_and_wait(std::unique_lock<std::mutex>& lock) {
  if (aborted_) throw collective_aborted();
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
  // NOTE: a barrier that opened before the abort counts as passed; the next collective throws.
  if (generation_ == gen) throw collective_aborted();
}

std::vector<host_collective::contribution> host_collective::exchange(int rank, const contribution& mine) {
  std::unique_lock lock(mu_);
  parts_[static_cast<size_t>(rank)] = mine;
  arrive_and_wait(lock);
  // Read before this rank arrives at the closing barrier: no rank writes parts_ until it opens.
  return parts_;
}

void host_collective::barrier() {
  std::unique_lock lock(mu_);
  arrive_and_wait(lock);
}

void host_collective::all_reduce_sum(int rank, float* buf, size_t n) {
  check_rank(rank);
  if (size_ == 1) {
    if (aborted()) throw collective_aborted();
    return;
  }
  contribution mine;
  mine.buf = buf;
  mine.n = n;
  const auto parts = exchange(rank, mine);
  for (const auto& p : parts)
    if (p.n != n) {
      abort();
      throw std::logic_error(fmt::format("all_reduce_sum: ranks bring {} and {} floats", n, p.n));
    }
  // Each rank sums its own range of elements over every buffer, in rank order, and writes the sum
  // into every buffer: each element is read and written by one thread only.
  const size_t first = static_cast<size_t>(rank) * n / static_cast<size_t>(size_);
  const size_t last = static_cast<size_t>(rank + 1) * n / static_cast<size_t>(size_);
  for (size_t i = first; i < last; ++i) {
    float sum = parts[0].buf[i];
    for (size_t r = 1; r < parts.size(); ++r) sum += parts[r].buf[i];
    for (const auto& p : parts) p.buf[i] = sum;
  }
  barrier();
}

void host_collective::gather_columns(int rank, const float* part, shard_slice slice, size_t rows, size_t width,
                                     float* out) {
  check_rank(rank);
  contribution mine;
  mine.part = part;
  mine.slice = slice;
  mine.n = rows;
  const auto parts = size_ == 1 ? std::vector<contribution>{mine} : exchange(rank, mine);
  if (size_ == 1 && aborted()) throw collective_aborted();
  for (const auto& p : parts)
    if (p.n != rows || p.slice.begin < 0 || static_cast<size_t>(p.slice.end) > width) {
      abort();
      throw std::logic_error(fmt::format("gather_columns: a rank brings {} rows of columns [{}, {}) for {} rows of {}",
                                         p.n, p.slice.begin, p.slice.end, rows, width));
    }
  for (const auto& p : parts) {
    const size_t w = static_cast<size_t>(p.slice.size()), begin = static_cast<size_t>(p.slice.begin);
    for (size_t r = 0; r < rows; ++r) std::copy(p.part + r * w, p.part + (r + 1) * w, out + r * width + begin);
  }
  if (size_ > 1) barrier();
}

void host_collective::abort() {
  {
    std::lock_guard lock(mu_);
    aborted_ = true;
  }
  cv_.notify_all();
}

bool host_collective::aborted() const {
  std::lock_guard lock(mu_);
  return aborted_;
}

}  // namespace actorserve::gpu
