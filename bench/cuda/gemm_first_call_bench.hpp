#pragma once
// bench_cuda_kernels --only gemm-first: what a cuBLAS GEMM shape's first call costs. A server's
// chunked-prefill steps give the dense projections a new row count nearly every step; the
// per-expert path of moe_ffn rounds its rows and runs its shapes at start for this reason
// (docs/moe.md, 5b). For Llama-3-8B's four projections (bf16) and row counts m of 16 to 2,047
// that are not multiples of 64, this times each shape's first call (host wall, synchronised:
// cuBLAS picking and loading kernels included) against the same call once warm, and the same
// for m rounded up to a multiple of 64 after those shapes ran once: the cost rounding would
// leave.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "bench_timing.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/model/cuda_model.hpp"

namespace actorserve::bench_cuda {

inline void bench_gemm_first_call() {
  namespace cuda = gpu::cuda;
  constexpr cuda::act_dtype dt = cuda::act_dtype::bf16;
  struct proj {
    const char* name;
    int n, k;
  };
  const proj projs[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  constexpr int kMaxM = 2048 + 64, kCounts = 24;
  cuda::gemm_runner gemm;
  if (!gemm.init(nullptr, size_t(32) << 20).ok()) return;
  size_t most_w = 0, most_x = 0, most_y = 0;
  for (const proj& p : projs) {
    most_w = std::max(most_w, size_t(p.n) * p.k);
    most_x = std::max(most_x, size_t(kMaxM) * p.k);
    most_y = std::max(most_y, size_t(kMaxM) * p.n);
  }
  void* w = dmalloc(most_w * 2);
  void* x = dmalloc(most_x * 2);
  auto* y = static_cast<float*>(dmalloc(most_y * 4));
  cudaMemset(w, 0, most_w * 2);
  cudaMemset(x, 0, most_x * 2);
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> pick(16, 2047);  // past the GEMV's few rows: cuBLAS each
  std::vector<int> ms;
  while (int(ms.size()) < kCounts) {
    const int m = pick(rng);
    if (m % 64 != 0 && std::find(ms.begin(), ms.end(), m) == ms.end()) ms.push_back(m);
  }
  const auto wall_ms = [&](const proj& p, int m) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)gemm.run(dt, x, m, p.k, w, p.n, y);
    cudaDeviceSynchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  (void)wall_ms(proj{"library start-up", 64, 64}, 64);  // cuBLAS's own first-use costs, outside the table
  report("\n## cuBLAS first calls (bf16, Llama-3-8B's projections, %d row counts of 16-2,047 not multiples of 64; "
         "ms of host wall a call, synchronised)\n", kCounts);
  report("| proj | n x k | first call, mean / max | warm call, mean | rounded to 64: first call, mean / max | "
         "rounded to 64: warm call, mean |\n|---|---|---|---|---|---|\n");
  for (const proj& p : projs) {
    double first = 0, first_max = 0, warm = 0, rfirst = 0, rfirst_max = 0, rwarm = 0;
    for (int m : ms) {
      const double f = wall_ms(p, m);
      first += f;
      first_max = std::max(first_max, f);
      warm += wall_ms(p, m);
    }
    // Rounded: each multiple of 64 once first (the warm-up a start would do), then the counts.
    for (int r = 64; r <= 2048; r += 64) (void)wall_ms(p, r);
    for (int m : ms) {
      const int r = (m + 63) / 64 * 64;
      const double f = wall_ms(p, r);
      rfirst += f;
      rfirst_max = std::max(rfirst_max, f);
      rwarm += wall_ms(p, r);
    }
    report("| %s | %d x %d | %.3f / %.3f | %.3f | %.3f / %.3f | %.3f |\n", p.name, p.n, p.k, first / kCounts,
           first_max, warm / kCounts, rfirst / kCounts, rfirst_max, rwarm / kCounts);
  }
  if (auto e = cudaGetLastError(); e != cudaSuccess) report("CUDA error: %s\n", cudaGetErrorString(e));
  cudaFree(w);
  cudaFree(x);
  cudaFree(y);
}

}  // namespace actorserve::bench_cuda
