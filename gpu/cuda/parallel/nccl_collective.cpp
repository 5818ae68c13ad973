#include "gpu/cuda/parallel/nccl_collective.hpp"

#include <fmt/format.h>

#include <set>

namespace actorserve::gpu::cuda {

/// NOTE: each rank's mutex orders its enqueues against abort(): ncclCommAbort frees the
/// communicator, so no call may be inside NCCL with it then. abort() takes the ranks' mutexes one
/// at a time, never two at once, and an enqueue holds only its own: no lock order to break.
struct nccl_collective::group_state {
  struct rank_slot {
    std::mutex mutex;  ///< guards comm and aborted
    ncclComm_t comm = nullptr;
    bool aborted = false;
  };
  const nccl_library* lib = nullptr;
  std::vector<std::unique_ptr<rank_slot>> ranks;
};

nccl_collective::nccl_collective(std::shared_ptr<group_state> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

nccl_collective::~nccl_collective() {
  auto& slot = *group_->ranks[rank_];
  std::lock_guard lock(slot.mutex);
  if (!slot.aborted) group_->lib->fn.comm_destroy(slot.comm);
}

int nccl_collective::size() const { return static_cast<int>(group_->ranks.size()); }

template <class Op>
status nccl_collective::enqueue(const char* what, Op&& op) {
  auto& slot = *group_->ranks[rank_];
  std::lock_guard lock(slot.mutex);
  if (slot.aborted) return make_error(error_code::cancelled, fmt::format("{}: the NCCL group was aborted", what));
  if (auto st = pending_error(slot.comm); !st) return st;
  return group_->lib->check(op(slot.comm), what);
}

status nccl_collective::all_reduce_sum(float* buf, size_t n, cudaStream_t stream) {
  if (n == 0) return {};
  const auto& fn = group_->lib->fn;
  return enqueue("ncclAllReduce", [&](ncclComm_t comm) {
    return fn.all_reduce(buf, buf, n, ncclFloat32, ncclSum, comm, stream);
  });
}

status nccl_collective::all_gather(const float* part, size_t n, float* out, cudaStream_t stream) {
  if (n == 0) return {};
  const auto& fn = group_->lib->fn;
  return enqueue("ncclAllGather", [&](ncclComm_t comm) {
    return fn.all_gather(part, out, n, ncclFloat32, comm, stream);
  });
}

void nccl_collective::abort() {
  for (auto& slot : group_->ranks) {
    std::lock_guard lock(slot->mutex);
    if (slot->aborted) continue;
    slot->aborted = true;
    group_->lib->fn.comm_abort(slot->comm);
  }
}

status nccl_collective::async_error() {
  auto& slot = *group_->ranks[rank_];
  std::lock_guard lock(slot.mutex);
  if (slot.aborted) return make_error(error_code::cancelled, "the NCCL group was aborted");
  return pending_error(slot.comm);
}

status nccl_collective::pending_error(ncclComm_t comm) const {
  const nccl_library& lib = *group_->lib;
  ncclResult_t pending = ncclSuccess;
  if (auto st = lib.check(lib.fn.comm_get_async_error(comm, &pending), "ncclCommGetAsyncError"); !st) return st;
  return lib.check(pending, "an NCCL collective in flight");
}

result<std::vector<std::unique_ptr<nccl_collective>>> make_nccl_collectives(const nccl_library& lib,
                                                                            const std::vector<int>& devices) {
  if (devices.empty()) return make_error(error_code::invalid_argument, "NCCL group: no devices");
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size())
    return make_error(error_code::unsupported,
                      "NCCL group: two ranks on one GPU (NCCL refuses them; the one-shot all-reduce takes them)");
  auto group = std::make_shared<nccl_collective::group_state>();
  group->lib = &lib;
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  if (auto st = lib.check(lib.fn.comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data()),
                          "ncclCommInitAll");
      !st)
    return make_error(st.err().code, fmt::format("NCCL {} ({}) over {} GPUs: {}", lib.version.to_string(), lib.path,
                                                 devices.size(), st.err().message));
  for (ncclComm_t comm : comms) {
    group->ranks.push_back(std::make_unique<nccl_collective::group_state::rank_slot>());
    group->ranks.back()->comm = comm;
  }
  std::vector<std::unique_ptr<nccl_collective>> ranks;
  for (size_t r = 0; r < devices.size(); ++r) ranks.push_back(std::make_unique<nccl_collective>(group, static_cast<int>(r)));
  return ranks;
}

}  // namespace actorserve::gpu::cuda
