#include "gpu/cuda/parallel/collective_group.hpp"

#include <fmt/format.h>

#include <set>

namespace actorserve::gpu::cuda {

size_switched_collective::size_switched_collective(std::unique_ptr<custom_all_reduce> one_shot,
                                                   std::unique_ptr<nccl_collective> nccl, size_t threshold_bytes)
    : one_shot_(std::move(one_shot)), nccl_(std::move(nccl)), threshold_bytes_(threshold_bytes) {}

int size_switched_collective::rank() const { return one_shot_ ? one_shot_->rank() : nccl_->rank(); }

int size_switched_collective::size() const { return one_shot_ ? one_shot_->size() : nccl_->size(); }

device_collective& size_switched_collective::pick(size_t n) {
  if (!nccl_) return *one_shot_;
  if (!one_shot_ || n * sizeof(float) > threshold_bytes_ || n > one_shot_->max_elements()) return *nccl_;
  return *one_shot_;
}

status size_switched_collective::all_reduce_sum(float* buf, size_t n, cudaStream_t stream) {
  return pick(n).all_reduce_sum(buf, n, stream);
}

status size_switched_collective::all_gather(const float* part, size_t n, float* out, cudaStream_t stream) {
  return pick(n).all_gather(part, n, out, stream);
}

void size_switched_collective::abort() {
  if (one_shot_) one_shot_->abort();
  if (nccl_) nccl_->abort();
}

status size_switched_collective::async_error() {
  if (one_shot_)
    if (auto st = one_shot_->async_error(); !st) return st;
  return nccl_ ? nccl_->async_error() : status{};
}

result<std::vector<std::unique_ptr<device_collective>>> make_device_collectives(const std::vector<int>& devices,
                                                                                const collective_group_options& options) {
  const std::set<int> distinct(devices.begin(), devices.end());
  std::vector<std::unique_ptr<custom_all_reduce>> one_shot(devices.size());
  std::vector<std::unique_ptr<nccl_collective>> nccl(devices.size());
  if (distinct.size() == 1) {
    auto made = make_custom_all_reduce(devices, options.one_shot);
    if (!made) return made.err();
    one_shot = std::move(made.value());
  } else if (distinct.size() != devices.size()) {
    return make_error(error_code::unsupported,
                      fmt::format("tensor-parallel collectives: {} ranks on {} GPUs; either one GPU for all or one "
                                  "GPU each",
                                  devices.size(), distinct.size()));
  } else {
    auto lib = load_nccl(options.nccl_library);
    if (!lib) return lib.err();
    auto made_nccl = make_nccl_collectives(**lib, devices);
    if (!made_nccl) return made_nccl.err();
    nccl = std::move(made_nccl.value());
    // Without peer access (refused as unsupported) NCCL takes every message; any other failure
    // fails the group.
    auto made = make_custom_all_reduce(devices, options.one_shot);
    if (made) one_shot = std::move(made.value());
    else if (made.err().code != error_code::unsupported) return made.err();
  }
  std::vector<std::unique_ptr<device_collective>> ranks;
  for (size_t r = 0; r < devices.size(); ++r)
    ranks.push_back(std::make_unique<size_switched_collective>(std::move(one_shot[r]), std::move(nccl[r]),
                                                               options.threshold_bytes));
  return ranks;
}

}  // namespace actorserve::gpu::cuda
