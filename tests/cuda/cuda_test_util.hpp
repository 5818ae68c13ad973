#pragma once
// Helpers for the CUDA kernel tests: device buffers, bf16/fp16 rounding on the host, poisoning.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/act_dtype.hpp"

namespace actorserve::testing {

namespace cuda = ::actorserve::gpu::cuda;

/// Skips the test where no CUDA device is visible.
#define AS_REQUIRE_CUDA()                                                        \
  do {                                                                           \
    if (::actorserve::gpu::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible"; \
  } while (0)

inline uint16_t f32_to_bf16_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b += 0x7fff + ((b >> 16) & 1);
  return uint16_t(b >> 16);
}
inline float bf16_bits_to_f32(uint16_t h) {
  uint32_t b = uint32_t(h) << 16;
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}
uint16_t f32_to_f16_bits(float v);
float f16_bits_to_f32(uint16_t h);

inline uint16_t to_act_bits(cuda::act_dtype dt, float v) {
  return dt == cuda::act_dtype::bf16 ? f32_to_bf16_bits(v) : f32_to_f16_bits(v);
}
inline float from_act_bits(cuda::act_dtype dt, uint16_t h) {
  return dt == cuda::act_dtype::bf16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h);
}
inline float round_act(cuda::act_dtype dt, float v) { return from_act_bits(dt, to_act_bits(dt, v)); }

/// n values uniform in [-scale, scale], rounded to dt (as bits).
inline std::vector<uint16_t> random_act_bits(cuda::act_dtype dt, size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(-scale, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = to_act_bits(dt, ud(rng));
  return v;
}

/// Elements whose bits differ (NaN included); -1 for arrays of different sizes.
template <class T>
int count_unequal(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return -1;
  int off = 0;
  for (size_t i = 0; i < a.size(); ++i) off += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return off;
}

/// A device array of T, freed on scope exit.
template <class T>
class dev_vec {
 public:
  explicit dev_vec(size_t n = 0) { resize(n); }
  dev_vec(const std::vector<T>& host) { upload(host); }
  ~dev_vec() { if (p_) cudaFree(p_); }
  dev_vec(const dev_vec&) = delete;
  dev_vec& operator=(const dev_vec&) = delete;
  void resize(size_t n) {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = n;
    if (n) {
      EXPECT_EQ(cudaMalloc(&p_, n * sizeof(T)), cudaSuccess);
    }
  }
  void upload(const std::vector<T>& host) {
    resize(host.size());
    if (n_) {
      EXPECT_EQ(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n_) {
      EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
  }
  /// Fills every byte with 0xff (NaN for floats, -1 for ints) so unwritten outputs show.
  void poison() {
    if (n_) {
      EXPECT_EQ(cudaMemset(p_, 0xff, n_ * sizeof(T)), cudaSuccess);
    }
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

/// A device vector of 16-bit activations (bf16/fp16 bits) read back as floats.
inline std::vector<float> download_act(cuda::act_dtype dt, const dev_vec<uint16_t>& d) {
  auto bits = d.download();
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = from_act_bits(dt, bits[i]);
  return out;
}

/// max |a - b| / max |b| over the two arrays; NaN in `a` gives infinity.
inline double rel_max_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(double(b[i])));
  }
  return den > 0 ? num / den : num;
}

}  // namespace actorserve::testing
