#include "bench/common/random_model.hpp"

#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/common/safetensors_writer.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::bench {
namespace {

namespace fs = std::filesystem;

model_shape llama(int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                  int64_t max_pos, double rope_theta) {
  model_shape s;
  s.vocab_size = vocab;
  s.hidden_size = hidden;
  s.intermediate_size = inter;
  s.num_layers = layers;
  s.num_heads = heads;
  s.num_kv_heads = kv;
  s.max_position_embeddings = max_pos;
  s.rope_theta = rope_theta;
  return s;
}

model_shape mixtral(model_shape s, int64_t experts, int64_t top_k) {
  s.architecture = "MixtralForCausalLM";
  s.model_type = "mixtral";
  s.num_experts = experts;
  s.num_experts_per_tok = top_k;
  return s;
}

model_shape qwen3_moe(model_shape s, int64_t head_dim, int64_t experts, int64_t top_k, int64_t expert_inter) {
  s.architecture = "Qwen3MoeForCausalLM";
  s.model_type = "qwen3_moe";
  s.head_dim = head_dim;
  s.rms_norm_eps = 1e-6;
  s.num_experts = experts;
  s.num_experts_per_tok = top_k;
  s.moe_intermediate_size = expert_inter;
  return s;
}

model_shape deepseek(model_shape s, int64_t experts, int64_t top_k, int64_t expert_inter, deepseek_shape d) {
  s.architecture = "DeepseekV2ForCausalLM";
  s.model_type = "deepseek_v2";
  s.rms_norm_eps = 1e-6;
  s.num_experts = experts;
  s.num_experts_per_tok = top_k;
  s.moe_intermediate_size = expert_inter;
  s.deepseek = std::move(d);
  return s;
}

bool is_qwen3(const model_shape& s) {
  return s.architecture == "Qwen3ForCausalLM" || s.architecture == "Qwen3MoeForCausalLM";
}
bool is_mixtral(const model_shape& s) { return s.architecture == "MixtralForCausalLM"; }
int64_t expert_intermediate(const model_shape& s) {
  return is_mixtral(s) ? s.intermediate_size : s.moe_intermediate_size;
}

/// One sparse layer's router and experts, by HF's per-expert names.
void add_experts(const model_shape& s, const std::string& layer, std::vector<tensor_spec>& t) {
  const int64_t h = s.hidden_size, inter = expert_intermediate(s);
  const bool mixtral = is_mixtral(s);
  const std::string m = layer + (mixtral ? "block_sparse_moe." : "mlp.");
  t.push_back({m + "gate.weight", {s.num_experts, h}, fill_kind::normal});
  for (int64_t e = 0; e < s.num_experts; ++e) {
    const std::string p = fmt::format("{}experts.{}.", m, e);
    t.push_back({p + (mixtral ? "w1" : "gate_proj") + ".weight", {inter, h}, fill_kind::normal});
    t.push_back({p + (mixtral ? "w3" : "up_proj") + ".weight", {inter, h}, fill_kind::normal});
    t.push_back({p + (mixtral ? "w2" : "down_proj") + ".weight", {h, inter}, fill_kind::normal});
  }
}

/// A SwiGLU MLP's three projections under `prefix`.
void add_mlp(std::vector<tensor_spec>& t, const std::string& prefix, int64_t hidden, int64_t inter) {
  t.push_back({prefix + "gate_proj.weight", {inter, hidden}, fill_kind::normal});
  t.push_back({prefix + "up_proj.weight", {inter, hidden}, fill_kind::normal});
  t.push_back({prefix + "down_proj.weight", {hidden, inter}, fill_kind::normal});
}

/// DeepSeek-V2's layer: latent attention, then a dense MLP, or the router and experts (Qwen3-MoE's
/// names) plus the shared experts.
void add_deepseek_layer(const model_shape& s, int64_t layer, std::vector<tensor_spec>& t) {
  const deepseek_shape& d = *s.deepseek;
  const int64_t h = s.hidden_size, q = s.num_heads * (d.qk_nope_head_dim + d.qk_rope_head_dim);
  const std::string p = fmt::format("model.layers.{}.", layer);
  t.push_back({p + "input_layernorm.weight", {h}, fill_kind::ones});
  if (d.q_lora_rank > 0) {
    t.push_back({p + "self_attn.q_a_proj.weight", {d.q_lora_rank, h}, fill_kind::normal});
    t.push_back({p + "self_attn.q_a_layernorm.weight", {d.q_lora_rank}, fill_kind::ones});
    t.push_back({p + "self_attn.q_b_proj.weight", {q, d.q_lora_rank}, fill_kind::normal});
  } else {
    t.push_back({p + "self_attn.q_proj.weight", {q, h}, fill_kind::normal});
  }
  t.push_back({p + "self_attn.kv_a_proj_with_mqa.weight", {d.kv_lora_rank + d.qk_rope_head_dim, h}, fill_kind::normal});
  t.push_back({p + "self_attn.kv_a_layernorm.weight", {d.kv_lora_rank}, fill_kind::ones});
  t.push_back({p + "self_attn.kv_b_proj.weight",
               {s.num_heads * (d.qk_nope_head_dim + d.v_head_dim), d.kv_lora_rank},
               fill_kind::normal});
  t.push_back({p + "self_attn.o_proj.weight", {h, s.num_heads * d.v_head_dim}, fill_kind::normal});
  t.push_back({p + "post_attention_layernorm.weight", {h}, fill_kind::ones});
  if (!s.is_sparse_layer(layer)) {
    add_mlp(t, p + "mlp.", h, s.intermediate_size);
    return;
  }
  add_experts(s, p, t);
  if (d.n_shared_experts > 0) add_mlp(t, p + "mlp.shared_experts.", h, s.moe_intermediate_size * d.n_shared_experts);
}

std::vector<tensor_spec> tensor_list(const model_shape& s) {
  const int64_t h = s.hidden_size, q = s.num_heads * s.effective_head_dim(), kv = s.num_kv_heads * s.effective_head_dim();
  const bool qkv_bias = s.architecture == "Qwen2ForCausalLM";
  std::vector<tensor_spec> t;
  t.push_back({"model.embed_tokens.weight", {s.vocab_size, h}, fill_kind::normal});
  for (int64_t i = 0; i < s.num_layers; ++i) {
    if (s.deepseek) {
      add_deepseek_layer(s, i, t);
      continue;
    }
    const std::string p = fmt::format("model.layers.{}.", i);
    t.push_back({p + "input_layernorm.weight", {h}, fill_kind::ones});
    t.push_back({p + "self_attn.q_proj.weight", {q, h}, fill_kind::normal});
    t.push_back({p + "self_attn.k_proj.weight", {kv, h}, fill_kind::normal});
    t.push_back({p + "self_attn.v_proj.weight", {kv, h}, fill_kind::normal});
    if (qkv_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {q}, fill_kind::normal});
      t.push_back({p + "self_attn.k_proj.bias", {kv}, fill_kind::normal});
      t.push_back({p + "self_attn.v_proj.bias", {kv}, fill_kind::normal});
    }
    t.push_back({p + "self_attn.o_proj.weight", {h, q}, fill_kind::normal});
    if (is_qwen3(s)) {
      t.push_back({p + "self_attn.q_norm.weight", {s.effective_head_dim()}, fill_kind::ones});
      t.push_back({p + "self_attn.k_norm.weight", {s.effective_head_dim()}, fill_kind::ones});
    }
    t.push_back({p + "post_attention_layernorm.weight", {h}, fill_kind::ones});
    if (s.is_moe()) {
      add_experts(s, p, t);
      continue;
    }
    add_mlp(t, p + "mlp.", h, s.intermediate_size);
  }
  t.push_back({"model.norm.weight", {h}, fill_kind::ones});
  if (!s.tie_word_embeddings) t.push_back({"lm_head.weight", {s.vocab_size, h}, fill_kind::normal});
  return t;
}

std::string id_json(const std::vector<int32_t>& ids) {
  if (ids.empty()) return "null";
  if (ids.size() == 1) return std::to_string(ids[0]);
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", ids[i]);
  return out + "]";
}

result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(error_code::not_found, fmt::format("{}: cannot open file", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

status write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return make_error(error_code::internal, fmt::format("{}: cannot write file", path));
  return {};
}

/// Prefix that makes a synthetic token decode as " tokN" in the tokenizer's pipeline.
std::string space_marker(const protocol::tokenizer& tok) {
  if (tok.token_to_id("\xC4\xA0")) return "\xC4\xA0";            // byte-level "Ġ"
  if (tok.token_to_id("\xE2\x96\x81")) return "\xE2\x96\x81";    // sentencepiece "▁"
  return " ";
}

/// Inserts entries for ids [first, vocab) at the start of the model's "vocab" object.
result<std::string> extend_vocab(std::string json, const protocol::tokenizer& tok, int64_t first, int64_t vocab) {
  size_t pos = 0;
  for (;;) {
    pos = json.find("\"vocab\"", pos);
    if (pos == std::string::npos)
      return make_error(error_code::unsupported, "tokenizer.json: no model.vocab object to extend");
    size_t p = pos + 7;
    while (p < json.size() && std::isspace(static_cast<unsigned char>(json[p]))) ++p;
    if (p < json.size() && json[p] == ':') {
      ++p;
      while (p < json.size() && std::isspace(static_cast<unsigned char>(json[p]))) ++p;
      if (p < json.size() && json[p] == '{') {
        pos = p + 1;
        break;
      }
    }
    pos = p;
  }
  size_t after = pos;
  while (after < json.size() && std::isspace(static_cast<unsigned char>(json[after]))) ++after;
  const bool empty = after < json.size() && json[after] == '}';
  const std::string marker = space_marker(tok);
  std::string add;
  add.reserve(static_cast<size_t>(vocab - first) * 20);
  for (int64_t id = first; id < vocab; ++id) {
    std::string name = fmt::format("{}tok{}", marker, id);
    while (tok.token_to_id(name)) name += "_";
    add += fmt::format("\"{}\":{}{}", name, id, (id + 1 < vocab || !empty) ? "," : "");
  }
  json.insert(pos, add);
  return json;
}

/// GPT-2's byte-to-character map of byte-level BPE, as UTF-8.
std::string byte_level_char(int b) {
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  if (out == "\"" || out == "\\") out = "\\" + out;
  return out;
}

/// A byte-level BPE tokenizer without merges: 256 byte tokens, then BOS and EOS (ids 256, 257).
std::string synthetic_tokenizer_json() {
  std::string vocab;
  for (int b = 0; b < 256; ++b) vocab += fmt::format("{}\"{}\":{}", b ? "," : "", byte_level_char(b), b);
  vocab += R"(,"<|begin_of_text|>":256,"<|end_of_text|>":257)";
  auto special = [](int id, const char* text) {
    return fmt::format(R"({{"id":{},"content":"{}","single_word":false,"lstrip":false,"rstrip":false,)"
                       R"("normalized":false,"special":true}})",
                       id, text);
  };
  return fmt::format(
      R"({{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{},{}],"normalizer":null,)"
      R"("pre_tokenizer":{{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}},)"
      R"("post_processor":null,"decoder":{{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,)"
      R"("use_regex":true}},"model":{{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,)"
      R"("end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"vocab":{{{}}},"merges":[]}}}})",
      special(256, "<|begin_of_text|>"), special(257, "<|end_of_text|>"), vocab);
}

}  // namespace

int64_t model_shape::num_parameters() const {
  int64_t n = 0;
  for (const auto& t : tensor_list(*this)) n += t.num_bytes() / 2;
  return n;
}

int64_t model_shape::num_active_parameters() const {
  const int64_t idle_experts = is_moe() ? num_experts - num_experts_per_tok : 0;
  int64_t sparse_layers = 0;
  for (int64_t i = 0; i < num_layers; ++i) sparse_layers += is_sparse_layer(i) ? 1 : 0;
  return num_parameters() - sparse_layers * idle_experts * 3 * hidden_size * expert_intermediate(*this);
}

std::vector<std::string> preset_names() {
  return {"llama-2-7b", "llama-2-13b", "llama-3-8b", "llama-3-70b", "mistral-7b", "qwen2-7b", "mixtral-8x7b", "qwen3-30b-a3b",
          "deepseek-v2-lite", "tiny", "tiny-moe", "tiny-mixtral", "deepseek-tiny"};
}

result<model_shape> preset_shape(const std::string& name) {
  if (name == "llama-2-7b") return llama(32000, 4096, 11008, 32, 32, 32, 4096, 10000.0);
  if (name == "llama-2-13b") return llama(32000, 5120, 13824, 40, 40, 40, 4096, 10000.0);
  if (name == "llama-3-8b") return llama(128256, 4096, 14336, 32, 32, 8, 8192, 500000.0);
  // 70.6 B parameters (141 GB in bf16): tensor parallelism's model (docs/tensor-parallel.md);
  // written with --config-only and run with --load-format dummy where its weights do not fit a disk.
  if (name == "llama-3-70b") return llama(128256, 8192, 28672, 80, 64, 8, 8192, 500000.0);
  if (name == "mistral-7b") {
    model_shape s = llama(32000, 4096, 14336, 32, 32, 8, 32768, 10000.0);
    s.architecture = "MistralForCausalLM";
    s.model_type = "mistral";
    s.sliding_window = 4096;
    return s;
  }
  if (name == "qwen2-7b") {
    model_shape s = llama(152064, 3584, 18944, 28, 28, 4, 131072, 1000000.0);
    s.architecture = "Qwen2ForCausalLM";
    s.model_type = "qwen2";
    s.rms_norm_eps = 1e-6;
    return s;
  }
  if (name == "mixtral-8x7b") return mixtral(llama(32000, 4096, 14336, 32, 32, 8, 32768, 1000000.0), 8, 2);
  if (name == "qwen3-30b-a3b") return qwen3_moe(llama(151936, 2048, 6144, 48, 32, 4, 40960, 1000000.0), 128, 128, 8, 768);
  // DeepSeek-V2-Lite's config.json: 15.7 B parameters (31.4 GB in bf16), 2.7 B active.
  if (name == "deepseek-v2-lite") return deepseek(llama(102400, 2048, 10944, 27, 16, 16, 163840, 10000.0), 64, 6, 1408, {});
  if (name == "tiny") return llama(1024, 64, 172, 2, 4, 2, 2048, 10000.0);
  if (name == "tiny-moe") return qwen3_moe(llama(1024, 64, 128, 2, 4, 2, 2048, 1000000.0), 16, 8, 2, 32);
  if (name == "tiny-mixtral") return mixtral(llama(1024, 64, 128, 2, 4, 2, 2048, 1000000.0), 4, 2);
  if (name == "deepseek-tiny") {
    // DeepSeek-V2-Lite's structure (no q_lora, a dense first layer, shared experts, its YaRN).
    deepseek_shape d;
    d.kv_lora_rank = 32;
    d.qk_nope_head_dim = 16;
    d.qk_rope_head_dim = 8;
    d.v_head_dim = 16;
    return deepseek(llama(1024, 64, 128, 3, 4, 4, 163840, 10000.0), 8, 2, 32, d);
  }
  return make_error(error_code::invalid_argument, fmt::format("--preset: unknown preset '{}'", name));
}

namespace {

/// DeepSeek-V2's latent-attention and expert keys, as its config.json writes them.
std::string deepseek_keys(const model_shape& s) {
  const deepseek_shape& d = *s.deepseek;
  return fmt::format(
      "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"q_lora_rank\": {},\n  \"kv_lora_rank\": {},\n"
      "  \"qk_nope_head_dim\": {},\n  \"qk_rope_head_dim\": {},\n  \"v_head_dim\": {},\n"
      "  \"n_routed_experts\": {},\n  \"num_experts_per_tok\": {},\n  \"moe_intermediate_size\": {},\n"
      "  \"n_shared_experts\": {},\n  \"first_k_dense_replace\": {},\n  \"moe_layer_freq\": 1,\n"
      "  \"routed_scaling_factor\": {},\n  \"topk_method\": \"{}\",\n  \"n_group\": {},\n  \"topk_group\": {},\n"
      "  \"norm_topk_prob\": false,\n  \"scoring_func\": \"softmax\",\n",
      d.q_lora_rank > 0 ? std::to_string(d.q_lora_rank) : std::string("null"), d.kv_lora_rank, d.qk_nope_head_dim,
      d.qk_rope_head_dim, d.v_head_dim, s.num_experts, s.num_experts_per_tok, s.moe_intermediate_size,
      d.n_shared_experts, d.first_k_dense_replace, d.routed_scaling_factor, d.topk_method, d.n_group, d.topk_group);
}

/// config.json's rope_scaling: DeepSeek-V2's YaRN in the older spelling its checkpoints use, or null.
std::string rope_scaling_json(const model_shape& s) {
  if (!s.deepseek || s.deepseek->yarn_factor <= 0) return "null";
  const deepseek_shape& d = *s.deepseek;
  return fmt::format("{{\"beta_fast\": 32, \"beta_slow\": 1, \"factor\": {}, \"mscale\": {}, \"mscale_all_dim\": {}, "
                     "\"original_max_position_embeddings\": {}, \"type\": \"yarn\"}}",
                     d.yarn_factor, d.yarn_mscale, d.yarn_mscale_all_dim, d.yarn_original_max_position_embeddings);
}

/// The keys of config.json that only some architectures carry, as their transformers configs
/// write them.
std::string architecture_keys(const model_shape& s) {
  std::string extra;
  if (s.deepseek) return deepseek_keys(s);
  if (s.head_dim > 0 || is_qwen3(s)) extra += fmt::format("  \"head_dim\": {},\n", s.effective_head_dim());
  if (is_qwen3(s))
    extra += fmt::format("  \"attention_bias\": false,\n  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n"
                         "  \"max_window_layers\": {},\n",
                         s.num_layers);
  if (s.architecture == "Qwen3MoeForCausalLM")
    extra += fmt::format("  \"num_experts\": {},\n  \"num_experts_per_tok\": {},\n  \"moe_intermediate_size\": {},\n"
                         "  \"norm_topk_prob\": true,\n  \"decoder_sparse_step\": 1,\n  \"mlp_only_layers\": [],\n"
                         "  \"router_aux_loss_coef\": 0.001,\n",
                         s.num_experts, s.num_experts_per_tok, s.moe_intermediate_size);
  if (is_mixtral(s))
    extra += fmt::format("  \"num_local_experts\": {},\n  \"num_experts_per_tok\": {},\n  \"router_aux_loss_coef\": 0.02,\n"
                         "  \"router_jitter_noise\": 0.0,\n",
                         s.num_experts, s.num_experts_per_tok);
  if (s.architecture == "Qwen2ForCausalLM")
    extra += fmt::format("  \"use_sliding_window\": false,\n  \"sliding_window\": {},\n  \"max_window_layers\": {},\n",
                         s.max_position_embeddings, s.num_layers);
  else if (s.architecture == "MistralForCausalLM" || is_mixtral(s))
    extra += s.sliding_window > 0 ? fmt::format("  \"sliding_window\": {},\n", s.sliding_window)
                                  : std::string("  \"sliding_window\": null,\n");
  else if (s.architecture == "LlamaForCausalLM")
    extra += "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n  \"pretraining_tp\": 1,\n";
  return extra;
}

}  // namespace

std::string config_json(const model_shape& s, int32_t bos_id, const std::vector<int32_t>& eos_ids) {
  const std::string extra = architecture_keys(s);
  return fmt::format(
      "{{\n  \"architectures\": [\"{}\"],\n  \"model_type\": \"{}\",\n  \"attention_dropout\": 0.0,\n"
      "  \"bos_token_id\": {},\n  \"eos_token_id\": {},\n  \"hidden_act\": \"silu\",\n  \"hidden_size\": {},\n"
      "  \"initializer_range\": 0.02,\n  \"intermediate_size\": {},\n  \"max_position_embeddings\": {},\n"
      "  \"num_attention_heads\": {},\n  \"num_hidden_layers\": {},\n  \"num_key_value_heads\": {},\n{}"
      "  \"rms_norm_eps\": {},\n  \"rope_scaling\": {},\n  \"rope_theta\": {:.1f},\n  \"tie_word_embeddings\": {},\n"
      "  \"torch_dtype\": \"bfloat16\",\n  \"use_cache\": true,\n  \"vocab_size\": {}\n}}\n",
      s.architecture, s.model_type, bos_id < 0 ? std::string("null") : std::to_string(bos_id), id_json(eos_ids),
      s.hidden_size, s.intermediate_size, s.max_position_embeddings, s.num_heads, s.num_layers, s.num_kv_heads, extra,
      s.rms_norm_eps, rope_scaling_json(s), s.rope_theta, s.tie_word_embeddings ? "true" : "false", s.vocab_size);
}

result<random_model_report> write_random_model(const model_shape& shape, const random_model_options& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(opts.output_dir, ec);
  if (ec) return make_error(error_code::not_found, fmt::format("{}: cannot create directory: {}", opts.output_dir, ec.message()));
  // Tokenizer: special ids, then the copy (extended so that every model id has a token).
  const std::string tok_out = opts.output_dir + "/tokenizer.json";
  const std::string tok_in = opts.tokenizer_json.empty() ? tok_out : opts.tokenizer_json;
  if (opts.tokenizer_json.empty())
    if (auto st = write_file(tok_out, synthetic_tokenizer_json()); !st) return st.err();
  auto tok = protocol::tokenizer::from_files(tok_in, "");
  if (!tok) return tok.err();
  auto text = read_file(tok_in);
  if (!text) return text.err();
  random_model_report rep;
  rep.tokenizer_vocab = tok->vocab_size();
  if (opts.extend_tokenizer && tok->vocab_size() < shape.vocab_size) {
    auto extended = extend_vocab(std::move(text).value(), tok.value(), tok->vocab_size(), shape.vocab_size);
    if (!extended) return extended.err();
    text = std::move(extended).value();
    rep.added_tokens = shape.vocab_size - tok->vocab_size();
    rep.tokenizer_vocab = shape.vocab_size;
  }
  if (auto st = write_file(tok_out, text.value()); !st) return st.err();
  const fs::path tok_config = fs::path(tok_in).parent_path() / "tokenizer_config.json";
  if (!opts.tokenizer_json.empty() && fs::exists(tok_config)) fs::copy_file(tok_config, opts.output_dir + "/tokenizer_config.json",
                                            fs::copy_options::overwrite_existing, ec);
  int32_t bos = -1;
  if (auto b = tok->bos_token_id(); b && *b < shape.vocab_size) bos = *b;
  std::vector<int32_t> eos;
  for (int32_t id : tok->eos_token_ids())
    if (id < shape.vocab_size) eos.push_back(id);
  for (const char* name : {"<|end_of_text|>", "</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>"})
    if (auto id = tok->token_to_id(name); eos.empty() && id && *id < shape.vocab_size) eos.push_back(*id);
  if (auto st = write_file(opts.output_dir + "/config.json", config_json(shape, bos, eos)); !st) return st.err();
  if (auto st = write_file(opts.output_dir + "/generation_config.json",
                           fmt::format("{{\n  \"_from_model_config\": true,\n  \"bos_token_id\": {},\n"
                                       "  \"eos_token_id\": {}\n}}\n",
                                       bos < 0 ? std::string("null") : std::to_string(bos), id_json(eos)));
      !st)
    return st.err();
  // Weights: remove shards of an earlier model first, so the index names every file present.
  for (const auto& entry : fs::directory_iterator(opts.output_dir, ec))
    if (entry.path().extension() == ".safetensors") fs::remove(entry.path(), ec);
  if (opts.config_only) {
    fs::remove(opts.output_dir + "/model.safetensors.index.json", ec);
    rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rep;
  }
  const auto shards = plan_shards(tensor_list(shape), opts.shard_bytes);
  if (auto st = write_file(opts.output_dir + "/model.safetensors.index.json", index_json(shards)); !st) return st.err();
  auto bytes = write_shards(opts.output_dir, shards, opts.seed, opts.std, opts.threads);
  if (!bytes) return bytes.err();
  rep.bytes_written = bytes.value();
  rep.num_shards = static_cast<int32_t>(shards.size());
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace actorserve::bench
