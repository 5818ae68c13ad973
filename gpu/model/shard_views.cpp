#include "gpu/model/shard_views.hpp"

#include <fmt/format.h>

#include <cstring>
#include <optional>

namespace actorserve::gpu {
namespace {

/// Cuts row and column slices of stored tensors; owns the copies. Records the first error and
/// hands out unbound views after it, so the walk over the model stays flat.
class view_cutter {
 public:
  view_cutter(const shard_plan& plan, int64_t shard, block_cut cut) : plan_(plan), shard_(shard), cut_(cut) {}

  /// Rows [s.begin * unit, s.end * unit) of a row-major tensor (1-D: elements).
  tensor_view rows(const tensor_view& t, shard_slice s, int64_t unit);
  std::optional<tensor_view> rows(const std::optional<tensor_view>& t, shard_slice s, int64_t unit) {
    return t ? std::optional(rows(*t, s, unit)) : std::nullopt;
  }
  /// Columns [s.begin * unit, s.end * unit) of a [out][in] tensor.
  tensor_view columns(const tensor_view& t, shard_slice s, int64_t unit);

  std::vector<std::unique_ptr<std::byte[]>> take_owned() { return std::move(owned_); }
  const std::optional<error>& failed() const { return failed_; }

 private:
  std::byte* allocate(size_t bytes) {
    owned_.push_back(std::make_unique<std::byte[]>(bytes));
    return owned_.back().get();
  }
  /// Whether [first, first + count) of `n` starts and ends on block boundaries (or the end).
  static bool whole_blocks(int64_t first, int64_t count, int64_t n, int64_t block) {
    return first % block == 0 && (first + count == n || (first + count) % block == 0);
  }
  /// The slice dequantized into an owned f32 tensor (block_cut::dequantize), or the refusal.
  tensor_view cut_blocks(const tensor_view& t, bool by_rows, int64_t first, int64_t count, int64_t block);
  tensor_view generated_columns(const tensor_view& t, int64_t first, int64_t count);

  const shard_plan& plan_;
  int64_t shard_;
  block_cut cut_;
  std::vector<std::unique_ptr<std::byte[]>> owned_;
  std::optional<error> failed_;
};

int64_t row_length(const tensor_view& t) {
  return t.shape.size() > 1 ? static_cast<int64_t>(t.num_elements()) / t.shape[0] : 1;
}

tensor_view view_cutter::rows(const tensor_view& t, shard_slice s, int64_t unit) {
  if (!t.data || failed_) return t.data ? tensor_view{} : t;
  const int64_t first = s.begin * unit, count = s.size() * unit, row_len = row_length(t);
  if (first == 0 && count == t.shape[0]) return t;
  tensor_view sub = t;
  sub.shape[0] = count;
  const size_t first_element = static_cast<size_t>(first * row_len);
  if (sub.dummy) {
    sub.dummy->first += first_element;   // generated: the element index moves, `data` is only a marker
    return sub;
  }
  sub.data = t.data + first_element * dtype_size(t.dtype);
  if (!t.scale) return sub;
  fp8_scale_view& scale = *sub.scale;
  switch (scale.kind) {
    case fp8_scale_kind::per_tensor: break;
    case fp8_scale_kind::per_channel: scale.data += static_cast<size_t>(first) * dtype_size(scale.dtype); break;
    case fp8_scale_kind::block: {
      if (!whole_blocks(first, count, t.shape[0], scale.block_rows))
        return cut_blocks(t, true, first, count, scale.block_rows);
      const int64_t scale_cols = (t.shape[1] + scale.block_cols - 1) / scale.block_cols;
      scale.data += static_cast<size_t>(first / scale.block_rows * scale_cols) * dtype_size(scale.dtype);
      break;
    }
  }
  return sub;
}

tensor_view view_cutter::columns(const tensor_view& t, shard_slice s, int64_t unit) {
  if (!t.data || failed_) return t.data ? tensor_view{} : t;
  const int64_t first = s.begin * unit, count = s.size() * unit, out = t.shape[0], in = t.shape[1];
  if (first == 0 && count == in) return t;
  if (t.dummy) return generated_columns(t, first, count);
  tensor_view sub = t;
  sub.shape[1] = count;
  if (t.scale && t.scale->kind == fp8_scale_kind::block) {
    const fp8_scale_view& scale = *t.scale;
    if (!whole_blocks(first, count, in, scale.block_cols)) return cut_blocks(t, false, first, count, scale.block_cols);
    // The scale's block columns [first / bc, ceil((first + count) / bc)) of every block row.
    const int64_t scale_rows = (out + scale.block_rows - 1) / scale.block_rows;
    const int64_t scale_cols = (in + scale.block_cols - 1) / scale.block_cols;
    const int64_t kept_first = first / scale.block_cols;
    const int64_t kept = (first + count + scale.block_cols - 1) / scale.block_cols - kept_first;
    const size_t es = dtype_size(scale.dtype);
    std::byte* dst = allocate(static_cast<size_t>(scale_rows * kept) * es);
    for (int64_t r = 0; r < scale_rows; ++r)
      std::memcpy(dst + static_cast<size_t>(r * kept) * es, scale.data + static_cast<size_t>(r * scale_cols + kept_first) * es,
                  static_cast<size_t>(kept) * es);
    sub.scale->data = dst;
  }
  const size_t es = dtype_size(t.dtype);
  std::byte* dst = allocate(static_cast<size_t>(out * count) * es);
  for (int64_t r = 0; r < out; ++r)
    std::memcpy(dst + static_cast<size_t>(r * count) * es, t.data + static_cast<size_t>(r * in + first) * es,
                static_cast<size_t>(count) * es);
  sub.data = dst;
  return sub;
}

tensor_view view_cutter::generated_columns(const tensor_view& t, int64_t first, int64_t count) {
  const dummy_fill& f = *t.dummy;
  const int64_t out = t.shape[0], in = t.shape[1];
  auto* dst = reinterpret_cast<uint16_t*>(allocate(static_cast<size_t>(out * count) * sizeof(uint16_t)));
  for (int64_t r = 0; r < out; ++r)
    for (int64_t c = 0; c < count; ++c)
      dst[r * count + c] = dummy_bf16_bits(f.seed, f.tensor_id, f.first + static_cast<uint64_t>(r * in + first + c), f.ones);
  tensor_view sub = t;
  sub.dummy.reset();
  sub.dtype = st_dtype::bf16;
  sub.data = reinterpret_cast<const std::byte*>(dst);
  sub.shape[1] = count;
  return sub;
}

tensor_view view_cutter::cut_blocks(const tensor_view& t, bool by_rows, int64_t first, int64_t count, int64_t block) {
  if (cut_ == block_cut::refuse) {
    failed_ = make_error(
        error_code::unsupported,
        fmt::format("--tensor-parallel-size {}: shard {} would hold {} [{}, {}) of {} ({} {} in {}), which cuts "
                    "its FP8 scale blocks of {} {}; a shard holds whole blocks of a block-scaled weight (as vLLM "
                    "requires), so choose a size whose slices are multiples of {}",
                    plan_.size(), shard_, by_rows ? "rows" : "columns", first, first + count, t.name,
                    by_rows ? t.shape[0] : t.shape[1], by_rows ? "rows" : "columns", t.file, block,
                    by_rows ? "rows" : "columns", block));
    return {};
  }
  const std::vector<float> full = weight_store::to_f32(t);
  const int64_t out = t.shape[0], in = t.shape[1];
  tensor_view sub = t;
  sub.scale.reset();
  sub.dtype = st_dtype::f32;
  (by_rows ? sub.shape[0] : sub.shape[1]) = count;
  auto* dst = reinterpret_cast<float*>(allocate(sub.num_bytes()));
  if (by_rows)
    std::memcpy(dst, full.data() + first * in, static_cast<size_t>(count * in) * sizeof(float));
  else
    for (int64_t r = 0; r < out; ++r)
      std::memcpy(dst + r * count, full.data() + r * in + first, static_cast<size_t>(count) * sizeof(float));
  sub.data = reinterpret_cast<const std::byte*>(dst);
  return sub;
}

mlp_views cut_mlp(view_cutter& cut, const mlp_views& m, shard_slice inter) {
  return {cut.rows(m.gate_proj, inter, 1), cut.rows(m.up_proj, inter, 1), cut.columns(m.down_proj, inter, 1)};
}

mla_views cut_mla(view_cutter& cut, const mla_views& v, const mla_config& m, shard_slice heads) {
  const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim, kv = m.qk_nope_head_dim + m.v_head_dim;
  mla_views o = v;   // the latent projections and their norms are every head's: whole
  o.q_proj = cut.rows(v.q_proj, heads, qk);
  o.q_b_proj = cut.rows(v.q_b_proj, heads, qk);
  o.kv_b_proj = cut.rows(v.kv_b_proj, heads, kv);
  return o;
}

moe_views cut_moe(view_cutter& cut, const moe_views& m, const shard_plan& plan, int64_t shard) {
  moe_views o;
  o.router = m.router;
  const shard_slice held = plan.experts(shard);
  o.first_expert = m.first_expert + held.begin;
  for (int64_t e = held.begin; e < held.end; ++e)
    o.experts.push_back(cut_mlp(cut, m.experts[static_cast<size_t>(e)], plan.expert_intermediate(shard)));
  if (m.shared) o.shared = cut_mlp(cut, *m.shared, plan.shared_expert_intermediate(shard));
  return o;
}

layer_views cut_layer(view_cutter& cut, const layer_views& l, const shard_plan& plan, int64_t shard) {
  const model_config& cfg = plan.config();
  const shard_slice q = plan.q_heads(shard), kv = plan.kv_heads(shard);
  const int64_t hd = cfg.head_dim;
  layer_views o = l;   // norms whole
  if (l.mla) {
    o.mla = cut_mla(cut, *l.mla, *cfg.mla, q);
    o.o_proj = cut.columns(l.o_proj, q, cfg.mla->v_head_dim);
  } else {
    o.q_proj = cut.rows(l.q_proj, q, hd);
    o.k_proj = cut.rows(l.k_proj, kv, hd);
    o.v_proj = cut.rows(l.v_proj, kv, hd);
    o.o_proj = cut.columns(l.o_proj, q, hd);
    o.q_bias = cut.rows(l.q_bias, q, hd);
    o.k_bias = cut.rows(l.k_bias, kv, hd);
    o.v_bias = cut.rows(l.v_bias, kv, hd);
  }
  if (!plan.holds_row_bias(shard)) o.o_bias.reset();
  if (l.moe) {
    o.moe = cut_moe(cut, *l.moe, plan, shard);
  } else {
    const mlp_views m = cut_mlp(cut, {l.gate_proj, l.up_proj, l.down_proj}, plan.intermediate(shard));
    o.gate_proj = m.gate_proj;
    o.up_proj = m.up_proj;
    o.down_proj = m.down_proj;
  }
  return o;
}

}  // namespace

uint64_t shard_weight_views::total_bytes() const {
  uint64_t bytes = 0;
  auto add = [&](const tensor_view& t) {
    if (t.data) bytes += t.num_bytes();
  };
  auto add_opt = [&](const std::optional<tensor_view>& t) {
    if (t) add(*t);
  };
  auto add_mlp = [&](const mlp_views& m) {
    add(m.gate_proj);
    add(m.up_proj);
    add(m.down_proj);
  };
  add(views.embed_tokens);
  for (const auto& l : views.layers) {
    for (const tensor_view* t : {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.post_norm}) add(*t);
    for (const auto* t : {&l.q_bias, &l.k_bias, &l.v_bias, &l.o_bias, &l.q_norm, &l.k_norm}) add_opt(*t);
    add_mlp({l.gate_proj, l.up_proj, l.down_proj});
    if (l.mla) {
      for (const auto* t : {&l.mla->q_proj, &l.mla->q_a_proj, &l.mla->q_a_bias, &l.mla->q_a_norm, &l.mla->q_b_proj,
                            &l.mla->kv_a_bias})
        add_opt(*t);
      for (const tensor_view* t : {&l.mla->kv_a_proj, &l.mla->kv_a_norm, &l.mla->kv_b_proj}) add(*t);
    }
    if (l.moe) {
      add(l.moe->router);
      for (const auto& e : l.moe->experts) add_mlp(e);
      if (l.moe->shared) add_mlp(*l.moe->shared);
    }
  }
  add(views.final_norm);
  if (!views.lm_head_tied) add(views.lm_head);
  return bytes;
}

result<shard_weight_views> cut_shard_views(const model_weight_views& v, const shard_plan& plan, int64_t shard,
                                           block_cut cut) {
  view_cutter cutter(plan, shard, cut);
  const shard_slice vocab = plan.vocab(shard);
  shard_weight_views out;
  out.views.embed_tokens = cutter.rows(v.embed_tokens, vocab, 1);
  for (const auto& l : v.layers) out.views.layers.push_back(cut_layer(cutter, l, plan, shard));
  out.views.final_norm = v.final_norm;
  out.views.lm_head_tied = v.lm_head_tied;
  out.views.lm_head = v.lm_head_tied ? out.views.embed_tokens : cutter.rows(v.lm_head, vocab, 1);
  if (cutter.failed()) return *cutter.failed();
  out.owned = cutter.take_owned();
  return out;
}

}  // namespace actorserve::gpu
