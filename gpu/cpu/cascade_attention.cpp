#include "gpu/cpu/cascade_attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu/cpu/kernels.hpp"

namespace actorserve::gpu::cpu {

void merge_partial(float* o1, softmax_stats& p1, const float* o2, const softmax_stats& p2, size_t n) {
  const float m = std::max(p1.m, p2.m);
  const float w1 = p1.s * std::exp(p1.m - m), w2 = p2.s * std::exp(p2.m - m);
  const float inv = 1.0f / (w1 + w2);
  for (size_t d = 0; d < n; ++d) o1[d] = (o1[d] * w1 + o2[d] * w2) * inv;
  p1 = {m, w1 + w2};
}

void shared_prefix_pass(paged_kv_cache& cache, int64_t layer, int64_t kv_head, std::span<const int32_t> blocks,
                        std::span<const float* const> q, float scale, float* out, softmax_stats* stats) {
  const int64_t hd = cache.layout().head_dim, bs = cache.block_size();
  const size_t n = static_cast<size_t>(hd);
  std::fill(out, out + q.size() * n, 0.0f);
  std::fill(stats, stats + q.size(), softmax_stats{});
  std::vector<float> scores(static_cast<size_t>(bs));
  for (int32_t block : blocks) {
    const float* k = cache.k(layer, block, kv_head);
    const float* v = cache.v(layer, block, kv_head);
    for (size_t r = 0; r < q.size(); ++r) {
      float block_max = -INFINITY;
      for (int64_t j = 0; j < bs; ++j) {
        scores[static_cast<size_t>(j)] = dot(q[r], k + j * hd, n) * scale;
        block_max = std::max(block_max, scores[static_cast<size_t>(j)]);
      }
      softmax_stats& st = stats[r];
      float* o = out + r * n;
      if (block_max > st.m) {   // the running max moves: rescale what was summed so far
        const float alpha = std::exp(st.m - block_max);
        for (size_t d = 0; d < n; ++d) o[d] *= alpha;
        st.s *= alpha;
        st.m = block_max;
      }
      for (int64_t j = 0; j < bs; ++j) {
        const float p = std::exp(scores[static_cast<size_t>(j)] - st.m);
        st.s += p;
        axpy(o, p, v + j * hd, n);
      }
    }
  }
  for (size_t r = 0; r < q.size(); ++r) {
    const float inv = 1.0f / stats[r].s;
    for (size_t d = 0; d < n; ++d) out[r * n + d] *= inv;
  }
}

}  // namespace actorserve::gpu::cpu
