#pragma once
/// The collectives tensor-parallel CUDA shards exchange their partial sums with, enqueued on a
/// shard's stream (so CUDA graphs capture them): NCCL between GPUs (nccl_collective.hpp), or the
/// one-shot all-reduce over peer pointers for the small messages of decode steps
/// (custom_all_reduce.hpp), chosen per message size (make_device_collectives in
/// collective_group.hpp). One object per rank; the ranks of a group are made together; each rank
/// enqueues its collectives on one stream (or streams ordered one after another).
#include <cuda_runtime_api.h>

#include <cstddef>

#include "config/error.hpp"
#include "gpu/cuda/act_dtype.hpp"

namespace actorserve::gpu::cuda {

class device_collective {
 public:
  virtual ~device_collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// buf[n] (fp32, this rank's device): every rank's buffer becomes the element-wise sum over the
  /// ranks, enqueued on `stream`. Every rank must call it, with the same n, in the same order.
  virtual status all_reduce_sum(float* buf, size_t n, cudaStream_t stream) = 0;
  /// out[size()][n] (fp32) = every rank's `part[n]`, in rank order, enqueued on `stream`.
  virtual status all_gather(const float* part, size_t n, float* out, cudaStream_t stream) = 0;
  /// Ends collectives that wait for a rank that failed (ncclCommAbort; the one-shot kernel's
  /// abort flag), so the other ranks' streams finish with an error instead of hanging. Any thread;
  /// never waits for a rank (it runs in the abort hook of a group whose shards still live).
  virtual void abort() = 0;
  /// A failure of collectives already enqueued, known once the stream's work has run: the abort,
  /// a wait that timed out (the one-shot kernel), NCCL's asynchronous error. A shard checks it
  /// after synchronising its stream, since a collective ended this way finishes without a CUDA
  /// error and its output is garbage. After an error the object refuses every later call: the
  /// group is made anew.
  virtual status async_error() = 0;
};

}  // namespace actorserve::gpu::cuda
