#pragma once
/// The one-shot all-reduce over peer pointers, for the small messages of decode steps (as vLLM's
/// custom all-reduce on NVLink): each rank's kernel copies its part into its registered buffer,
/// meets the other ranks' kernels at a barrier of flags in device memory, reads every rank's
/// buffer and writes the sum in rank order (every rank's result bitwise the same), and meets them
/// again before the buffers are reused. One launch, no host step: CUDA graphs capture and replay
/// it. The ranks are threads of one process, each with its own stream; pointers are exchanged in
/// memory (peer access between GPUs; on one GPU they are simply shared), so no IPC handles.
///
/// Ranks may share a GPU (N streams of one device: how single-GPU machines test the sharded
/// executor); the grid is kept to at most SMs / (ranks on that GPU) blocks per rank so the N
/// kernels are resident together. A barrier wait longer than the timeout, or abort(), ends every
/// rank's kernel with async_error() set, never a hang.
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/cuda/parallel/device_collective.hpp"

namespace actorserve::gpu::cuda {

struct custom_all_reduce_options {
  /// Registered buffer per rank: the largest message (fp32 elements x 4 bytes) it takes; larger
  /// ones are refused (the caller's NCCL takes them).
  size_t max_bytes = size_t(8) << 20;
  /// A barrier wait longer than this fails the group (timed out). Generous: a rank may be late by
  /// a whole layer's kernels, or by a module's first load.
  uint64_t timeout_ns = uint64_t(5) * 1000 * 1000 * 1000;
};

class custom_all_reduce final : public device_collective {
 public:
  struct group_state;  ///< the buffers, flags and control word of the group
  custom_all_reduce(std::shared_ptr<group_state> group, int rank);
  ~custom_all_reduce() override = default;

  int rank() const override { return rank_; }
  int size() const override;
  /// In place; n at most max_bytes / 4 (else invalid_argument, enqueuing nothing).
  status all_reduce_sum(float* buf, size_t n, cudaStream_t stream) override;
  /// out[size()][n]; n at most max_bytes / 4.
  status all_gather(const float* part, size_t n, float* out, cudaStream_t stream) override;
  /// Sets the group's abort word (host-mapped): every rank's waiting kernel returns, now and in
  /// any later launch or graph replay.
  void abort() override;
  /// Aborted, or a wait timed out (the group's, whichever rank it was).
  status async_error() override;
  /// Elements one message may hold.
  size_t max_elements() const;

 private:
  status enqueue(const float* in, float* out, size_t n, bool gather, cudaStream_t stream);

  std::shared_ptr<group_state> group_;
  int rank_;
};

/// The ranks 0..N-1 of one group on `devices[rank]` (repeats allowed: ranks sharing a GPU), in
/// rank order. Enables peer access between the distinct GPUs; refused (unsupported) where two of
/// them cannot reach each other, or N exceeds one_shot::max_ranks. The caller's current device
/// is kept. Destroy the ranks after their streams are synchronised.
result<std::vector<std::unique_ptr<custom_all_reduce>>> make_custom_all_reduce(const std::vector<int>& devices,
                                                                               const custom_all_reduce_options& options);

}  // namespace actorserve::gpu::cuda
