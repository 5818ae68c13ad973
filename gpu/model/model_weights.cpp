#include "gpu/model/model_weights.hpp"

#include <fmt/format.h>

namespace actorserve::gpu {
namespace {

/// Binds tensors with the first error kept; later lookups after an error are skipped.
class binder {
 public:
  explicit binder(const weight_store& store) : store_(store) {}
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
  const std::optional<error>& err() const { return err_; }

 private:
  const weight_store& store_;
  std::optional<error> err_;
};

}  // namespace

result<model_weight_views> bind_weight_views(const weight_store& store, const model_config& cfg) {
  binder b(store);
  const int64_t h = cfg.hidden_size, q = cfg.num_heads * cfg.head_dim, kv = cfg.num_kv_heads * cfg.head_dim;
  const int64_t inter = cfg.intermediate_size, vocab = cfg.vocab_size;
  model_weight_views w;
  w.embed_tokens = b.need("model.embed_tokens.weight", {vocab, h});
  for (int64_t i = 0; i < cfg.num_layers && !b.err(); ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    layer_views l;
    l.input_norm = b.need(p + "input_layernorm.weight", {h});
    l.q_proj = b.need(p + "self_attn.q_proj.weight", {q, h});
    l.k_proj = b.need(p + "self_attn.k_proj.weight", {kv, h});
    l.v_proj = b.need(p + "self_attn.v_proj.weight", {kv, h});
    l.o_proj = b.need(p + "self_attn.o_proj.weight", {h, q});
    l.q_bias = b.maybe(cfg.qkv_bias, p + "self_attn.q_proj.bias", {q});
    l.k_bias = b.maybe(cfg.qkv_bias, p + "self_attn.k_proj.bias", {kv});
    l.v_bias = b.maybe(cfg.qkv_bias, p + "self_attn.v_proj.bias", {kv});
    l.o_bias = b.maybe(cfg.o_bias, p + "self_attn.o_proj.bias", {h});
    l.post_norm = b.need(p + "post_attention_layernorm.weight", {h});
    l.gate_proj = b.need(p + "mlp.gate_proj.weight", {inter, h});
    l.up_proj = b.need(p + "mlp.up_proj.weight", {inter, h});
    l.down_proj = b.need(p + "mlp.down_proj.weight", {h, inter});
    w.layers.push_back(std::move(l));
  }
  w.final_norm = b.need("model.norm.weight", {h});
  w.lm_head_tied = cfg.tie_word_embeddings;
  w.lm_head = w.lm_head_tied ? w.embed_tokens : b.need("lm_head.weight", {vocab, h});
  if (b.err()) return *b.err();
  return w;
}

result<model_files> open_model_files(const std::string& model_dir) {
  auto cfg = load_model_config(model_dir);
  if (!cfg) return cfg.err();
  auto store = weight_store::open_dir(model_dir);
  if (!store) return store.err();
  auto views = bind_weight_views(store.value(), cfg.value());
  if (!views) return views.err();
  return model_files{std::move(cfg).value(), std::move(store).value(), std::move(views).value()};
}

model_weights_f32 upcast_weights(const model_weight_views& v) {
  auto f = [](const tensor_view& t) { return weight_store::to_f32(t); };
  auto fo = [&](const std::optional<tensor_view>& t) { return t ? f(*t) : std::vector<float>{}; };
  model_weights_f32 w;
  w.embed_tokens = f(v.embed_tokens);
  for (const auto& l : v.layers) {
    layer_weights_f32 o;
    o.input_norm = f(l.input_norm);
    o.q_proj = f(l.q_proj);
    o.k_proj = f(l.k_proj);
    o.v_proj = f(l.v_proj);
    o.o_proj = f(l.o_proj);
    o.q_bias = fo(l.q_bias);
    o.k_bias = fo(l.k_bias);
    o.v_bias = fo(l.v_bias);
    o.o_bias = fo(l.o_bias);
    o.post_norm = f(l.post_norm);
    o.gate_proj = f(l.gate_proj);
    o.up_proj = f(l.up_proj);
    o.down_proj = f(l.down_proj);
    w.layers.push_back(std::move(o));
  }
  w.final_norm = f(v.final_norm);
  if (!v.lm_head_tied) w.lm_head = f(v.lm_head);
  return w;
}

}  // namespace actorserve::gpu
