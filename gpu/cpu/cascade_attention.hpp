#pragma once
/// Cascade attention on the CPU: the shared-prefix pass of a group (every query of the group
/// against the prefix's keys, each K/V row read once) and the log-sum-exp merge of two partial
/// results over disjoint key ranges. cpu_model runs them for the groups of gpu::plan_cascade.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "gpu/cpu/kv_cache.hpp"

namespace actorserve::gpu::cpu {

/// The softmax statistics of a partial attention result over some keys: the largest score `m`
/// and `s`, the sum of exp(score - m). Its output row is normalised (divided by s).
struct softmax_stats {
  float m = -INFINITY;
  float s = 0.0f;
};

/// Merges a partial result (o2, p2) into (o1, p1) over `n` dims, o1 becoming the attention over
/// both key ranges: m = max(m1, m2), w_i = s_i e^(m_i - m), o = (o1 w1 + o2 w2) / (w1 + w2).
void merge_partial(float* o1, softmax_stats& p1, const float* o2, const softmax_stats& p2, size_t n);

/// One pass over the keys of `blocks` (whole blocks of `kv_head` in `layer`) for every query row
/// of `q`, already scaled: block by block, each block's K/V rows serve all the rows before the
/// next block is read (an online softmax per row). Writes each row's normalised output into
/// `out` [rows][head_dim] and its statistics into `stats` [rows].
void shared_prefix_pass(paged_kv_cache& cache, int64_t layer, int64_t kv_head, std::span<const int32_t> blocks,
                        std::span<const float* const> q, float scale, float* out, softmax_stats* stats);

}  // namespace actorserve::gpu::cpu
