// config.json's quantization_config: the FP8 formats that load (fp8 per tensor or per block,
// compressed-tensors per tensor, channel or block) and every refusal, each naming the key and value.
#include <gtest/gtest.h>

#include "config/model_config.hpp"
#include "model/model_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

result<model_config> parse_quant(const std::string& quant) {
  const std::string cfg = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "quantization_config": )" +
                          quant + "}";
  return parse_model_config(cfg, "", "/m");
}

/// compressed-tensors with one group; `weights` and `inputs` are the group's JSON members.
std::string ct(const std::string& weights, const std::string& inputs = "null", const std::string& top = "") {
  return R"({"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],)" + top +
         R"( "config_groups": {"group_0": {"targets": ["Linear"], "weights": )" + weights +
         R"(, "input_activations": )" + inputs + R"(, "output_activations": null}}})";
}

const std::string channel_weights =
    R"({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false,
        "group_size": null, "block_structure": null, "actorder": null, "observer": "minmax", "observer_kwargs": {}})";
const std::string token_inputs =
    R"({"num_bits": 8, "type": "float", "strategy": "token", "symmetric": true, "dynamic": true})";

void expect_refused(const std::string& quant, const std::vector<std::string>& needles) {
  auto cfg = parse_quant(quant);
  ASSERT_FALSE(cfg.ok()) << "accepted: " << quant;
  for (const auto& n : needles)
    EXPECT_NE(cfg.err().message.find(n), std::string::npos) << "'" << n << "' not in: " << cfg.err().message;
}

TEST(quantization_config, absent_means_unquantized) {
  auto cfg = load_model_config(model_dir("qwen3-hd128-bf16"));
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_FALSE(cfg->quantization);
}

TEST(quantization_config, reads_the_fixture_checkpoints) {
  auto tensor = load_model_config(model_dir("qwen3-hd128-fp8"));
  ASSERT_TRUE(tensor.ok()) << tensor.err().message;
  ASSERT_TRUE(tensor->quantization);
  EXPECT_EQ(tensor->quantization->method, quant_method::fp8);
  EXPECT_EQ(tensor->quantization->groups.at(0).scheme.weights, fp8_weight_granularity::per_tensor);
  EXPECT_EQ(tensor->quantization->groups.at(0).scheme.activations, fp8_activation_scheme::static_scale);
  EXPECT_EQ(tensor->quantization->weight_scale_name, "weight_scale");
  EXPECT_TRUE(tensor->quantization->ignores("lm_head"));

  auto channel = load_model_config(model_dir("qwen3-hd128-fp8-channel"));
  ASSERT_TRUE(channel.ok()) << channel.err().message;
  ASSERT_TRUE(channel->quantization);
  EXPECT_EQ(channel->quantization->method, quant_method::compressed_tensors);
  EXPECT_EQ(channel->quantization->groups.at(0).scheme.weights, fp8_weight_granularity::per_channel);
  EXPECT_EQ(channel->quantization->groups.at(0).scheme.activations, fp8_activation_scheme::dynamic);
  EXPECT_TRUE(channel->quantization->ignores("model.layers.1.mlp.down_proj"));
  EXPECT_FALSE(channel->quantization->ignores("model.layers.0.mlp.down_proj"));
  EXPECT_TRUE(channel->quantization->kv_cache_scales);   // its FP8 kv_cache_scheme
  EXPECT_FALSE(tensor->quantization->kv_cache_scales);   // fp8's k_scale / v_scale come without a scheme

  auto block = load_model_config(model_dir("mixtral-fp8-block"));
  ASSERT_TRUE(block.ok()) << block.err().message;
  ASSERT_TRUE(block->quantization);
  EXPECT_EQ(block->quantization->groups.at(0).scheme.weights, fp8_weight_granularity::block);
  EXPECT_EQ(block->quantization->groups.at(0).scheme.block_rows, 128);
  EXPECT_EQ(block->quantization->groups.at(0).scheme.block_cols, 128);
  EXPECT_EQ(block->quantization->weight_scale_name, "weight_scale_inv");
}

TEST(quantization_config, compressed_tensors_schemes) {
  auto tensor = parse_quant(ct(R"({"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true,
                                   "dynamic": false})",
                               R"({"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true,
                                   "dynamic": false})"));
  ASSERT_TRUE(tensor.ok()) << tensor.err().message;
  EXPECT_EQ(tensor->quantization->groups.at(0).scheme.weights, fp8_weight_granularity::per_tensor);
  EXPECT_EQ(tensor->quantization->groups.at(0).scheme.activations, fp8_activation_scheme::static_scale);
  auto weight_only = parse_quant(ct(channel_weights));
  ASSERT_TRUE(weight_only.ok()) << weight_only.err().message;
  EXPECT_EQ(weight_only->quantization->groups.at(0).scheme.activations, fp8_activation_scheme::none);
  auto block = parse_quant(ct(R"({"num_bits": 8, "type": "float", "strategy": "block", "symmetric": true,
                                  "dynamic": false, "block_structure": [128, 64]})",
                              token_inputs));
  ASSERT_TRUE(block.ok()) << block.err().message;
  EXPECT_EQ(block->quantization->groups.at(0).scheme.weights, fp8_weight_granularity::block);
  EXPECT_EQ(block->quantization->groups.at(0).scheme.block_rows, 128);
  EXPECT_EQ(block->quantization->groups.at(0).scheme.block_cols, 64);
  EXPECT_EQ(block->quantization->weight_scale_name, "weight_scale");
  EXPECT_FALSE(block->quantization->kv_cache_scales);
  // An FP8 KV-cache scheme of one scale per tensor (strategy absent means per tensor, as in
  // compressed-tensors); null is no scheme.
  for (const char* scheme : {R"({"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true,
                                 "dynamic": false, "observer": "minmax", "observer_kwargs": {}})",
                             R"({"num_bits": 8, "type": "float"})"}) {
    auto kv = parse_quant(ct(channel_weights, "null", std::string(R"( "kv_cache_scheme": )") + scheme + ","));
    ASSERT_TRUE(kv.ok()) << kv.err().message;
    EXPECT_TRUE(kv->quantization->kv_cache_scales) << scheme;
  }
  auto none = parse_quant(ct(channel_weights, "null", R"( "kv_cache_scheme": null,)"));
  ASSERT_TRUE(none.ok()) << none.err().message;
  EXPECT_FALSE(none->quantization->kv_cache_scales);
  const std::string note = kv_cache_scheme_unused("bf16");
  for (const char* part : {"kv_cache_scheme", "stays bf16", "--kv-cache-dtype fp8", "self_attn.k_scale"})
    EXPECT_NE(note.find(part), std::string::npos) << part << " not in: " << note;
}

TEST(quantization_config, several_config_groups_give_each_module_its_scheme) {
  // Linear (per channel, dynamic); attention by pattern (per tensor, static); one module by name
  // (block): a name wins over a pattern, a pattern over Linear, as vLLM picks them.
  const std::string quant = R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "ignore": ["lm_head", "model.layers.1.mlp.gate_proj"], "config_groups": {
      "group_0": {"targets": ["Linear"], "weights": )" + channel_weights + R"(, "input_activations": )" +
                            token_inputs + R"(},
      "group_1": {"targets": ["re:.*self_attn\\..*"], "weights": {"num_bits": 8, "type": "float",
                  "strategy": "tensor", "dynamic": false}, "input_activations": {"num_bits": 8, "type": "float",
                  "strategy": "tensor", "dynamic": false}},
      "group_2": {"targets": ["model.layers.0.mlp.down_proj"], "weights": {"num_bits": 8, "type": "float",
                  "strategy": "block", "dynamic": false, "block_structure": [128, 128]}}}})";
  auto cfg = parse_quant(quant);
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  const quantization_config& q = *cfg->quantization;
  ASSERT_EQ(q.groups.size(), 3u);
  const auto scheme = [&](const std::string& module) {
    auto s = q.scheme_for(module);
    EXPECT_TRUE(s.ok()) << module << ": " << (s.ok() ? "" : s.err().message);
    return s.ok() ? s.value() : nullptr;
  };
  EXPECT_EQ(scheme("model.layers.0.mlp.up_proj"), &q.groups[0].scheme);
  EXPECT_EQ(scheme("model.layers.1.self_attn.q_proj"), &q.groups[1].scheme);
  EXPECT_EQ(scheme("model.layers.0.mlp.down_proj"), &q.groups[2].scheme);
  EXPECT_EQ(scheme("model.layers.1.mlp.down_proj"), &q.groups[0].scheme);
  EXPECT_EQ(scheme("model.layers.1.mlp.gate_proj"), nullptr);   // ignored
  EXPECT_EQ(scheme("lm_head"), nullptr);
  EXPECT_EQ(q.groups[1].scheme.activations, fp8_activation_scheme::static_scale);
  EXPECT_EQ(q.groups[2].scheme.weights, fp8_weight_granularity::block);
  EXPECT_EQ(q.groups[2].scheme.activations, fp8_activation_scheme::none);

  // Only attention targeted: the MLP stays unquantized.
  std::string attention_only = ct(channel_weights);
  attention_only.replace(attention_only.find("[\"Linear\"]"), 10, "[\"re:.*self_attn.*\"]");
  auto a = parse_quant(attention_only);
  ASSERT_TRUE(a.ok()) << a.err().message;
  EXPECT_NE(a->quantization->scheme_for("model.layers.0.self_attn.o_proj").value(), nullptr);
  EXPECT_EQ(a->quantization->scheme_for("model.layers.0.mlp.up_proj").value(), nullptr);

  // Two groups that target a module alike: an error naming both and the module.
  std::string two = ct(channel_weights);
  two = two.substr(0, two.size() - 2) + R"(, "group_1": {"targets": ["Linear"], "weights": )" + channel_weights +
        "}}}";
  auto both = parse_quant(two);
  ASSERT_TRUE(both.ok()) << both.err().message;
  auto s = both->quantization->scheme_for("model.layers.0.mlp.up_proj");
  ASSERT_FALSE(s.ok());
  expect_has(s.err().message, {"'group_0'", "'group_1'", "model.layers.0.mlp.up_proj", "ambiguous"});
}

TEST(quantization_config, ignore_lists_match_names_suffixes_parents_and_patterns) {
  quantization_config q;
  q.ignore = {"lm_head", "mlp.down_proj", "model.layers.3", "re:.*layers\\.1\\.self_attn\\.[qk]_proj"};
  EXPECT_TRUE(q.ignores("lm_head"));
  EXPECT_TRUE(q.ignores("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(q.ignores("model.layers.0.mlp.up_proj"));
  EXPECT_TRUE(q.ignores("model.layers.3.self_attn.o_proj"));
  EXPECT_FALSE(q.ignores("model.layers.30.self_attn.o_proj"));
  EXPECT_TRUE(q.ignores("model.layers.1.self_attn.k_proj"));
  EXPECT_FALSE(q.ignores("model.layers.1.self_attn.v_proj"));
  EXPECT_FALSE(q.ignores("model.layers.11.self_attn.q_proj"));
}

TEST(quantization_config, refuses_other_methods_and_fp8_variants_naming_key_and_value) {
  expect_refused(R"({"quant_method": "gptq", "bits": 4})", {"/m/config.json", "quantization_config.quant_method", "\"gptq\""});
  expect_refused(R"({"activation_scheme": "dynamic"})", {"quantization_config.quant_method"});
  expect_refused(R"({"quant_method": "fp8", "fmt": "e5m2"})", {"quantization_config.fmt", "\"e5m2\"", "E5M2"});
  expect_refused(R"({"quant_method": "fp8", "activation_scheme": "per_token"})",
                 {"quantization_config.activation_scheme", "\"per_token\""});
  expect_refused(R"({"quant_method": "fp8", "kv_cache_quant_algo": "FP8"})",
                 {"quantization_config.kv_cache_quant_algo", "\"FP8\"", "unknown key"});
  expect_refused(R"({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]})",
                 {"quantization_config.activation_scheme", "block-wise"});
  expect_refused(R"({"quant_method": "fp8", "weight_block_size": [128]})", {"quantization_config.weight_block_size"});
  expect_refused(R"({"quant_method": "fp8", "ignored_layers": ["re:("]})", {"quantization_config.ignored_layers", "re:("});
  expect_refused(R"({"quant_method": "fp8", "modules_to_not_convert": "lm_head"})",
                 {"quantization_config.modules_to_not_convert"});
}

TEST(quantization_config, refuses_compressed_tensors_schemes_it_cannot_load) {
  auto with = [](const std::string& key, const std::string& value) {
    std::string w = channel_weights;
    const size_t at = w.find("\"" + key + "\"");
    const size_t colon = w.find(':', at), end = w.find_first_of(",}", colon);
    return w.substr(0, colon + 1) + " " + value + w.substr(end);
  };
  expect_refused(ct(with("type", "\"int\"")), {"config_groups.group_0.weights.type", "\"int\""});
  expect_refused(ct(with("num_bits", "4")), {"weights.num_bits", "4"});
  expect_refused(ct(with("strategy", "\"group\"")), {"weights.strategy", "\"group\""});
  expect_refused(ct(with("group_size", "128")), {"weights.group_size", "128"});
  expect_refused(ct(with("symmetric", "false")), {"weights.symmetric", "false"});
  expect_refused(ct(with("dynamic", "true")), {"weights.dynamic", "true"});
  expect_refused(ct(channel_weights, R"({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": false})"),
                 {"input_activations.strategy", "\"token\""});
  expect_refused(ct(channel_weights, R"({"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true})"),
                 {"input_activations.type", "\"int\""});
  const auto kv = [](const std::string& scheme) { return ct(channel_weights, "null", R"( "kv_cache_scheme": )" + scheme + ","); };
  expect_refused(kv(R"({"num_bits": 8, "type": "float", "strategy": "attn_head"})"),
                 {"quantization_config.kv_cache_scheme.strategy", "\"attn_head\"", "per tensor"});
  expect_refused(kv(R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": true})"),
                 {"kv_cache_scheme.dynamic", "true"});
  expect_refused(kv(R"({"num_bits": 8, "type": "int", "strategy": "tensor"})"), {"kv_cache_scheme.type", "\"int\""});
  expect_refused(kv(R"({"num_bits": 4, "type": "float"})"), {"kv_cache_scheme.num_bits", "4"});
  expect_refused(kv(R"({"num_bits": 8, "type": "float", "symmetric": false})"), {"kv_cache_scheme.symmetric"});
  expect_refused(kv(R"({"num_bits": 8, "type": "float", "future": 1})"), {"kv_cache_scheme.future", "unknown key"});
  expect_refused(kv("8"), {"kv_cache_scheme", "an object or null"});
  expect_refused(ct(channel_weights, "null", R"( "sparsity_config": {"format": "sparse-24"},)"),
                 {"quantization_config.sparsity_config", "sparse"});
  expect_refused(ct(channel_weights, "null", R"( "transform_config": {"config_groups": {}},)"),
                 {"quantization_config.transform_config"});
  std::string packed = ct(channel_weights);
  packed.replace(packed.find("float-quantized"), 15, "pack-quantized");
  expect_refused(packed, {"quantization_config.format", "\"pack-quantized\""});
  expect_refused(ct(channel_weights, "null", R"( "future_key": 1,)"), {"quantization_config.future_key", "unknown key"});
  std::string attention = ct(channel_weights);
  attention.replace(attention.find("[\"Linear\"]"), 10, "[\"Attention\"]");
  expect_refused(attention, {"config_groups.group_0.targets", "\"Attention\"", "Linear"});
  std::string no_targets = ct(channel_weights);
  no_targets.replace(no_targets.find("[\"Linear\"]"), 10, "[]");
  expect_refused(no_targets, {"config_groups.group_0.targets"});
  std::string bad_pattern = ct(channel_weights);
  bad_pattern.replace(bad_pattern.find("[\"Linear\"]"), 10, "[\"re:(\"]");
  expect_refused(bad_pattern, {"group_0.targets", "re:("});
  expect_refused(R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {}})",
                 {"quantization_config.config_groups", "at least one group"});
  std::string static_block = ct(R"({"num_bits": 8, "type": "float", "strategy": "block", "dynamic": false,
                                    "block_structure": [128, 128]})",
                                R"({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false})");
  expect_refused(static_block, {"group_0.input_activations", "block"});
  std::string output = ct(channel_weights);
  output.replace(output.find("\"output_activations\": null"), 26, "\"output_activations\": " + token_inputs);
  expect_refused(output, {"group_0.output_activations"});
}

}  // namespace
}  // namespace actorserve::testing
