// Measurement and test kernels of the attention backends (probe.hpp): a streaming read, a stream
// hold for launch-free timing, a short programmatic-dependent predecessor and late copies.
#include <cuda_runtime.h>

#include <cstdint>

#include "bench/cuda/probe/probe.hpp"
#include "gpu/cuda/kernel_util.cuh"

namespace actorserve::gpu::cuda {
namespace {

constexpr int kStreamThreads = 512, kStreamIlp = 8;

__global__ void __launch_bounds__(kStreamThreads) stream_read_kernel(const uint4* src, size_t n, unsigned* sink) {
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * kStreamThreads;
  size_t i = size_t(blockIdx.x) * kStreamThreads + threadIdx.x;
  for (; i + (kStreamIlp - 1) * stride < n; i += kStreamIlp * stride) {
    uint4 v[kStreamIlp];
#pragma unroll
    for (int u = 0; u < kStreamIlp; ++u) v[u] = __ldcs(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < kStreamIlp; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads; almost never true
}

__global__ void hold_kernel(const volatile int* flag) {
  while (*flag == 0) __nanosleep(1000);
}

__global__ void pdl_predecessor_kernel(int ns) {
  dev::pdl_begin();
  const uint64_t t0 = dev::global_ns();
  while (dev::global_ns() - t0 < uint64_t(ns)) {
  }
}

struct late_copies {
  late_copy jobs[3];
};

__global__ void __launch_bounds__(1024) late_copy_kernel(late_copies c, int ns) {
  dev::pdl_begin();
  const uint64_t t0 = dev::global_ns();
  while (dev::global_ns() - t0 < uint64_t(ns)) {
  }
  for (const late_copy& j : c.jobs) {
    const size_t n = j.bytes / 16;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x)
      static_cast<uint4*>(j.dst)[i] = static_cast<const uint4*>(j.src)[i];
  }
}

}  // namespace

int launch_late_copies(const late_copy (&jobs)[3], int ns, cudaStream_t s) {
  late_copies c;
  for (int i = 0; i < 3; ++i) c.jobs[i] = jobs[i];
  return int(dev::launch_pdl(late_copy_kernel, dim3(1), dim3(1024), s, c, ns));
}

int launch_stream_read(const void* src, size_t bytes, unsigned* sink, int ctas, cudaStream_t s) {
  stream_read_kernel<<<ctas, kStreamThreads, 0, s>>>(static_cast<const uint4*>(src), bytes / 16, sink);
  return int(cudaGetLastError());
}

int launch_hold_stream(const volatile int* flag, cudaStream_t s) {
  hold_kernel<<<1, 1, 0, s>>>(flag);
  return int(cudaGetLastError());
}

int launch_pdl_predecessor(int ns, cudaStream_t s) {
  return int(dev::launch_pdl(pdl_predecessor_kernel, dim3(1), dim3(32), s, ns));
}

}  // namespace actorserve::gpu::cuda
