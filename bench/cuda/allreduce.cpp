// The all-reduce of tensor parallelism's decode steps: fp32 [batch][hidden] summed over the ranks,
// for hidden 8192 and 4096 and batch 1, 8, 32 and 256, through the one-shot kernel
// (gpu/cuda/parallel/custom_all_reduce.hpp) and NCCL, each rank a thread with its own stream (as
// the sharded executor runs). Per point: microseconds per all-reduce launched one by one (eager)
// and replayed from a CUDA graph of 20 back to back (as decode steps run), the slowest rank's.
// With one GPU the one-shot kernel runs its N ranks on that GPU (labelled so; NCCL refuses two
// ranks on one GPU); with two or more, ranks 0..N-1 on GPUs 0..N-1 through both. Record runs with
// scripts/bench_record.sh (machine, commit, command).
//   bench_cuda_allreduce [--out DIR] [--ranks N] [--hidden 8192,4096] [--batch 1,8,32,256]
//                        [--nccl-library PATH] [--same-device]
#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_timing.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/parallel/custom_all_reduce.hpp"
#include "gpu/cuda/parallel/nccl_collective.hpp"

namespace cuda = actorserve::gpu::cuda;
using namespace actorserve::bench_cuda;

namespace {

constexpr int calls_per_graph = 20;
constexpr int eager_calls = 200;
constexpr int graph_replays = 20;

std::vector<int> int_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    v.push_back(int(std::strtol(p, &end, 10)));
    p = *end ? end + 1 : end;
  }
  return v;
}

struct point {
  size_t n;
  double eager_us = 0, graph_us = 0;  ///< the slowest rank's
  bool ok = true;
};

/// Every rank (a thread) measures every point; ranks meet at `sync` before each timed window.
void run_rank(int rank, int device, cuda::device_collective& coll, std::vector<point>& points, std::barrier<>& sync,
              std::vector<std::vector<double>>& eager, std::vector<std::vector<double>>& graph) {
  cudaSetDevice(device);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  size_t max_n = 0;
  for (const point& p : points) max_n = std::max(max_n, p.n);
  float* buf = nullptr;
  cudaMalloc(&buf, max_n * sizeof(float));
  cudaMemsetAsync(buf, 0, max_n * sizeof(float), s);  // zeros stay zeros however often summed
  cudaStreamSynchronize(s);
  sync.arrive_and_wait();  // every rank's cudaMalloc is done before any collective runs
  for (size_t i = 0; i < points.size(); ++i) {
    const size_t n = points[i].n;
    bool ok = true;
    const auto call = [&] { ok = coll.all_reduce_sum(buf, n, s).ok() && ok; };
    for (int w = 0; w < 5; ++w) call();
    cudaStreamSynchronize(s);
    sync.arrive_and_wait();
    eager[i][rank] = 1000.0 * stream_ms(s, [&] {
      for (int c = 0; c < eager_calls; ++c) call();
    }) / eager_calls;
    cudaGraph_t g = nullptr;
    cudaGraphExec_t e = nullptr;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int c = 0; c < calls_per_graph; ++c) call();
    if (cudaStreamEndCapture(s, &g) != cudaSuccess || cudaGraphInstantiate(&e, g, 0) != cudaSuccess) ok = false;
    // NOTE: a rank that failed aborts the group, so its peers' collectives end instead of waiting
    // for it (NCCL has no timeout of its own); the point is marked failed, the program goes on.
    if (!ok) coll.abort();
    if (e) {
      cudaGraphLaunch(e, s);
      cudaStreamSynchronize(s);
    }
    sync.arrive_and_wait();
    graph[i][rank] = 1000.0 * stream_ms(s, [&] {
      for (int r = 0; e && r < graph_replays; ++r) cudaGraphLaunch(e, s);
    }) / (graph_replays * calls_per_graph);
    cudaStreamSynchronize(s);
    if (e) cudaGraphExecDestroy(e);
    if (g) cudaGraphDestroy(g);
    ok = ok && coll.async_error().ok() && cudaGetLastError() == cudaSuccess;
    if (!ok) points[i].ok = false;  // NOTE: only ever set to false, by any rank: a benign race on a bool
    sync.arrive_and_wait();
  }
  sync.arrive_and_wait();  // no rank frees while another's collective may still read
  cudaFree(buf);
  cudaStreamDestroy(s);
}

/// Measures `points` over `ranks` (rank r on devices[r]) and fills in their times.
void measure(std::vector<std::unique_ptr<cuda::device_collective>>& ranks, const std::vector<int>& devices,
             std::vector<point>& points) {
  const size_t num_ranks = ranks.size();
  std::vector<std::vector<double>> eager(points.size(), std::vector<double>(num_ranks));
  std::vector<std::vector<double>> graph = eager;
  std::barrier<> sync(static_cast<std::ptrdiff_t>(num_ranks));
  std::vector<std::thread> threads;
  for (size_t r = 0; r < num_ranks; ++r)
    threads.emplace_back([&, r] {
      run_rank(int(r), devices[r], *ranks[r], points, sync, eager, graph);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < points.size(); ++i) {
    points[i].eager_us = *std::max_element(eager[i].begin(), eager[i].end());
    points[i].graph_us = *std::max_element(graph[i].begin(), graph[i].end());
  }
}

void report_points(const char* path, const std::vector<point>& points, const std::vector<int>& hiddens,
                   const std::vector<int>& batches) {
  size_t i = 0;
  for (int h : hiddens)
    for (int b : batches) {
      const point& p = points[i++];
      const double mib = p.n * 4.0 / (1 << 20);
      if (!p.ok) {
        report("| %s | %d | %d | %.3f | failed | failed |\n", path, h, b, mib);
        continue;
      }
      report("| %s | %d | %d | %.3f | %.1f | %.1f |\n", path, h, b, mib, p.eager_us, p.graph_us);
    }
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir, nccl_path;
  std::vector<int> hiddens = {8192, 4096}, batches = {1, 8, 32, 256};
  int num_ranks = 0;
  bool same_device = false;
  std::string command = argv[0];
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--same-device")) same_device = true;
    else if (!std::strcmp(argv[i], "--out") && has_value) out_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--ranks") && has_value) num_ranks = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--hidden") && has_value) hiddens = int_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--batch") && has_value) batches = int_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--nccl-library") && has_value) nccl_path = argv[++i];
    else {
      std::fprintf(stderr, "bench_cuda_allreduce: unknown or incomplete argument %s\n", argv[i]);
      return 2;
    }
  }
  const int gpus = cuda::device_count();
  if (gpus == 0) {
    std::printf("bench_cuda_allreduce: no CUDA device: nothing to measure\n");
    return 0;
  }
  same_device = same_device || gpus == 1;
  if (num_ranks == 0) num_ranks = same_device ? 2 : gpus;
  if (num_ranks < 2 || (!same_device && num_ranks > gpus)) {
    std::fprintf(stderr, "bench_cuda_allreduce: --ranks %d: need 2 or more, at most the %d GPUs visible (or "
                 "--same-device)\n", num_ranks, gpus);
    return 2;
  }
  if (!out_dir.empty()) g_out = std::fopen((out_dir + "/bench_cuda_allreduce.txt").c_str(), "w");
  std::vector<int> devices(static_cast<size_t>(num_ranks), 0);
  if (!same_device)
    for (int r = 0; r < num_ranks; ++r) devices[size_t(r)] = r;
  std::vector<point> points;
  size_t max_n = 0;
  for (int h : hiddens)
    for (int b : batches) {
      points.push_back({size_t(h) * size_t(b)});
      max_n = std::max(max_n, points.back().n);
    }
  const auto props = cuda::properties(0);
  report("# bench_cuda_allreduce: %s\n# %d GPU(s) visible, GPU 0: %s (%d SMs); %d ranks on %s\n", command.c_str(),
         gpus, props.name.c_str(), props.num_sms, num_ranks,
         same_device ? "GPU 0 (one-shot only: NCCL refuses two ranks on one GPU)" : "one GPU each");
  report("# fp32 [batch][hidden] summed over the ranks; microseconds per all-reduce, the slowest rank's: eager "
         "(%d calls one by one) and graph (%d replays of a CUDA graph of %d calls)\n\n",
         eager_calls, graph_replays, calls_per_graph);
  report("| path | hidden | batch | MiB | eager us | graph us |\n|---|---|---|---|---|---|\n");

  cuda::custom_all_reduce_options one_shot_options;
  one_shot_options.max_bytes = max_n * sizeof(float);
  if (auto made = cuda::make_custom_all_reduce(devices, one_shot_options); made) {
    std::vector<std::unique_ptr<cuda::device_collective>> ranks;
    for (auto& r : *made) ranks.push_back(std::move(r));
    auto measured = points;
    measure(ranks, devices, measured);
    const std::string label = same_device ? "one-shot, " + std::to_string(num_ranks) + " ranks on 1 GPU"
                                          : "one-shot, " + std::to_string(num_ranks) + " GPUs";
    report_points(label.c_str(), measured, hiddens, batches);
  } else {
    report("| one-shot | - | - | - | %s | |\n", made.err().message.c_str());
  }
  if (!same_device) {
    auto lib = cuda::load_nccl(nccl_path);
    auto made = lib ? cuda::make_nccl_collectives(**lib, devices)
                    : actorserve::result<std::vector<std::unique_ptr<cuda::nccl_collective>>>(lib.err());
    if (made) {
      std::vector<std::unique_ptr<cuda::device_collective>> ranks;
      for (auto& r : *made) ranks.push_back(std::move(r));
      auto measured = points;
      measure(ranks, devices, measured);
      const std::string label = "NCCL " + (*lib)->version.to_string() + ", " + std::to_string(num_ranks) + " GPUs";
      report_points(label.c_str(), measured, hiddens, batches);
    } else {
      report("| NCCL | - | - | - | %s | |\n", made.err().message.c_str());
    }
  }
  if (g_out) std::fclose(g_out);
  return 0;
}
