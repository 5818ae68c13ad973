#include "gpu/model/model_weights.hpp"

#include <fmt/format.h>

namespace actorserve::gpu {
namespace {

/// Binds tensors with the first error kept; later lookups after an error are skipped.
class binder {
 public:
  binder(const weight_store& store, const std::optional<quantization_config>& quant) : store_(store), quant_(quant) {}
  tensor_view need(const std::string& name, std::vector<int64_t> shape) {
    if (err_) return {};
    auto v = store_.get(name, shape);
    if (!v) {
      err_ = v.err();
      return {};
    }
    return std::move(v).value();
  }
  std::optional<tensor_view> maybe(bool wanted, const std::string& name, std::vector<int64_t> shape) {
    if (!wanted) return std::nullopt;
    return need(name, std::move(shape));
  }
  /// A linear layer's weight "`module`.weight": F8_E4M3 with its scale where quantization_config
  /// quantizes the module (its group's scheme; its input_scale checked when that scheme's
  /// activations are static), else as stored.
  tensor_view linear(const std::string& module, std::vector<int64_t> shape) {
    if (err_) return {};
    const fp8_scheme* scheme = nullptr;
    if (quant_) {
      auto s = quant_->scheme_for(module);
      if (!s) {
        err_ = s.err();
        return {};
      }
      scheme = s.value();
    }
    if (!scheme) {
      auto it = store_.get(module + ".weight", shape);
      if (!it && quant_ && store_.contains(module + ".weight")) {
        err_ = make_error(it.err().code, fmt::format("{} (quantization_config's ignore list names the module or no "
                                                     "config group targets it, so it stays unquantized)",
                                                     it.err().message));
        return {};
      }
      return keep(std::move(it));
    }
    const fp8_scheme& q = *scheme;
    const fp8_scale_kind kind = q.weights == fp8_weight_granularity::per_tensor    ? fp8_scale_kind::per_tensor
                                : q.weights == fp8_weight_granularity::per_channel ? fp8_scale_kind::per_channel
                                                                                   : fp8_scale_kind::block;
    auto v = store_.get_fp8(module + ".weight", shape, module + "." + quant_->weight_scale_name, kind, q.block_rows,
                            q.block_cols);
    if (v && q.activations == fp8_activation_scheme::static_scale) {
      // NOTE: the CPU reference computes activations in fp32; the static scale is checked, not applied.
      if (auto s = store_.get_scalar(module + ".input_scale"); !s) {
        err_ = s.err();
        return {};
      }
    }
    return keep(std::move(v));
  }
  const std::optional<error>& err() const { return err_; }

 private:
  tensor_view keep(result<tensor_view> v) {
    if (!v) {
      err_ = v.err();
      return {};
    }
    return std::move(v).value();
  }
  const weight_store& store_;
  const std::optional<quantization_config>& quant_;
  std::optional<error> err_;
};

/// Tensor names of an MLP: Llama's gate/up/down, or Mixtral's w1/w3/w2.
struct mlp_names {
  const char* gate;
  const char* up;
  const char* down;
};
constexpr mlp_names llama_mlp{"gate_proj", "up_proj", "down_proj"};
constexpr mlp_names mixtral_mlp{"w1", "w3", "w2"};

mlp_views bind_mlp(binder& b, const std::string& prefix, const mlp_names& names, int64_t hidden, int64_t inter) {
  mlp_views m;
  m.gate_proj = b.linear(prefix + names.gate, {inter, hidden});
  m.up_proj = b.linear(prefix + names.up, {inter, hidden});
  m.down_proj = b.linear(prefix + names.down, {hidden, inter});
  return m;
}

/// A sparse layer: Mixtral's block_sparse_moe.{gate, experts.E.w1/w3/w2}, or Qwen3-MoE's and
/// DeepSeek-V2's mlp.{gate, experts.E.*_proj, shared_experts.*_proj}.
moe_views bind_moe(binder& b, const std::string& layer_prefix, const model_config& cfg) {
  const moe_config& m = *cfg.moe;
  const bool mixtral = cfg.architecture == "MixtralForCausalLM";
  const std::string p = layer_prefix + (mixtral ? "block_sparse_moe." : "mlp.");
  moe_views v;
  v.router = b.need(p + "gate.weight", {m.num_experts, cfg.hidden_size});
  for (int64_t e = 0; e < m.num_experts && !b.err(); ++e)
    v.experts.push_back(bind_mlp(b, fmt::format("{}experts.{}.", p, e), mixtral ? mixtral_mlp : llama_mlp,
                                 cfg.hidden_size, m.expert_intermediate_size));
  if (m.num_shared_experts > 0)
    v.shared = bind_mlp(b, p + "shared_experts.", llama_mlp, cfg.hidden_size,
                        m.expert_intermediate_size * m.num_shared_experts);
  return v;
}

/// DeepSeek-V2's self_attn: q_proj or q_a_proj + q_a_layernorm + q_b_proj, kv_a_proj_with_mqa,
/// kv_a_layernorm, kv_b_proj (o_proj is bound with the other layers').
mla_views bind_mla(binder& b, const std::string& p, const model_config& cfg) {
  const mla_config& m = *cfg.mla;
  const int64_t h = cfg.hidden_size, q = cfg.num_heads * m.qk_head_dim();
  const bool lora = m.q_lora_rank > 0;
  mla_views v;
  if (!lora) v.q_proj = b.linear(p + "q_proj", {q, h});
  if (lora) v.q_a_proj = b.linear(p + "q_a_proj", {m.q_lora_rank, h});
  v.q_a_bias = b.maybe(lora && m.down_proj_bias, p + "q_a_proj.bias", {m.q_lora_rank});
  v.q_a_norm = b.maybe(lora, p + "q_a_layernorm.weight", {m.q_lora_rank});
  if (lora) v.q_b_proj = b.linear(p + "q_b_proj", {q, m.q_lora_rank});
  v.kv_a_proj = b.linear(p + "kv_a_proj_with_mqa", {m.cache_dim(), h});
  v.kv_a_bias = b.maybe(m.down_proj_bias, p + "kv_a_proj_with_mqa.bias", {m.cache_dim()});
  v.kv_a_norm = b.need(p + "kv_a_layernorm.weight", {m.kv_lora_rank});
  v.kv_b_proj = b.linear(p + "kv_b_proj", {cfg.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank});
  return v;
}

}  // namespace

result<model_weight_views> bind_weight_views(const weight_store& store, const model_config& cfg) {
  binder b(store, cfg.quantization);
  const int64_t h = cfg.hidden_size, q = cfg.num_heads * cfg.head_dim, kv = cfg.num_kv_heads * cfg.head_dim;
  const int64_t inter = cfg.intermediate_size, vocab = cfg.vocab_size;
  model_weight_views w;
  w.embed_tokens = b.need("model.embed_tokens.weight", {vocab, h});
  for (int64_t i = 0; i < cfg.num_layers && !b.err(); ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    layer_views l;
    l.input_norm = b.need(p + "input_layernorm.weight", {h});
    if (cfg.mla) {
      l.mla = bind_mla(b, p + "self_attn.", cfg);
      l.o_proj = b.linear(p + "self_attn.o_proj", {h, cfg.num_heads * cfg.mla->v_head_dim});
    } else {
      l.q_proj = b.linear(p + "self_attn.q_proj", {q, h});
      l.k_proj = b.linear(p + "self_attn.k_proj", {kv, h});
      l.v_proj = b.linear(p + "self_attn.v_proj", {kv, h});
      l.o_proj = b.linear(p + "self_attn.o_proj", {h, q});
    }
    l.q_bias = b.maybe(cfg.qkv_bias, p + "self_attn.q_proj.bias", {q});
    l.k_bias = b.maybe(cfg.qkv_bias, p + "self_attn.k_proj.bias", {kv});
    l.v_bias = b.maybe(cfg.qkv_bias, p + "self_attn.v_proj.bias", {kv});
    l.o_bias = b.maybe(cfg.o_bias, p + "self_attn.o_proj.bias", {h});
    l.q_norm = b.maybe(cfg.qk_norm, p + "self_attn.q_norm.weight", {cfg.head_dim});
    l.k_norm = b.maybe(cfg.qk_norm, p + "self_attn.k_norm.weight", {cfg.head_dim});
    l.post_norm = b.need(p + "post_attention_layernorm.weight", {h});
    if (cfg.is_sparse_layer(i)) {
      l.moe = bind_moe(b, p, cfg);
    } else {
      mlp_views mlp = bind_mlp(b, p + "mlp.", llama_mlp, h, inter);
      l.gate_proj = mlp.gate_proj;
      l.up_proj = mlp.up_proj;
      l.down_proj = mlp.down_proj;
    }
    w.layers.push_back(std::move(l));
  }
  w.final_norm = b.need("model.norm.weight", {h});
  w.lm_head_tied = cfg.tie_word_embeddings;
  w.lm_head = w.lm_head_tied ? w.embed_tokens : b.need("lm_head.weight", {vocab, h});
  if (b.err()) return *b.err();
  return w;
}

result<model_files> open_model_files(const std::string& model_dir, const weight_source& source) {
  auto cfg = load_model_config(model_dir);
  if (!cfg) return cfg.err();
  auto store = source.dummy ? result<weight_store>(weight_store::dummy(source.seed)) : weight_store::open_dir(model_dir);
  if (!store) return store.err();
  auto views = bind_weight_views(store.value(), cfg.value());
  if (!views) return views.err();
  return model_files{std::move(cfg).value(), std::move(store).value(), std::move(views).value()};
}

namespace {

/// An unbound view (a latent-attention layer's q/k/v_proj) upcasts to nothing.
std::vector<float> to_f32(const tensor_view& t) { return t.data ? weight_store::to_f32(t) : std::vector<float>{}; }
std::vector<float> to_f32(const std::optional<tensor_view>& t) { return t ? to_f32(*t) : std::vector<float>{}; }

mlp_weights_f32 upcast_mlp(const mlp_views& m) { return {to_f32(m.gate_proj), to_f32(m.up_proj), to_f32(m.down_proj)}; }

mla_weights_f32 upcast_mla(const mla_views& v) {
  return {to_f32(v.q_proj),    to_f32(v.q_a_proj),  to_f32(v.q_a_bias),  to_f32(v.q_a_norm), to_f32(v.q_b_proj),
          to_f32(v.kv_a_proj), to_f32(v.kv_a_bias), to_f32(v.kv_a_norm), to_f32(v.kv_b_proj)};
}

moe_weights_f32 upcast_moe(const moe_views& v) {
  moe_weights_f32 m;
  m.router = to_f32(v.router);
  m.first_expert = v.first_expert;
  for (const auto& e : v.experts) m.experts.push_back(upcast_mlp(e));
  if (v.shared) m.shared = upcast_mlp(*v.shared);
  return m;
}

}  // namespace

model_weights_f32 upcast_weights(const model_weight_views& v) {
  model_weights_f32 w;
  w.embed_tokens = to_f32(v.embed_tokens);
  for (const auto& l : v.layers) {
    layer_weights_f32 o;
    o.input_norm = to_f32(l.input_norm);
    o.q_proj = to_f32(l.q_proj);
    o.k_proj = to_f32(l.k_proj);
    o.v_proj = to_f32(l.v_proj);
    o.o_proj = to_f32(l.o_proj);
    if (l.mla) o.mla = upcast_mla(*l.mla);
    o.q_bias = to_f32(l.q_bias);
    o.k_bias = to_f32(l.k_bias);
    o.v_bias = to_f32(l.v_bias);
    o.o_bias = to_f32(l.o_bias);
    o.q_norm = to_f32(l.q_norm);
    o.k_norm = to_f32(l.k_norm);
    o.post_norm = to_f32(l.post_norm);
    if (l.moe) {
      o.moe = upcast_moe(*l.moe);
    } else {
      o.gate_proj = to_f32(l.gate_proj);
      o.up_proj = to_f32(l.up_proj);
      o.down_proj = to_f32(l.down_proj);
    }
    w.layers.push_back(std::move(o));
  }
  w.final_norm = to_f32(v.final_norm);
  if (!v.lm_head_tied) w.lm_head = to_f32(v.lm_head);
  return w;
}

namespace {

void quantize_view_weight(const tensor_view& v, std::vector<float>& w) {
  if (v.data && !w.empty()) quantize_rows_e4m3(w.data(), v.shape[0], v.shape[1]);
}
void quantize_view_weight(const std::optional<tensor_view>& v, std::vector<float>& w) {
  if (v) quantize_view_weight(*v, w);
}
void quantize_mlp(const mlp_views& v, mlp_weights_f32& w) {
  quantize_view_weight(v.gate_proj, w.gate_proj);
  quantize_view_weight(v.up_proj, w.up_proj);
  quantize_view_weight(v.down_proj, w.down_proj);
}

}  // namespace

void quantize_linear_weights_e4m3(const model_weight_views& v, model_weights_f32& w) {
  for (size_t i = 0; i < v.layers.size(); ++i) {
    const layer_views& lv = v.layers[i];
    layer_weights_f32& lw = w.layers[i];
    quantize_view_weight(lv.q_proj, lw.q_proj);
    quantize_view_weight(lv.k_proj, lw.k_proj);
    quantize_view_weight(lv.v_proj, lw.v_proj);
    quantize_view_weight(lv.o_proj, lw.o_proj);
    if (lv.mla && lw.mla) {
      quantize_view_weight(lv.mla->q_proj, lw.mla->q_proj);
      quantize_view_weight(lv.mla->q_a_proj, lw.mla->q_a_proj);
      quantize_view_weight(lv.mla->q_b_proj, lw.mla->q_b_proj);
      quantize_view_weight(lv.mla->kv_a_proj, lw.mla->kv_a_proj);
      quantize_view_weight(lv.mla->kv_b_proj, lw.mla->kv_b_proj);
    }
    quantize_view_weight(lv.gate_proj, lw.gate_proj);
    quantize_view_weight(lv.up_proj, lw.up_proj);
    quantize_view_weight(lv.down_proj, lw.down_proj);
    if (lv.moe && lw.moe) {
      for (size_t e = 0; e < lv.moe->experts.size(); ++e) quantize_mlp(lv.moe->experts[e], lw.moe->experts[e]);
      if (lv.moe->shared) quantize_mlp(*lv.moe->shared, lw.moe->shared);
    }
  }
}

}  // namespace actorserve::gpu
