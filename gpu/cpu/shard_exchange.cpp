#include "gpu/cpu/shard_exchange.hpp"

#include <algorithm>

#include "gpu/cpu/kernels.hpp"

namespace actorserve::gpu::cpu {

void all_reduce_sum(std::span<float* const> bufs, size_t n) {
  if (bufs.size() < 2) return;
  for (size_t s = 1; s < bufs.size(); ++s) add_inplace(bufs[0], bufs[s], n);
  for (size_t s = 1; s < bufs.size(); ++s) std::copy(bufs[0], bufs[0] + n, bufs[s]);
}

void gather_columns(std::span<const float* const> parts, std::span<const shard_slice> slices, size_t rows,
                    float* out) {
  size_t width = 0;
  for (const auto& sl : slices) width += static_cast<size_t>(sl.size());
  for (size_t s = 0; s < parts.size(); ++s) {
    const size_t w = static_cast<size_t>(slices[s].size()), first = static_cast<size_t>(slices[s].begin);
    for (size_t r = 0; r < rows; ++r) std::copy(parts[s] + r * w, parts[s] + (r + 1) * w, out + r * width + first);
  }
}

}  // namespace actorserve::gpu::cpu
