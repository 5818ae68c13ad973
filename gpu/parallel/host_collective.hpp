#pragma once
/// The collectives of tensor-parallel shards that are threads of one process (the CPU executor's
/// shards): what NCCL carries between GPUs, done in memory. Every rank calls each collective, with
/// the same sizes, in the same order; a call returns once every rank's part is in every rank's
/// output. Waiting is on a condition variable (no spinning), and a barrier generation counter
/// keeps a rank that enters the next collective early from disturbing the ranks still leaving the
/// previous one.
///
/// abort() (any thread) ends the group: every rank waiting in a collective, and every later call,
/// throws collective_aborted, so shards whose partner failed return instead of hanging.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "gpu/model/shard_plan.hpp"

namespace actorserve::gpu {

/// Thrown by a collective of an aborted host_collective.
class collective_aborted : public std::runtime_error {
 public:
  collective_aborted() : std::runtime_error("tensor-parallel collective aborted: another shard failed") {}
};

class host_collective {
 public:
  /// A group of `size` ranks (at least 1).
  explicit host_collective(int size);
  host_collective(const host_collective&) = delete;
  host_collective& operator=(const host_collective&) = delete;

  int size() const { return size_; }

  /// buf[n]: every rank's buffer becomes the element-wise sum over the ranks, added in rank order
  /// (b0 + b1 + ...), so the sum does not depend on timing and is bitwise the same on every rank.
  void all_reduce_sum(int rank, float* buf, size_t n);
  /// out[rows][width]: row r is every rank's row r of its `part` [rows][slice.size()] placed at
  /// columns `slice` (the vocabulary-parallel logits; the slices tile [0, width)).
  void gather_columns(int rank, const float* part, shard_slice slice, size_t rows, size_t width, float* out);
  /// Wakes every waiting rank and fails every later collective (collective_aborted).
  void abort();
  bool aborted() const;

 private:
  /// What a rank brings to the current collective.
  struct contribution {
    float* buf = nullptr;
    const float* part = nullptr;
    size_t n = 0;
    shard_slice slice;
  };
  /// Records `mine` as rank's part, then waits until every rank has arrived; returns every rank's
  /// part of this collective.
  std::vector<contribution> exchange(int rank, const contribution& mine);
  /// Waits until every rank has arrived (the parts are no longer read).
  void barrier();
  /// Arrives at the barrier under `lock`; throws collective_aborted when aborted before it opens.
  void arrive_and_wait(std::unique_lock<std::mutex>& lock);
  void check_rank(int rank) const;

  const int size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;             ///< ranks at the current barrier
  uint64_t generation_ = 0;     ///< barriers opened so far
  bool aborted_ = false;
  std::vector<contribution> parts_;   ///< [rank] of the collective in progress
};

}  // namespace actorserve::gpu
