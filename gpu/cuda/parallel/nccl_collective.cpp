#include "gpu/cuda/parallel/nccl_collective.hpp"

#include <fmt/format.h>

#include <atomic>
#include <set>
#include <thread>

namespace actorserve::gpu::cuda {

/// NOTE: abort() never waits. ncclCommAbort sets the communicator's abort flag first (the
/// kernels in flight return) and then frees it, which waits until every CUDA graph that
/// captured one of its collectives is destroyed (NCCL 2.26 and newer). The shards own those
/// graphs and destroy them after the group's abort, so a caller that waited there (the group's
/// abort hook, a shard's failed start) would hang; each rank's abort runs on its own thread,
/// joined when the last rank object is gone (after the shards and their graphs).
/// Each rank's mutex orders its calls into NCCL against its abort: the abort thread takes it
/// before ncclCommAbort (which frees the communicator) and `aborted`, set before the abort
/// threads start, keeps every later call off the communicator. No lock is held while
/// ncclCommAbort runs, so a rank's async_error() answers at once. ncclCommDestroy is an
/// intra-node collective: the ranks' destroys run together, one thread each.
struct nccl_collective::group_state {
  struct rank_slot {
    std::mutex mutex;  ///< held by a call into NCCL on comm
    ncclComm_t comm = nullptr;
  };
  const nccl_library* lib = nullptr;
  std::vector<std::unique_ptr<rank_slot>> ranks;
  std::atomic<bool> aborted{false};
  std::mutex abort_mu;                   ///< guards aborters
  std::vector<std::thread> aborters;     ///< one per rank once aborted

  ~group_state() {
    {
      std::lock_guard lock(abort_mu);
      if (aborters.empty()) {  // never aborted: destroy every rank's communicator together
        for (auto& slot : ranks)
          aborters.emplace_back([fn = lib->fn.comm_destroy, comm = slot->comm] { fn(comm); });
      }
    }
    for (std::thread& t : aborters) t.join();
  }

  void abort_all() {
    std::lock_guard lock(abort_mu);
    if (aborted.exchange(true)) return;
    for (auto& slot : ranks)
      aborters.emplace_back([fn = lib->fn.comm_abort, s = slot.get()] {
        { std::lock_guard wait_for_call(s->mutex); }  // a call into NCCL in flight returns first
        fn(s->comm);
      });
  }
};

nccl_collective::nccl_collective(std::shared_ptr<group_state> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

nccl_collective::~nccl_collective() = default;

int nccl_collective::size() const { return static_cast<int>(group_->ranks.size()); }

template <class Op>
status nccl_collective::enqueue(const char* what, Op&& op) {
  auto& slot = *group_->ranks[rank_];
  std::lock_guard lock(slot.mutex);
  if (group_->aborted) return make_error(error_code::cancelled, fmt::format("{}: the NCCL group was aborted", what));
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

void nccl_collective::abort() { group_->abort_all(); }

status nccl_collective::async_error() {
  auto& slot = *group_->ranks[rank_];
  std::lock_guard lock(slot.mutex);
  if (group_->aborted) return make_error(error_code::cancelled, "the NCCL group was aborted");
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
