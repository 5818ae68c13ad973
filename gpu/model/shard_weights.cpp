#include "gpu/model/shard_weights.hpp"

#include <cstring>

namespace actorserve::gpu {
namespace {

/// Whole tensor (an absent one upcasts to nothing).
std::vector<float> whole(const tensor_view& t) { return t.data ? weight_store::to_f32(t) : std::vector<float>{}; }
std::vector<float> whole(const std::optional<tensor_view>& t) { return t ? whole(*t) : std::vector<float>{}; }

/// Rows [s.begin * unit, s.end * unit) of a row-major tensor: upcasts only those rows.
std::vector<float> rows(const tensor_view& t, shard_slice s, int64_t unit) {
  if (!t.data) return {};
  const int64_t row_len = t.shape.size() > 1 ? static_cast<int64_t>(t.num_elements()) / t.shape[0] : 1;
  if (t.scale) {  // FP8: per-channel and block scales index by whole-tensor rows, so dequantize it whole
    const std::vector<float> full = weight_store::to_f32(t);
    const auto first = full.begin() + s.begin * unit * row_len;
    return std::vector<float>(first, first + s.size() * unit * row_len);
  }
  tensor_view sub = t;
  const size_t first = static_cast<size_t>(s.begin * unit * row_len);
  if (sub.dummy)
    sub.dummy->first += first;   // generated: the element index moves, `data` is only a marker
  else
    sub.data = t.data + first * dtype_size(t.dtype);
  sub.shape[0] = s.size() * unit;
  return weight_store::to_f32(sub);
}
std::vector<float> rows(const std::optional<tensor_view>& t, shard_slice s, int64_t unit) {
  return t ? rows(*t, s, unit) : std::vector<float>{};
}

/// Columns [s.begin * unit, s.end * unit) of a [out][in] tensor.
std::vector<float> columns(const tensor_view& t, shard_slice s, int64_t unit) {
  if (!t.data) return {};
  const std::vector<float> full = weight_store::to_f32(t);
  const size_t out = static_cast<size_t>(t.shape[0]), in = full.size() / out;
  const size_t first = static_cast<size_t>(s.begin * unit), width = static_cast<size_t>(s.size() * unit);
  std::vector<float> y(out * width);
  for (size_t r = 0; r < out; ++r) std::memcpy(&y[r * width], &full[r * in + first], width * sizeof(float));
  return y;
}

mlp_weights_f32 mlp_slice(const mlp_views& m, shard_slice inter) {
  return {rows(m.gate_proj, inter, 1), rows(m.up_proj, inter, 1), columns(m.down_proj, inter, 1)};
}

mla_weights_f32 mla_slice(const mla_views& v, const mla_config& m, shard_slice heads) {
  const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim, kv = m.qk_nope_head_dim + m.v_head_dim;
  return {rows(v.q_proj, heads, qk),   whole(v.q_a_proj),  whole(v.q_a_bias), whole(v.q_a_norm),
          rows(v.q_b_proj, heads, qk), whole(v.kv_a_proj), whole(v.kv_a_bias), whole(v.kv_a_norm),
          rows(v.kv_b_proj, heads, kv)};
}

}  // namespace

model_weights_f32 shard_weights_f32(const model_weight_views& v, const shard_plan& plan, int64_t shard) {
  const model_config& cfg = plan.config();
  const shard_slice q = plan.q_heads(shard), kv = plan.kv_heads(shard), vocab = plan.vocab(shard);
  const int64_t hd = cfg.head_dim;
  model_weights_f32 w;
  w.embed_tokens = rows(v.embed_tokens, vocab, 1);
  for (const auto& l : v.layers) {
    layer_weights_f32 o;
    o.input_norm = whole(l.input_norm);
    if (l.mla) {
      o.mla = mla_slice(*l.mla, *cfg.mla, q);
      o.o_proj = columns(l.o_proj, q, cfg.mla->v_head_dim);
    } else {
      o.q_proj = rows(l.q_proj, q, hd);
      o.k_proj = rows(l.k_proj, kv, hd);
      o.v_proj = rows(l.v_proj, kv, hd);
      o.o_proj = columns(l.o_proj, q, hd);
      o.q_bias = rows(l.q_bias, q, hd);
      o.k_bias = rows(l.k_bias, kv, hd);
      o.v_bias = rows(l.v_bias, kv, hd);
    }
    if (plan.holds_row_bias(shard)) o.o_bias = whole(l.o_bias);
    o.q_norm = whole(l.q_norm);
    o.k_norm = whole(l.k_norm);
    o.post_norm = whole(l.post_norm);
    if (l.moe) {
      moe_weights_f32 m;
      m.router = whole(l.moe->router);
      const shard_slice held = plan.experts(shard);
      m.first_expert = held.begin;
      for (int64_t e = held.begin; e < held.end; ++e)
        m.experts.push_back(mlp_slice(l.moe->experts[static_cast<size_t>(e)], plan.expert_intermediate(shard)));
      if (l.moe->shared) m.shared = mlp_slice(*l.moe->shared, plan.shared_expert_intermediate(shard));
      o.moe = std::move(m);
    } else {
      mlp_weights_f32 m = mlp_slice({l.gate_proj, l.up_proj, l.down_proj}, plan.intermediate(shard));
      o.gate_proj = std::move(m.gate_proj);
      o.up_proj = std::move(m.up_proj);
      o.down_proj = std::move(m.down_proj);
    }
    w.layers.push_back(std::move(o));
  }
  w.final_norm = whole(v.final_norm);
  if (!v.lm_head_tied) w.lm_head = rows(v.lm_head, vocab, 1);
  return w;
}

}  // namespace actorserve::gpu
