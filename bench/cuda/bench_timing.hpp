#pragma once
// Helpers of the bench_cuda_* programs: output to stdout and the --out file, event and
// CUDA-graph timing, device buffers that exit the program when cudaMalloc fails, random bf16 data.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace actorserve::bench_cuda {

inline FILE* g_out = nullptr;

template <class... A>
void report(const char* fmt, A... a) {
  std::printf(fmt, a...);
  std::fflush(stdout);
  if (g_out) {
    std::fprintf(g_out, fmt, a...);
    std::fflush(g_out);
  }
}

template <class F>
double time_ms(F&& f, int iters = 20) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) f();
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) f();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
}

/// `n` normal values of standard deviation `sd` as bf16 bits (rounded to nearest even).
inline std::vector<uint16_t> normal_bf16(size_t n, float sd, uint32_t seed) {
  std::vector<uint16_t> h(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  for (auto& x : h) {
    const float f = nd(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    x = uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  }
  return h;
}

inline void* dmalloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) { std::fprintf(stderr, "cudaMalloc %zu failed\n", bytes); std::exit(1); }
  cudaMemset(p, 0, bytes);
  return p;
}

template <class T>
T* upload(const std::vector<T>& v) {
  T* p = static_cast<T*>(dmalloc(v.size() * sizeof(T) + 16));
  cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}

/// Milliseconds between events recorded on `s` around what `work` enqueues there.
template <class F>
double stream_ms(cudaStream_t s, F&& work) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, s);
  work();
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

/// Average ms of one replay of a CUDA graph that captures `f` (enqueued on `s`).
template <class F>
double graph_ms(cudaStream_t s, F&& f, int iters = 10) {
  f();
  cudaStreamSynchronize(s);
  cudaGraph_t g = nullptr;
  cudaGraphExec_t e = nullptr;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  f();
  if (cudaStreamEndCapture(s, &g) != cudaSuccess || cudaGraphInstantiate(&e, g, 0) != cudaSuccess) {
    std::printf("graph capture failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    if (g) cudaGraphDestroy(g);
    return -1.0;
  }
  cudaGraphLaunch(e, s);
  cudaStreamSynchronize(s);
  const double ms = stream_ms(s, [&] {
    for (int i = 0; i < iters; ++i) cudaGraphLaunch(e, s);
  });
  cudaGraphExecDestroy(e);
  cudaGraphDestroy(g);
  if (auto err = cudaGetLastError(); err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    return -1.0;
  }
  return ms / iters;
}

}  // namespace actorserve::bench_cuda
