#pragma once
/// device_collective over NCCL: one communicator per rank, made for the N devices of this process
/// together (ncclCommInitAll). NCCL refuses two ranks on one GPU, so every rank has its own.
#include <memory>
#include <mutex>
#include <vector>

#include "gpu/cuda/parallel/device_collective.hpp"
#include "gpu/cuda/parallel/nccl_library.hpp"

namespace actorserve::gpu::cuda {

class nccl_collective final : public device_collective {
 public:
  struct group_state;  ///< the communicators of the group (abort ends all of them)
  nccl_collective(std::shared_ptr<group_state> group, int rank);
  /// The last rank object of the group destroys every rank's communicator together
  /// (ncclCommDestroy, an intra-node collective, one thread per rank; it waits for the
  /// collectives in flight), or, after an abort, waits for the aborts to end. The caller
  /// synchronises the ranks' streams and destroys the CUDA graphs that captured their collectives
  /// first: NCCL frees no communicator while such a graph lives.
  ~nccl_collective() override;
  nccl_collective(const nccl_collective&) = delete;
  nccl_collective& operator=(const nccl_collective&) = delete;

  int rank() const override { return rank_; }
  int size() const override;
  status all_reduce_sum(float* buf, size_t n, cudaStream_t stream) override;
  status all_gather(const float* part, size_t n, float* out, cudaStream_t stream) override;
  /// ncclCommAbort of every rank's communicator (the group's), once, each on its own thread:
  /// returns at once (the kernels in flight return once the abort flags are set; the frees wait
  /// for the graphs that captured the collectives), and every later call is refused.
  void abort() override;
  status async_error() override;

 private:
  /// Enqueues `op` on this rank's communicator unless the group is aborted or has failed.
  template <class Op>
  status enqueue(const char* what, Op&& op);
  /// ncclCommGetAsyncError of `comm` as a status.
  status pending_error(ncclComm_t comm) const;

  std::shared_ptr<group_state> group_;
  int rank_;
};

/// The N communicators of ranks 0..N-1 on `devices[rank]` (distinct GPUs of this process), in
/// rank order, over `lib` (load_nccl).
result<std::vector<std::unique_ptr<nccl_collective>>> make_nccl_collectives(const nccl_library& lib,
                                                                            const std::vector<int>& devices);

}  // namespace actorserve::gpu::cuda
