#include "gpu/cuda/parallel/custom_all_reduce.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>

#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/parallel/one_shot_kernel.hpp"

namespace actorserve::gpu::cuda {

struct custom_all_reduce::group_state {
  std::vector<int> devices;                     ///< [rank]
  std::vector<float*> buffers;                  ///< [rank], on devices[rank]
  std::vector<one_shot::signal_block*> signals; ///< [rank], on devices[rank]
  one_shot::control_block* control = nullptr;   ///< pinned, mapped into every device (UVA: one address)
  size_t max_elements = 0;
  uint64_t timeout_ns = 0;
  int blocks_per_rank = 1;  ///< the grid's cap, the same for every rank

  ~group_state() {
    for (float* b : buffers) cudaFree(b);
    for (one_shot::signal_block* s : signals) cudaFree(s);
    if (control) cudaFreeHost(control);
  }
  std::atomic_ref<uint32_t> word(uint32_t& w) const { return std::atomic_ref<uint32_t>(w); }
};

namespace {

/// Restores the calling thread's current device on scope exit.
class device_guard {
 public:
  device_guard() { cudaGetDevice(&saved_); }
  ~device_guard() { cudaSetDevice(saved_); }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int saved_ = 0;
};

status enable_peer_access(int from, int to) {
  int can = 0;
  AS_CUDA_TRY(cudaDeviceCanAccessPeer(&can, from, to));
  if (!can)
    return make_error(error_code::unsupported,
                      fmt::format("one-shot all-reduce: GPU {} cannot access GPU {}'s memory (no peer access); NCCL "
                                  "takes every message",
                                  from, to));
  AS_CUDA_TRY(cudaSetDevice(from));
  if (cudaError_t e = cudaDeviceEnablePeerAccess(to, 0); e != cudaSuccess) {
    cudaGetLastError();  // clears the error the call left
    if (e != cudaErrorPeerAccessAlreadyEnabled) return cuda_status(e, "cudaDeviceEnablePeerAccess");
  }
  return {};
}

/// Blocks per rank that keep the kernels of ranks sharing a GPU resident together: at most
/// SMs / (ranks on that GPU) on every GPU, and one_shot::max_blocks.
result<int> blocks_per_rank(const std::vector<int>& devices) {
  std::map<int, int> ranks_on;
  for (int d : devices) ++ranks_on[d];
  int blocks = one_shot::max_blocks;
  for (const auto& [device, count] : ranks_on) {
    int sms = 0;
    AS_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    blocks = std::min(blocks, std::max(1, sms / count));
  }
  return blocks;
}

status allocate(custom_all_reduce::group_state& g) {
  const size_t buffer_bytes = (g.max_elements + 3) / 4 * 4 * sizeof(float);
  for (int device : g.devices) {
    AS_CUDA_TRY(cudaSetDevice(device));
    void* buffer = nullptr;
    AS_CUDA_TRY(cudaMalloc(&buffer, buffer_bytes));
    g.buffers.push_back(static_cast<float*>(buffer));
    void* signal = nullptr;
    AS_CUDA_TRY(cudaMalloc(&signal, sizeof(one_shot::signal_block)));
    g.signals.push_back(static_cast<one_shot::signal_block*>(signal));
    AS_CUDA_TRY(cudaMemset(signal, 0, sizeof(one_shot::signal_block)));
  }
  void* control = nullptr;
  AS_CUDA_TRY(cudaHostAlloc(&control, sizeof(one_shot::control_block), cudaHostAllocMapped | cudaHostAllocPortable));
  g.control = static_cast<one_shot::control_block*>(control);
  *g.control = {};
  // NOTE: with unified addressing the mapped block's device address is its host address in every
  // device; the kernel is given that one pointer.
  void* mapped = nullptr;
  AS_CUDA_TRY(cudaHostGetDevicePointer(&mapped, control, 0));
  if (mapped != control)
    return make_error(error_code::unsupported, "one-shot all-reduce: mapped host memory without unified addressing");
  for (int device : g.devices) {
    AS_CUDA_TRY(cudaSetDevice(device));
    AS_CUDA_TRY(cudaDeviceSynchronize());  // the memsets are done before any rank launches
  }
  return {};
}

}  // namespace

custom_all_reduce::custom_all_reduce(std::shared_ptr<group_state> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

int custom_all_reduce::size() const { return static_cast<int>(group_->devices.size()); }

size_t custom_all_reduce::max_elements() const { return group_->max_elements; }

status custom_all_reduce::all_reduce_sum(float* buf, size_t n, cudaStream_t stream) {
  return enqueue(buf, buf, n, false, stream);
}

status custom_all_reduce::all_gather(const float* part, size_t n, float* out, cudaStream_t stream) {
  return enqueue(part, out, n, true, stream);
}

void custom_all_reduce::abort() { group_->word(group_->control->abort).store(1, std::memory_order_release); }

status custom_all_reduce::async_error() {
  if (group_->word(group_->control->timed_out).load(std::memory_order_acquire) != 0)
    return make_error(error_code::internal,
                      fmt::format("one-shot all-reduce: a rank waited over {} ms for another at a barrier (a rank "
                                  "never came); the group is failed",
                                  group_->timeout_ns / 1000000));
  if (group_->word(group_->control->abort).load(std::memory_order_acquire) != 0)
    return make_error(error_code::cancelled, "one-shot all-reduce: the group was aborted");
  return {};
}

status custom_all_reduce::enqueue(const float* in, float* out, size_t n, bool gather, cudaStream_t stream) {
  if (auto st = async_error(); !st) return st;
  if (n == 0) return {};
  const group_state& g = *group_;
  if (n > g.max_elements)
    return make_error(error_code::invalid_argument,
                      fmt::format("one-shot all-reduce: {} floats exceed its buffer of {} per rank (NCCL takes them)",
                                  n, g.max_elements));
  int current = -1;
  AS_CUDA_TRY(cudaGetDevice(&current));
  if (current != g.devices[rank_])
    return make_error(error_code::internal, fmt::format("one-shot all-reduce: rank {} runs on GPU {}, called with GPU {} "
                                                        "current",
                                                        rank_, g.devices[rank_], current));
  one_shot::params p{};
  p.in = in;
  p.out = out;
  p.n = n;
  for (size_t r = 0; r < g.devices.size(); ++r) {
    p.buffers[r] = g.buffers[r];
    p.signals[r] = g.signals[r];
  }
  p.control = g.control;
  p.timeout_ns = g.timeout_ns;
  p.rank = rank_;
  p.num_ranks = size();
  p.kind = gather ? one_shot::op::gather : one_shot::op::reduce_sum;
  const size_t groups = (n + 3) / 4;
  const size_t wanted = (groups + one_shot::block_threads - 1) / one_shot::block_threads;
  const int blocks = static_cast<int>(std::min<size_t>(wanted, static_cast<size_t>(g.blocks_per_rank)));
  return cuda_status(one_shot::launch(p, blocks, stream), gather ? "one-shot all-gather" : "one-shot all-reduce");
}

result<std::vector<std::unique_ptr<custom_all_reduce>>> make_custom_all_reduce(const std::vector<int>& devices,
                                                                               const custom_all_reduce_options& options) {
  if (devices.empty() || devices.size() > static_cast<size_t>(one_shot::max_ranks))
    return make_error(error_code::unsupported, fmt::format("one-shot all-reduce: {} ranks; it takes 1 to {}",
                                                           devices.size(), one_shot::max_ranks));
  if (options.max_bytes < sizeof(float))
    return make_error(error_code::invalid_argument, "one-shot all-reduce: max_bytes below one float");
  device_guard keep_device;
  std::vector<int> distinct = devices;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (int a : distinct)
    for (int b : distinct)
      if (a != b)
        if (auto st = enable_peer_access(a, b); !st) return st.err();
  auto blocks = blocks_per_rank(devices);
  if (!blocks) return blocks.err();
  auto group = std::make_shared<custom_all_reduce::group_state>();
  group->devices = devices;
  group->max_elements = options.max_bytes / sizeof(float);
  group->timeout_ns = options.timeout_ns;
  group->blocks_per_rank = *blocks;
  if (auto st = allocate(*group); !st) return st.err();
  std::vector<std::unique_ptr<custom_all_reduce>> ranks;
  for (size_t r = 0; r < devices.size(); ++r)
    ranks.push_back(std::make_unique<custom_all_reduce>(group, static_cast<int>(r)));
  return ranks;
}

}  // namespace actorserve::gpu::cuda
