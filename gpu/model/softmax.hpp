#pragma once
/// The exponentials of a softmax, shared by the router and the CPU attention (pure, fp32).
#include <algorithm>
#include <cmath>
#include <cstddef>

namespace actorserve::gpu {

/// out[i] = exp(x[i] - max(x)) for i < n (`out` may be `x`); returns 1 / sum(out), so that the
/// softmax is out[i] times the result.
inline float exp_shifted(const float* x, size_t n, float* out) {
  float max_x = -INFINITY;
  for (size_t i = 0; i < n; ++i) max_x = std::max(max_x, x[i]);
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    out[i] = std::exp(x[i] - max_x);
    sum += out[i];
  }
  return 1.0f / sum;
}

}  // namespace actorserve::gpu
