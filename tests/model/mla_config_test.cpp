// DeepSeek-V2's multi-head latent attention keys: the three fixtures, transformers' defaults,
// a refusal naming file and key for each bad value, and the weights bound by name and shape.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "config/model_config.hpp"
#include "gpu/model/model_weights.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

result<model_config> parse_deepseek_json(const std::string& json) { return parse_model_config(json, "", "/d"); }

model_config fixture(const std::string& name) {
  auto cfg = load_model_config(model_dir(name));
  EXPECT_TRUE(cfg.ok()) << name << ": " << (cfg.ok() ? "" : cfg.err().message);
  return cfg.ok() ? cfg.value() : model_config{};
}

TEST(mla_config, the_three_deepseek_fixtures) {
  const model_config tiny = fixture("deepseek-v2-tiny");
  ASSERT_TRUE(tiny.mla.has_value());
  EXPECT_EQ(tiny.mla->q_lora_rank, 0);   // "q_lora_rank": null
  EXPECT_EQ(tiny.mla->kv_lora_rank, 32);
  EXPECT_EQ(tiny.mla->qk_nope_head_dim, 16);
  EXPECT_EQ(tiny.mla->qk_rope_head_dim, 8);
  EXPECT_EQ(tiny.mla->v_head_dim, 16);
  EXPECT_EQ(tiny.mla->qk_head_dim(), 24);
  EXPECT_EQ(tiny.mla->cache_dim(), 40);
  EXPECT_EQ(tiny.mla->per_head_cache_dim(tiny.num_heads), tiny.num_heads * (24 + 16));
  EXPECT_FALSE(tiny.mla->down_proj_bias);
  EXPECT_FALSE(tiny.o_bias);
  EXPECT_FALSE(tiny.qkv_bias);
  EXPECT_EQ(tiny.head_dim, 8);   // the rope width, as transformers sets it
  EXPECT_EQ(tiny.rope.kind, rope_kind::default_rope);

  const model_config qlora = fixture("deepseek-v2-qlora-yarn-bf16");
  ASSERT_TRUE(qlora.mla.has_value());
  EXPECT_EQ(qlora.mla->q_lora_rank, 48);
  EXPECT_EQ(qlora.mla->kv_lora_rank, 64);
  EXPECT_EQ(qlora.mla->qk_head_dim(), 48);
  EXPECT_EQ(qlora.mla->v_head_dim, 32);
  EXPECT_EQ(qlora.rope.kind, rope_kind::yarn);
  EXPECT_DOUBLE_EQ(qlora.rope.factor, 16.0);
  EXPECT_EQ(qlora.rope.original_max_position_embeddings, 128);
  EXPECT_DOUBLE_EQ(qlora.rope.mscale, 0.707);
  EXPECT_DOUBLE_EQ(qlora.rope.mscale_all_dim, 0.707);
  ASSERT_TRUE(qlora.moe.has_value());
  EXPECT_EQ(qlora.moe->topk_method, moe_topk_method::group_limited_greedy);
  EXPECT_EQ(qlora.moe->num_groups, 4);
  EXPECT_EQ(qlora.moe->topk_groups, 2);
  EXPECT_DOUBLE_EQ(qlora.moe->routed_scaling_factor, 2.5);
  EXPECT_EQ(qlora.moe->num_shared_experts, 2);
  EXPECT_FALSE(qlora.is_sparse_layer(0));
  EXPECT_TRUE(qlora.is_sparse_layer(2));

  const model_config yarn = fixture("deepseek-v2-yarn-tiny");
  ASSERT_TRUE(yarn.mla.has_value());
  EXPECT_EQ(yarn.mla->q_lora_rank, 0);
  EXPECT_DOUBLE_EQ(yarn.rope.factor, 32.0);
  EXPECT_DOUBLE_EQ(yarn.rope.mscale, 1.0);
  EXPECT_DOUBLE_EQ(yarn.rope.mscale_all_dim, 0.0);
  EXPECT_TRUE(yarn.is_sparse_layer(0));   // first_k_dense_replace 0
  EXPECT_DOUBLE_EQ(yarn.moe->routed_scaling_factor, 1.5);

  // Llama-family models have no latent attention.
  EXPECT_FALSE(load_model_config(model_dir("llama-tiny"))->mla.has_value());
}

std::string deepseek(const std::string& extra) {
  return R"({"architectures": ["DeepseekV2ForCausalLM"], "vocab_size": 100, "hidden_size": 32,
             "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16)" +
         extra + "}";
}

TEST(mla_config, transformers_defaults_are_v2_lite_sizes_and_a_1536_q_lora) {
  auto cfg = parse_deepseek_json(deepseek(R"(, "head_dim": 7, "attention_bias": true)"));
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->mla->q_lora_rank, 1536);   // absent: DeepseekV2Config's default, not "no q_lora"
  EXPECT_EQ(cfg->mla->kv_lora_rank, 512);
  EXPECT_EQ(cfg->mla->qk_nope_head_dim, 128);
  EXPECT_EQ(cfg->mla->qk_rope_head_dim, 64);
  EXPECT_EQ(cfg->mla->v_head_dim, 128);
  EXPECT_EQ(cfg->head_dim, 64);   // config.json's head_dim is overridden, as transformers does
  // attention_bias: q_a_proj, kv_a_proj_with_mqa and o_proj, never q_proj / q_b_proj / kv_b_proj.
  EXPECT_TRUE(cfg->mla->down_proj_bias);
  EXPECT_TRUE(cfg->o_bias);
  EXPECT_FALSE(cfg->qkv_bias);
  cfg = parse_deepseek_json(deepseek(R"(, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
                                        "qk_rope_head_dim": 4, "v_head_dim": 12, "num_key_value_heads": 4)"));
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->mla->q_lora_rank, 24);
  EXPECT_EQ(cfg->mla->cache_dim(), 20);
  EXPECT_EQ(cfg->mla->v_head_dim, 12);
  EXPECT_EQ(cfg->head_dim, 4);
}

void expect_error(const result<model_config>& r, const std::vector<std::string>& needles) {
  ASSERT_FALSE(r.ok()) << needles.front();
  for (const auto& n : needles) EXPECT_NE(r.err().message.find(n), std::string::npos) << r.err().message;
}

TEST(mla_config, bad_latent_attention_keys_name_file_and_key) {
  for (const char* key : {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}) {
    expect_error(parse_deepseek_json(deepseek(fmt::format(R"(, "{}": 0)", key))), {"/d/config.json", key});
    expect_error(parse_deepseek_json(deepseek(fmt::format(R"(, "{}": "big")", key))), {"/d/config.json", key});
  }
  expect_error(parse_deepseek_json(deepseek(R"(, "qk_rope_head_dim": 7)")), {"qk_rope_head_dim", "even"});
  expect_error(parse_deepseek_json(deepseek(R"(, "kv_lora_rank": 100000000)")), {"/d/config.json", "implausibly"});
  expect_error(parse_deepseek_json(deepseek(R"(, "num_key_value_heads": 1)")),
               {"/d/config.json", "num_key_value_heads", "num_attention_heads (4)"});
  expect_error(parse_deepseek_json(deepseek(R"(, "attention_bias": "no")")), {"attention_bias"});
}

TEST(mla_config, weights_bind_by_name_and_shape) {
  const model_config cfg = fixture("deepseek-v2-qlora-yarn-bf16");
  auto store = gpu::weight_store::open_dir(model_dir("deepseek-v2-qlora-yarn-bf16"));
  ASSERT_TRUE(store.ok()) << store.err().message;
  auto views = gpu::bind_weight_views(store.value(), cfg);
  ASSERT_TRUE(views.ok()) << views.err().message;
  ASSERT_EQ(views->layers.size(), 3u);
  const gpu::layer_views& l = views->layers[2];
  ASSERT_TRUE(l.mla.has_value());
  EXPECT_FALSE(l.mla->q_proj.has_value());
  EXPECT_EQ(l.mla->q_a_proj->shape, (std::vector<int64_t>{48, 128}));
  EXPECT_EQ(l.mla->q_a_norm->shape, (std::vector<int64_t>{48}));
  EXPECT_EQ(l.mla->q_b_proj->shape, (std::vector<int64_t>{4 * 48, 48}));
  EXPECT_EQ(l.mla->kv_a_proj.shape, (std::vector<int64_t>{64 + 16, 128}));
  EXPECT_EQ(l.mla->kv_a_norm.shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(l.mla->kv_b_proj.shape, (std::vector<int64_t>{4 * (32 + 32), 64}));
  EXPECT_EQ(l.o_proj.shape, (std::vector<int64_t>{128, 4 * 32}));
  EXPECT_EQ(l.q_proj.data, nullptr);
  ASSERT_TRUE(l.moe.has_value());
  EXPECT_EQ(l.moe->experts.size(), 8u);
  EXPECT_EQ(l.moe->shared->gate_proj.shape, (std::vector<int64_t>{2 * 48, 128}));
  EXPECT_FALSE(views->layers[0].moe.has_value());   // first_k_dense_replace 1
  EXPECT_EQ(views->layers[0].gate_proj.shape, (std::vector<int64_t>{256, 128}));
  const gpu::model_weights_f32 w = gpu::upcast_weights(views.value());
  ASSERT_TRUE(w.layers[1].mla.has_value());
  EXPECT_TRUE(w.layers[1].q_proj.empty());
  EXPECT_EQ(w.layers[1].mla->kv_b_proj.size(), static_cast<size_t>(4 * 64 * 64));
  EXPECT_TRUE(w.layers[1].mla->q_proj.empty());
  EXPECT_TRUE(w.layers[1].mla->kv_a_bias.empty());

  const model_config plain = fixture("deepseek-v2-tiny");
  auto plain_store = gpu::weight_store::open_dir(model_dir("deepseek-v2-tiny"));
  ASSERT_TRUE(plain_store.ok());
  auto plain_views = gpu::bind_weight_views(plain_store.value(), plain);
  ASSERT_TRUE(plain_views.ok()) << plain_views.err().message;
  EXPECT_EQ(plain_views->layers[0].mla->q_proj->shape, (std::vector<int64_t>{4 * 24, 64}));
  EXPECT_FALSE(plain_views->layers[0].mla->q_a_proj.has_value());
}

}  // namespace
}  // namespace actorserve::testing
