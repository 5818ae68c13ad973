#include "gpu/cpu/moe_ffn.hpp"

#include <algorithm>

#include "gpu/cpu/kernels.hpp"

namespace actorserve::gpu::cpu {
namespace {
constexpr size_t route_grain = 32;     ///< tokens per routing / combining work item
}

moe_ffn::moe_ffn(const moe_config& cfg, int64_t hidden_size)
    : router_(cfg),
      hidden_(static_cast<size_t>(hidden_size)),
      inter_(static_cast<size_t>(cfg.expert_intermediate_size)),
      top_k_(static_cast<size_t>(cfg.top_k)),
      num_experts_(static_cast<size_t>(cfg.num_experts)) {}

void moe_ffn::forward(thread_pool& pool, const moe_weights_f32& w, const float* x, size_t rows, float* out,
                      int64_t* routed) {
  const size_t h = hidden_, k = top_k_, pairs = rows * k;
  logits_.resize(rows * num_experts_);
  experts_.resize(pairs);
  weights_.resize(pairs);
  matmul(pool, x, rows, h, w.router.data(), num_experts_, nullptr, logits_.data());
  const size_t chunks = (rows + route_grain - 1) / route_grain;
  pool.parallel_for(chunks, [&](size_t c0, size_t c1) {
    const size_t t0 = c0 * route_grain, t1 = std::min(rows, c1 * route_grain);
    router_.route(&logits_[t0 * num_experts_], t1 - t0, &experts_[t0 * k], &weights_[t0 * k]);
  });
  permute_by_expert(experts_, k, num_experts_, perm_);
  if (routed)
    for (size_t e = 0; e < num_experts_; ++e) routed[e] += perm_.count(e);
  // The experts held (all, or an expert-parallel shard's range) and the rows routed to them.
  const size_t e_begin = static_cast<size_t>(w.first_expert), e_end = e_begin + w.experts.size();
  const row_range held = perm_.rows_of(e_begin, e_end);
  xp_.resize(held.size() * h);
  yp_.resize(held.size() * h);
  gate_.resize(held.size() * inter_);
  up_.resize(held.size() * inter_);
  gather_rows(x, h, perm_, held, xp_.data());
  // NOTE: one expert's rows at a time, each matmul spread over the pool by output rows: a row's
  // result does not depend on how many rows share its expert, so batching never changes a token.
  for (size_t e = e_begin; e < e_end; ++e) {
    const size_t n = static_cast<size_t>(perm_.count(e)), first = static_cast<size_t>(perm_.offsets[e]) - held.begin;
    if (n == 0) continue;
    const mlp_weights_f32& m = w.experts[e - e_begin];
    swiglu_mlp(pool, &xp_[first * h], n, h, m.gate_proj.data(), m.up_proj.data(), m.down_proj.data(), inter_,
               &gate_[first * inter_], &up_[first * inter_], &yp_[first * h]);
  }
  pool.parallel_for(chunks, [&](size_t c0, size_t c1) {
    combine_rows(yp_.data(), h, perm_, held, weights_.data(), k, c0 * route_grain, std::min(rows, c1 * route_grain),
                 out);
  });
  if (w.shared.empty()) return;
  // The shared experts see every token: one dense MLP, added after the routed sum. Its width comes
  // from the weights: a tensor-parallel shard holds a slice of it.
  const size_t shared_inter = w.shared.gate_proj.size() / h;
  shared_.resize(rows * h);
  gate_.resize(std::max(gate_.size(), rows * shared_inter));
  up_.resize(std::max(up_.size(), rows * shared_inter));
  swiglu_mlp(pool, x, rows, h, w.shared.gate_proj.data(), w.shared.up_proj.data(), w.shared.down_proj.data(),
             shared_inter, gate_.data(), up_.data(), shared_.data());
  add_inplace(out, shared_.data(), rows * h);
}

}  // namespace actorserve::gpu::cpu
