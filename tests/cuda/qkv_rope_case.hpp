#pragma once
// The QKV projection + rope cases of the one-token GEMV tests (fused_gemv_test, gemv_bulk_test):
// the shapes, and one case's operands other than x and the weights.
#include <cmath>
#include <random>
#include <vector>

#include "cuda_test_util.hpp"
#include "gpu/cuda/ops/elementwise.hpp"

namespace actorserve::testing {

/// Heads, KV heads, head dim, k; whether a bias is added; the KV slot written (-1: none).
struct qkv_rope_shape {
  int H, KVH, D, k;
  bool bias;
  int32_t slot;
};
inline const qkv_rope_shape kQkvRopeShapes[] = {
    {4, 2, 16, 64, true, 37}, {32, 8, 128, 4096, false, 1000}, {4, 1, 32, 200, true, -1}};

/// A bias uniform in [-0.5, 0.5] (seed 5), the rotary frequencies (base 10000), token 0 at
/// position 777 in slot sh.slot, and room for K/V caches of kSlots slots.
struct qkv_rope_case {
  static constexpr int kSlots = 1024;
  qkv_rope_shape sh;
  int width;     ///< (H + 2 KVH) D
  size_t cache;  ///< elements of one cache
  std::vector<float> bias_h, inv_freq;
  dev_vec<float> bias, inv;
  dev_vec<int32_t> pos, slot;
  explicit qkv_rope_case(const qkv_rope_shape& s)
      : sh(s),
        width((s.H + 2 * s.KVH) * s.D),
        cache(size_t(kSlots) * s.KVH * s.D),
        bias_h(uniform(size_t(width))),
        inv_freq(freqs(s.D)),
        bias(bias_h),
        inv(inv_freq),
        pos(std::vector<int32_t>{777}),
        slot(std::vector<int32_t>{s.slot}) {}
  /// The arguments for token 0, q/k/v projections to `qkv`, k and v to the caches given.
  cuda::rope_kv_args args(float* qkv, void* k_cache, void* v_cache) const {
    cuda::rope_kv_args a;
    a.bias = sh.bias ? bias.get() : nullptr;
    a.positions = pos.get();
    a.slots = slot.get();
    a.inv_freq = inv.get();
    a.n = 1;
    a.num_heads = sh.H;
    a.num_kv_heads = sh.KVH;
    a.head_dim = sh.D;
    a.qkv = qkv;
    a.k_cache = k_cache;
    a.v_cache = v_cache;
    return a;
  }

 private:
  static std::vector<float> uniform(size_t n) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> ud(-0.5f, 0.5f);
    std::vector<float> v(n);
    for (auto& x : v) x = ud(rng);
    return v;
  }
  static std::vector<float> freqs(int D) {
    std::vector<float> f(static_cast<size_t>(D / 2));
    for (int i = 0; i < D / 2; ++i) f[size_t(i)] = std::pow(10000.0f, -2.0f * i / D);
    return f;
  }
};

}  // namespace actorserve::testing
