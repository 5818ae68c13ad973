// config.json / generation_config.json parsing: the fixtures, both rope spellings, and rejects.
#include <gtest/gtest.h>

#include "config/model_config.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

TEST(model_config, reads_the_fixture_models) {
  auto llama = load_model_config(model_dir("llama-tiny"));
  ASSERT_TRUE(llama.ok()) << llama.err().message;
  EXPECT_EQ(llama->architecture, "LlamaForCausalLM");
  EXPECT_EQ(llama->vocab_size, 1024);
  EXPECT_EQ(llama->hidden_size, 64);
  EXPECT_EQ(llama->intermediate_size, 172);
  EXPECT_EQ(llama->num_layers, 2);
  EXPECT_EQ(llama->num_heads, 4);
  EXPECT_EQ(llama->num_kv_heads, 2);
  EXPECT_EQ(llama->head_dim, 16);
  EXPECT_DOUBLE_EQ(llama->rms_norm_eps, 1e-5);
  EXPECT_EQ(llama->rope.kind, rope_kind::default_rope);
  EXPECT_DOUBLE_EQ(llama->rope.theta, 10000.0);
  EXPECT_FALSE(llama->qkv_bias);
  EXPECT_FALSE(llama->tie_word_embeddings);
  EXPECT_EQ(llama->bos_token_id, 0);
  EXPECT_EQ(llama->eos_token_ids, std::vector<int32_t>{1});
  EXPECT_EQ(llama->max_position_embeddings, 2048);

  auto hd128 = load_model_config(model_dir("llama-hd128-bf16"));
  ASSERT_TRUE(hd128.ok()) << hd128.err().message;
  EXPECT_EQ(hd128->torch_dtype, "bfloat16");
  EXPECT_EQ(hd128->head_dim, 128);
  EXPECT_EQ(hd128->rope.kind, rope_kind::llama3);
  EXPECT_DOUBLE_EQ(hd128->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(hd128->rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(hd128->rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(hd128->rope.high_freq_factor, 4.0);
  EXPECT_EQ(hd128->rope.original_max_position_embeddings, 256);

  auto qwen = load_model_config(model_dir("qwen2-tiny"));
  ASSERT_TRUE(qwen.ok()) << qwen.err().message;
  EXPECT_TRUE(qwen->qkv_bias);
  EXPECT_FALSE(qwen->o_bias);
  EXPECT_TRUE(qwen->tie_word_embeddings);
  EXPECT_EQ(qwen->head_dim, 32);   // hidden 128 / 4 heads
  EXPECT_DOUBLE_EQ(qwen->rope.theta, 1e6);
  EXPECT_FALSE(qwen->sliding_window.has_value());

  auto mistral = load_model_config(model_dir("mistral-tiny"));
  ASSERT_TRUE(mistral.ok()) << mistral.err().message;
  EXPECT_EQ(mistral->num_kv_heads, 1);
  EXPECT_EQ(mistral->head_dim, 32);
  EXPECT_FALSE(mistral->sliding_window.has_value());   // "sliding_window": null
}

std::string base_config(const std::string& extra) {
  return R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 32,
             "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4)" +
         extra + "}";
}

result<model_config> parse(const std::string& extra, const std::string& gen = "") {
  return parse_model_config(base_config(extra), gen, "/m");
}

TEST(model_config, older_rope_spelling_and_defaults) {
  auto cfg = parse(R"(, "rope_theta": 250000.0, "rope_scaling": {"type": "linear", "factor": 4.0})");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->num_kv_heads, 4);
  EXPECT_EQ(cfg->head_dim, 8);
  EXPECT_DOUBLE_EQ(cfg->rope.theta, 250000.0);
  EXPECT_EQ(cfg->rope.kind, rope_kind::linear);
  EXPECT_DOUBLE_EQ(cfg->rope.factor, 4.0);

  cfg = parse(R"(, "rope_scaling": {"rope_type": "dynamic", "factor": 2}, "max_position_embeddings": 512)");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->rope.kind, rope_kind::dynamic);
  EXPECT_EQ(cfg->rope.original_max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(cfg->rope.theta, 10000.0);

  cfg = parse(R"(, "rope_scaling": null, "rope_theta": 5e5)");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->rope.kind, rope_kind::default_rope);
  EXPECT_DOUBLE_EQ(cfg->rope.theta, 5e5);

  cfg = parse(R"(, "rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8,
                 "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 64})");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->rope.kind, rope_kind::llama3);
}

TEST(model_config, yarn_in_either_spelling_with_transformers_defaults) {
  // DeepSeek-V2-Lite's spelling: top-level rope_theta, rope_scaling with "type".
  auto cfg = parse(R"(, "rope_theta": 10000, "max_position_embeddings": 163840, "rope_scaling": {"type": "yarn",
                 "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
                 "mscale": 0.707, "mscale_all_dim": 0.707})");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->rope.kind, rope_kind::yarn);
  EXPECT_STREQ(to_string(cfg->rope.kind), "yarn");
  EXPECT_DOUBLE_EQ(cfg->rope.factor, 40.0);
  EXPECT_EQ(cfg->rope.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(cfg->rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(cfg->rope.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(cfg->rope.mscale, 0.707);
  EXPECT_DOUBLE_EQ(cfg->rope.mscale_all_dim, 0.707);
  EXPECT_FALSE(cfg->rope.attention_factor.has_value());
  EXPECT_TRUE(cfg->rope.truncate);
  // transformers 5's spelling; absent or zero betas are 32 and 1, no mscales, the original context
  // defaults to max_position_embeddings.
  cfg = parse(R"(, "max_position_embeddings": 512, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6,
                 "factor": 4, "beta_fast": 0, "attention_factor": 1.25, "truncate": false})");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->rope.kind, rope_kind::yarn);
  EXPECT_DOUBLE_EQ(cfg->rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(cfg->rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(cfg->rope.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(cfg->rope.mscale, 0.0);
  EXPECT_EQ(cfg->rope.attention_factor, 1.25);
  EXPECT_FALSE(cfg->rope.truncate);
  EXPECT_EQ(cfg->rope.original_max_position_embeddings, 512);
}

TEST(model_config, bad_yarn_keys_name_the_key) {
  const std::string yarn = R"(, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4)";
  auto bad = [&](const std::string& keys, const char* key) {
    auto cfg = parse(yarn + keys + "}");
    ASSERT_FALSE(cfg.ok()) << keys;
    EXPECT_NE(cfg.err().message.find(std::string("rope_parameters.") + key), std::string::npos) << cfg.err().message;
    EXPECT_NE(cfg.err().message.find("/m/config.json"), std::string::npos) << cfg.err().message;
  };
  bad("", "factor");
  bad(R"(, "factor": 0)", "factor");
  bad(R"(, "factor": 4, "beta_fast": -1)", "beta_fast");
  bad(R"(, "factor": 4, "beta_slow": "one")", "beta_slow");
  bad(R"(, "factor": 4, "mscale": -0.7)", "mscale");
  bad(R"(, "factor": 4, "mscale_all_dim": -0.7)", "mscale_all_dim");
  bad(R"(, "factor": 4, "attention_factor": 0)", "attention_factor");
  bad(R"(, "factor": 4, "truncate": 1)", "truncate");
  bad(R"(, "factor": 4, "original_max_position_embeddings": 0)", "original_max_position_embeddings");
}

// Found by fuzzing: without rope_scaling/rope_parameters the theta check was skipped.
TEST(model_config, rope_theta_must_be_positive_in_either_spelling) {
  for (const char* extra : {R"(, "rope_theta": 0)", R"(, "rope_theta": -5.0, "rope_scaling": null)",
                            R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 0})"}) {
    auto cfg = parse(extra);
    ASSERT_FALSE(cfg.ok()) << extra;
    EXPECT_NE(cfg.err().message.find("rope_theta"), std::string::npos) << cfg.err().message;
  }
}

TEST(model_config, generation_config_sampling_defaults) {
  auto cfg = parse("", R"({"temperature": 0.6, "top_p": 0.95, "top_k": 20, "repetition_penalty": 1.05,
                           "max_new_tokens": 512, "do_sample": true})");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  const auto& d = cfg->sampling_defaults;
  EXPECT_EQ(d.temperature, 0.6);
  EXPECT_EQ(d.top_p, 0.95);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_EQ(d.repetition_penalty, 1.05);
  EXPECT_EQ(d.max_new_tokens, 512);
  EXPECT_FALSE(d.min_p.has_value());
  auto bad = parse("", R"({"temperature": "hot"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("generation_config.json"), std::string::npos) << bad.err().message;
  EXPECT_NE(bad.err().message.find("temperature"), std::string::npos) << bad.err().message;
}

TEST(model_config, eos_ids_from_both_files) {
  auto cfg = parse(R"(, "eos_token_id": [5, 6], "bos_token_id": 2)", R"({"eos_token_id": 7})");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->eos_token_ids, (std::vector<int32_t>{7, 5, 6}));
  EXPECT_EQ(cfg->bos_token_id, 2);
  cfg = parse(R"(, "eos_token_id": 3)", R"({"eos_token_id": [3, 4]})");
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->eos_token_ids, (std::vector<int32_t>{3, 4}));
}

TEST(model_config, qwen2_always_has_qkv_bias_and_llama_follows_attention_bias) {
  auto qwen = parse_model_config(R"({"architectures": ["Qwen2ForCausalLM"], "vocab_size": 10, "hidden_size": 8,
                                    "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2})",
                                 "", "/q");
  ASSERT_TRUE(qwen.ok()) << qwen.err().message;
  EXPECT_TRUE(qwen->qkv_bias);
  auto llama = parse(R"(, "attention_bias": true)");
  ASSERT_TRUE(llama.ok());
  EXPECT_TRUE(llama->qkv_bias);
  EXPECT_TRUE(llama->o_bias);
}

void expect_error(const result<model_config>& r, const std::vector<std::string>& needles) {
  ASSERT_FALSE(r.ok());
  for (const auto& n : needles) EXPECT_NE(r.err().message.find(n), std::string::npos) << r.err().message;
}

TEST(model_config, rejects_name_file_and_field) {
  expect_error(parse_model_config(R"({"architectures": ["GPT2LMHeadModel"]})", "", "/m"),
               {"/m/config.json", "GPT2LMHeadModel", "MixtralForCausalLM"});
  expect_error(parse(R"(, "hidden_act": "gelu")"), {"/m/config.json", "hidden_act", "gelu"});
  expect_error(parse(R"(, "rope_parameters": {"rope_type": "longrope", "factor": 4})"), {"rope_type", "longrope"});
  expect_error(parse(R"(, "rope_scaling": {"type": "linear"})"), {"rope_scaling.factor"});
  expect_error(parse(R"(, "num_key_value_heads": 3)"), {"num_key_value_heads"});
  expect_error(parse(R"(, "rms_norm_eps": "small")"), {"rms_norm_eps"});
  expect_error(parse(R"(, "dtype": "float8")"), {"float8"});
  expect_error(parse_model_config(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 10})", "", "/m"),
               {"/m/config.json", "hidden_size"});
  expect_error(parse_model_config("not json", "", "/m"), {"/m/config.json"});
  expect_error(parse("", R"({"eos_token_id": "x"})"), {"/m/generation_config.json", "eos_token_id"});
  expect_error(parse(R"(, "eos_token_id": 100)"), {"eos_token_id"});
}

TEST(model_config, missing_directory_names_config_json) {
  auto r = load_model_config("/nonexistent/model");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("/nonexistent/model/config.json"), std::string::npos);
}

}  // namespace
}  // namespace actorserve::testing
