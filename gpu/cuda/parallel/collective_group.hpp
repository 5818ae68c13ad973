#pragma once
/// The collectives of one tensor-parallel CUDA group, chosen per message size: the one-shot
/// kernel (custom_all_reduce.hpp) for messages up to a threshold, NCCL (nccl_collective.hpp)
/// above it. Ranks sharing one GPU get the one-shot kernel alone (NCCL refuses them), so their
/// messages must fit its buffer.
#include <memory>
#include <string>
#include <vector>

#include "gpu/cuda/parallel/custom_all_reduce.hpp"
#include "gpu/cuda/parallel/nccl_collective.hpp"

namespace actorserve::gpu::cuda {

/// Messages of at most this many bytes (per rank) take the one-shot kernel where NCCL is there
/// too. NOTE: not measured yet; 512 KiB is vLLM's one-shot bound on NVLink. bench_cuda_allreduce
/// gives the crossing point on two GPUs (docs/tensor-parallel.md).
inline constexpr size_t one_shot_threshold_bytes = size_t(512) << 10;

/// One rank: the one-shot kernel (may be null) and NCCL (may be null; never both null).
class size_switched_collective final : public device_collective {
 public:
  size_switched_collective(std::unique_ptr<custom_all_reduce> one_shot, std::unique_ptr<nccl_collective> nccl,
                           size_t threshold_bytes);
  int rank() const override;
  int size() const override;
  status all_reduce_sum(float* buf, size_t n, cudaStream_t stream) override;
  status all_gather(const float* part, size_t n, float* out, cudaStream_t stream) override;
  void abort() override;
  status async_error() override;

 private:
  /// The one for a message of n floats per rank.
  device_collective& pick(size_t n);

  std::unique_ptr<custom_all_reduce> one_shot_;
  std::unique_ptr<nccl_collective> nccl_;
  size_t threshold_bytes_;
};

struct collective_group_options {
  std::string nccl_library;  ///< --nccl-library ("" searches; load_nccl)
  custom_all_reduce_options one_shot;
  size_t threshold_bytes = one_shot_threshold_bytes;
};

/// The collectives of ranks 0..N-1 on `devices[rank]`, in rank order. All on one GPU: the
/// one-shot kernel alone. Distinct GPUs: NCCL (refused where it cannot be loaded), and the
/// one-shot kernel below the threshold where the GPUs reach each other's memory. Mixed (some
/// GPUs with several ranks) is refused.
result<std::vector<std::unique_ptr<device_collective>>> make_device_collectives(const std::vector<int>& devices,
                                                                                const collective_group_options& options);

}  // namespace actorserve::gpu::cuda
