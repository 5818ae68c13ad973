// config.json of Qwen3, Qwen3-MoE, Mixtral and DeepSeek-V2's MoE keys: the fixtures, every key as
// transformers writes it, and a refusal naming file and key for each bad or unknown value.
#include <gtest/gtest.h>

#include "config/model_config.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

model_config load_ok(const std::string& name) {
  auto cfg = load_model_config(model_dir(name));
  EXPECT_TRUE(cfg.ok()) << name << ": " << (cfg.ok() ? "" : cfg.err().message);
  return cfg.ok() ? cfg.value() : model_config{};
}

std::vector<bool> sparse_layers(const model_config& cfg) {
  std::vector<bool> out;
  for (int64_t i = 0; i < cfg.num_layers; ++i) out.push_back(cfg.is_sparse_layer(i));
  return out;
}

TEST(moe_config, qwen3_has_qk_norm_and_its_own_head_dim) {
  const auto tiny = load_ok("qwen3-tiny");
  EXPECT_EQ(tiny.architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(tiny.qk_norm);
  EXPECT_FALSE(tiny.qkv_bias);
  EXPECT_FALSE(tiny.o_bias);
  EXPECT_EQ(tiny.head_dim, 32);   // not hidden 64 / 4 heads
  EXPECT_TRUE(tiny.tie_word_embeddings);
  EXPECT_FALSE(tiny.moe.has_value());
  EXPECT_FALSE(tiny.sliding_window.has_value());
  const auto hd128 = load_ok("qwen3-hd128-bf16");
  EXPECT_EQ(hd128.head_dim, 128);
  EXPECT_EQ(hd128.torch_dtype, "bfloat16");
  // Llama-family models keep qk_norm off.
  EXPECT_FALSE(load_ok("qwen2-tiny").qk_norm);
}

TEST(moe_config, qwen3_moe_fixtures) {
  const auto tiny = load_ok("qwen3-moe-tiny");
  ASSERT_TRUE(tiny.moe.has_value());
  EXPECT_TRUE(tiny.qk_norm);
  EXPECT_EQ(tiny.moe->num_experts, 8);   // written as num_local_experts by transformers 5
  EXPECT_EQ(tiny.moe->top_k, 2);
  EXPECT_EQ(tiny.moe->expert_intermediate_size, 32);
  EXPECT_EQ(tiny.intermediate_size, 128);   // the dense layer's
  EXPECT_TRUE(tiny.moe->renormalize);
  EXPECT_EQ(tiny.moe->scoring, moe_scoring::softmax);
  EXPECT_EQ(tiny.moe->topk_method, moe_topk_method::greedy);
  EXPECT_DOUBLE_EQ(tiny.moe->routed_scaling_factor, 1.0);
  EXPECT_EQ(tiny.moe->num_shared_experts, 0);
  EXPECT_EQ(sparse_layers(tiny), (std::vector<bool>{true, false, true}));   // mlp_only_layers [1]

  const auto bf16 = load_ok("qwen3-moe-bf16");
  ASSERT_TRUE(bf16.moe.has_value());
  EXPECT_EQ(bf16.moe->num_experts, 16);
  EXPECT_EQ(bf16.moe->top_k, 4);
  EXPECT_FALSE(bf16.moe->renormalize);
  EXPECT_EQ(sparse_layers(bf16), (std::vector<bool>{false, true, false}));   // decoder_sparse_step 2
}

TEST(moe_config, mixtral_fixtures) {
  const auto tiny = load_ok("mixtral-tiny");
  ASSERT_TRUE(tiny.moe.has_value());
  EXPECT_FALSE(tiny.qk_norm);
  EXPECT_EQ(tiny.head_dim, 16);   // "head_dim": null
  EXPECT_EQ(tiny.moe->num_experts, 4);
  EXPECT_EQ(tiny.moe->top_k, 2);
  EXPECT_EQ(tiny.moe->expert_intermediate_size, 128);
  EXPECT_TRUE(tiny.moe->renormalize);
  EXPECT_EQ(sparse_layers(tiny), (std::vector<bool>{true, true}));
  EXPECT_FALSE(tiny.sliding_window.has_value());
  const auto bf16 = load_ok("mixtral-bf16");
  ASSERT_TRUE(bf16.moe.has_value());
  EXPECT_EQ(bf16.moe->num_experts, 8);
  EXPECT_EQ(bf16.num_kv_heads, 1);
  EXPECT_EQ(bf16.head_dim, 32);
  EXPECT_EQ(load_ok("mistral-sliding-window").sliding_window, 48);
}

TEST(moe_config, deepseek_v2_fixture) {
  auto cfg = load_model_config(model_dir("deepseek-v2-tiny"));
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  ASSERT_TRUE(cfg->moe.has_value());
  EXPECT_EQ(cfg->moe->num_experts, 4);
  EXPECT_EQ(cfg->moe->top_k, 2);
  EXPECT_EQ(cfg->moe->expert_intermediate_size, 32);
  EXPECT_EQ(cfg->moe->num_shared_experts, 1);
  EXPECT_FALSE(cfg->moe->renormalize);
  EXPECT_EQ(cfg->moe->topk_method, moe_topk_method::greedy);
  EXPECT_EQ(cfg->moe->scoring, moe_scoring::softmax);
  EXPECT_EQ(sparse_layers(*cfg), (std::vector<bool>{false, true}));   // first_k_dense_replace 1
}

std::string deepseek(const std::string& extra) {
  return R"({"architectures": ["DeepseekV2ForCausalLM"], "vocab_size": 100, "hidden_size": 32,
             "intermediate_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4,
             "n_routed_experts": 8, "num_experts_per_tok": 3, "moe_intermediate_size": 16)" +
         extra + "}";
}

TEST(moe_config, deepseek_v2_group_limited_routing_and_layer_frequency) {
  auto cfg = parse_model_config(deepseek(R"(, "topk_method": "group_limited_greedy", "n_group": 4,
      "topk_group": 2, "routed_scaling_factor": 2.5, "n_shared_experts": 2, "first_k_dense_replace": 1,
      "moe_layer_freq": 2, "scoring_func": "softmax", "norm_topk_prob": false)"),
                                     "", "/d");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  const moe_config& m = *cfg->moe;
  EXPECT_EQ(m.topk_method, moe_topk_method::group_limited_greedy);
  EXPECT_EQ(m.scoring, moe_scoring::softmax);
  EXPECT_EQ(m.num_groups, 4);
  EXPECT_EQ(m.topk_groups, 2);
  EXPECT_EQ(m.experts_per_group(), 2);
  EXPECT_DOUBLE_EQ(m.routed_scaling_factor, 2.5);
  EXPECT_EQ(m.num_shared_experts, 2);
  EXPECT_EQ(sparse_layers(*cfg), (std::vector<bool>{false, false, true, false, true, false}));
}

void expect_error(const result<model_config>& r, const std::vector<std::string>& needles) {
  ASSERT_FALSE(r.ok()) << needles.front();
  for (const auto& n : needles) EXPECT_NE(r.err().message.find(n), std::string::npos) << r.err().message;
}

TEST(moe_config, unknown_router_methods_are_refused_naming_key_and_file) {
  expect_error(parse_model_config(deepseek(R"(, "topk_method": "noaux_tc")"), "", "/d"),
               {"/d/config.json", "topk_method", "noaux_tc"});
  expect_error(parse_model_config(deepseek(R"(, "scoring_func": "softplus")"), "", "/d"),
               {"/d/config.json", "scoring_func", "softplus"});
  expect_error(parse_model_config(deepseek(R"(, "topk_method": 3)"), "", "/d"), {"topk_method"});
}

TEST(moe_config, bad_deepseek_v2_keys_name_the_key) {
  auto keys = [](const std::string& extra) { return parse_model_config(deepseek(extra), "", "/d"); };
  expect_error(keys(R"(, "topk_method": "group_limited_greedy", "n_group": 3, "topk_group": 1)"), {"n_group"});
  expect_error(keys(R"(, "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 5)"), {"topk_group"});
  expect_error(keys(R"(, "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 1)"),
               {"num_experts_per_tok"});
  expect_error(keys(R"(, "routed_scaling_factor": 0)"), {"routed_scaling_factor"});
  expect_error(keys(R"(, "norm_topk_prob": true)"), {"norm_topk_prob"});
  // transformers' DeepSeek-V2 router computes softmax whatever scoring_func says.
  expect_error(keys(R"(, "scoring_func": "sigmoid")"), {"/d/config.json", "scoring_func", "sigmoid", "softmax"});
  expect_error(keys(R"(, "moe_layer_freq": 0)"), {"moe_layer_freq"});
  expect_error(keys(R"(, "n_shared_experts": -1)"), {"n_shared_experts"});
  expect_error(parse_model_config(R"({"architectures": ["DeepseekV2ForCausalLM"], "vocab_size": 100,
      "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_experts_per_tok": 2, "moe_intermediate_size": 16})", "", "/d"),
               {"/d/config.json", "n_routed_experts"});
}

std::string qwen3_moe(const std::string& extra) {
  return R"({"architectures": ["Qwen3MoeForCausalLM"], "vocab_size": 100, "hidden_size": 32, "head_dim": 8,
             "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4)" +
         extra + "}";
}

TEST(moe_config, qwen3_moe_keys_as_the_published_checkpoints_write_them) {
  auto cfg = parse_model_config(qwen3_moe(R"(, "num_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 16, "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [0, 3])"),
                                "", "/q");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->moe->num_experts, 8);
  EXPECT_TRUE(cfg->moe->renormalize);
  EXPECT_EQ(sparse_layers(*cfg), (std::vector<bool>{false, true, true, false}));
  // Defaults as transformers': norm_topk_prob false, decoder_sparse_step 1, no mlp_only_layers.
  cfg = parse_model_config(qwen3_moe(R"(, "num_experts": 8, "num_experts_per_tok": 8, "moe_intermediate_size": 16)"),
                           "", "/q");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_FALSE(cfg->moe->renormalize);
  EXPECT_EQ(sparse_layers(*cfg), (std::vector<bool>{true, true, true, true}));
}

TEST(moe_config, bad_qwen3_and_mixtral_keys_name_file_and_key) {
  const std::string ok = R"(, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16)";
  auto q = [](const std::string& extra) { return parse_model_config(qwen3_moe(extra), "", "/q"); };
  expect_error(q(R"(, "num_experts_per_tok": 2, "moe_intermediate_size": 16)"), {"/q/config.json", "num_experts"});
  expect_error(q(R"(, "num_experts": 8, "moe_intermediate_size": 16)"), {"num_experts_per_tok"});
  expect_error(q(R"(, "num_experts": 8, "num_experts_per_tok": 2)"), {"moe_intermediate_size"});
  expect_error(q(R"(, "num_experts": 8, "num_experts_per_tok": 9, "moe_intermediate_size": 16)"),
               {"num_experts_per_tok"});
  expect_error(q(ok + R"(, "num_local_experts": 4)"), {"num_local_experts"});
  expect_error(q(ok + R"(, "decoder_sparse_step": 0)"), {"decoder_sparse_step"});
  expect_error(q(ok + R"(, "mlp_only_layers": [4])"), {"mlp_only_layers"});
  expect_error(q(ok + R"(, "mlp_only_layers": "all")"), {"mlp_only_layers"});
  expect_error(q(ok + R"(, "norm_topk_prob": "yes")"), {"norm_topk_prob"});
  // Qwen3 needs head_dim (transformers' default is 128, not hidden / heads).
  expect_error(parse_model_config(R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 100, "hidden_size": 32,
                                     "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4})",
                                  "", "/q"),
               {"/q/config.json", "head_dim"});
  expect_error(parse_model_config(R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 100, "hidden_size": 32,
                                     "head_dim": 8, "intermediate_size": 64, "num_hidden_layers": 1,
                                     "num_attention_heads": 4, "use_sliding_window": true, "sliding_window": 16})",
                                  "", "/q"),
               {"/q/config.json", "use_sliding_window"});
  const std::string mixtral = R"({"architectures": ["MixtralForCausalLM"], "vocab_size": 100, "hidden_size": 32,
                                  "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4)";
  expect_error(parse_model_config(mixtral + R"(, "num_experts_per_tok": 2})", "", "/x"),
               {"/x/config.json", "num_local_experts"});
  expect_error(parse_model_config(mixtral + R"(, "num_local_experts": 8})", "", "/x"), {"num_experts_per_tok"});
  auto windowed = parse_model_config(mixtral + R"(, "num_local_experts": 8, "num_experts_per_tok": 2,
                                                   "sliding_window": 4096})",
                                     "", "/x");
  ASSERT_TRUE(windowed.ok()) << windowed.err().message;
  EXPECT_EQ(windowed->sliding_window, 4096);   // as Mistral: a set window applies
}

}  // namespace
}  // namespace actorserve::testing
