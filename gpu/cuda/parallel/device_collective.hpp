#pragma once
/// The collectives tensor-parallel CUDA shards exchange their partial sums with, enqueued on a
/// shard's stream (so CUDA graphs capture them): NCCL between GPUs (nccl_collective.hpp), or the
/// one-shot all-reduce over peer pointers for the small messages of decode steps
/// (custom_all_reduce.hpp). One object per rank; the ranks of a group are made together.
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
  /// abort flag), so the other ranks' streams finish with an error instead of hanging. Any thread.
  virtual void abort() = 0;
};

}  // namespace actorserve::gpu::cuda
