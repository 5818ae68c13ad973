// The dummy weights of --load-format dummy: bound with exactly the shapes the safetensors loader
// binds for each architecture, counted like read weights, seeded, in [-1e-3, 1e-3] with norms
// of 1, and a row range of a tensor equals the same rows of the whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "gpu/model/model_weights.hpp"
#include "test_data.hpp"

namespace actorserve::gpu {
namespace {

using actorserve::testing::model_dir;

void expect_same_shapes(const tensor_view& real, const tensor_view& dummy) {
  EXPECT_EQ(real.shape, dummy.shape) << real.name;
  EXPECT_EQ(real.name, dummy.name);
  EXPECT_TRUE(dummy.dummy.has_value()) << dummy.name;
}

TEST(dummy_weights, every_architecture_binds_the_shapes_the_loader_reads) {
  for (const char* fixture : {"llama-tiny", "qwen2-tiny", "qwen3-tiny", "mistral-tiny", "mixtral-tiny",
                              "qwen3-moe-tiny", "deepseek-v2-tiny", "deepseek-v2-qlora-yarn-bf16"}) {
    SCOPED_TRACE(fixture);
    auto real = open_model_files(model_dir(fixture));
    ASSERT_TRUE(real.ok()) << real.err().message;
    auto dummy = open_model_files(model_dir(fixture), weight_source{true, 5});
    ASSERT_TRUE(dummy.ok()) << dummy.err().message;
    const model_weight_views &r = real->views, &d = dummy->views;
    expect_same_shapes(r.embed_tokens, d.embed_tokens);
    expect_same_shapes(r.final_norm, d.final_norm);
    expect_same_shapes(r.lm_head, d.lm_head);
    ASSERT_EQ(r.layers.size(), d.layers.size());
    uint64_t elements = 0;
    for (const auto& l : r.layers) {
      for (const tensor_view* t : {&l.input_norm, &l.o_proj, &l.post_norm, &l.gate_proj, &l.down_proj})
        if (t->data) elements += t->num_elements();
      if (l.moe) {
        elements += l.moe->router.num_elements();
        for (const auto& e : l.moe->experts)
          elements += e.gate_proj.num_elements() + e.up_proj.num_elements() + e.down_proj.num_elements();
      }
    }
    for (size_t i = 0; i < r.layers.size(); ++i) {
      const layer_views &rl = r.layers[i], &dl = d.layers[i];
      expect_same_shapes(rl.input_norm, dl.input_norm);
      expect_same_shapes(rl.o_proj, dl.o_proj);
      expect_same_shapes(rl.post_norm, dl.post_norm);
      EXPECT_EQ(rl.q_proj.shape, dl.q_proj.shape);
      EXPECT_EQ(rl.q_norm.has_value(), dl.q_norm.has_value());
      EXPECT_EQ(rl.q_bias.has_value(), dl.q_bias.has_value());
      EXPECT_EQ(rl.mla.has_value(), dl.mla.has_value());
      if (rl.mla) expect_same_shapes(rl.mla->kv_b_proj, dl.mla->kv_b_proj);
      ASSERT_EQ(rl.moe.has_value(), dl.moe.has_value());
      if (rl.moe) {
        ASSERT_EQ(rl.moe->experts.size(), dl.moe->experts.size());
        expect_same_shapes(rl.moe->router, dl.moe->router);
        expect_same_shapes(rl.moe->experts.back().down_proj, dl.moe->experts.back().down_proj);
        EXPECT_EQ(rl.moe->shared.has_value(), dl.moe->shared.has_value());
      } else {
        expect_same_shapes(rl.gate_proj, dl.gate_proj);
      }
    }
    // Memory planning and load progress count the generated tensors as bf16 weights.
    EXPECT_EQ(dummy->store.total_bytes() % 2, 0u);
    EXPECT_GE(dummy->store.total_bytes(), 2 * elements);
  }
}

TEST(dummy_weights, a_bf16_checkpoint_and_its_dummy_count_the_same_bytes) {
  auto real = open_model_files(model_dir("llama-hd128-bf16"));
  ASSERT_TRUE(real.ok()) << real.err().message;
  auto dummy = open_model_files(model_dir("llama-hd128-bf16"), weight_source{true, 0});
  ASSERT_TRUE(dummy.ok()) << dummy.err().message;
  EXPECT_EQ(dummy->store.total_bytes(), real->store.total_bytes());
}

TEST(dummy_weights, values_are_seeded_small_and_norms_are_one) {
  auto a = open_model_files(model_dir("qwen3-tiny"), weight_source{true, 1});
  auto b = open_model_files(model_dir("qwen3-tiny"), weight_source{true, 1});
  auto c = open_model_files(model_dir("qwen3-tiny"), weight_source{true, 2});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const auto wa = upcast_weights(a->views), wb = upcast_weights(b->views), wc = upcast_weights(c->views);
  EXPECT_EQ(wa.embed_tokens, wb.embed_tokens);
  EXPECT_EQ(wa.layers.at(0).q_proj, wb.layers.at(0).q_proj);
  EXPECT_NE(wa.embed_tokens, wc.embed_tokens);
  EXPECT_NE(wa.layers.at(0).q_proj, wa.layers.at(0).k_proj);   // each tensor has its own stream
  for (const auto* norm : {&wa.final_norm, &wa.layers.at(0).input_norm, &wa.layers.at(0).q_norm})
    for (float v : *norm) ASSERT_EQ(v, 1.0f);
  double sum = 0;
  float lo = 1, hi = -1;
  for (float v : wa.embed_tokens) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -dummy_weight_range);
  EXPECT_LE(hi, dummy_weight_range);
  EXPECT_LT(lo, -0.9f * dummy_weight_range);
  EXPECT_GT(hi, 0.9f * dummy_weight_range);
  EXPECT_LT(std::abs(sum / static_cast<double>(wa.embed_tokens.size())), 5e-5);
}

TEST(dummy_weights, a_row_range_is_those_rows_of_the_whole_tensor) {
  auto files = open_model_files(model_dir("llama-tiny"), weight_source{true, 9});
  ASSERT_TRUE(files.ok()) << files.err().message;
  const tensor_view& q = files->views.layers.at(0).q_proj;
  const std::vector<float> whole = weight_store::to_f32(q);
  tensor_view rows = q;
  const int64_t cols = q.shape[1];
  rows.dummy->first += static_cast<uint64_t>(3 * cols);
  rows.shape[0] = 2;
  const std::vector<float> part = weight_store::to_f32(rows);
  ASSERT_EQ(part.size(), static_cast<size_t>(2 * cols));
  EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + 3 * cols));
}

TEST(dummy_weights, the_bf16_bits_are_a_fixed_function) {
  // Pinned so that a change to the hash (which the CUDA fill shares) is seen.
  EXPECT_EQ(dummy_bf16_bits(0, dummy_tensor_id("x"), 0, true), 0x3f80);
  const uint16_t b = dummy_bf16_bits(0, dummy_tensor_id("model.embed_tokens.weight"), 0, false);
  EXPECT_EQ(dummy_bf16_bits(0, dummy_tensor_id("model.embed_tokens.weight"), 0, false), b);
  EXPECT_LE(std::abs(dummy_bf16_to_f32(b)), dummy_weight_range);
  EXPECT_TRUE(dummy_is_norm("model.layers.0.self_attn.q_norm.weight"));
  EXPECT_TRUE(dummy_is_norm("model.layers.3.post_attention_layernorm.weight"));
  EXPECT_FALSE(dummy_is_norm("model.layers.0.mlp.gate.weight"));
}

TEST(dummy_weights, an_fp8_checkpoint_config_and_a_missing_config_are_refused_by_name) {
  auto fp8 = open_model_files(model_dir("qwen3-hd128-fp8"), weight_source{true, 0});
  ASSERT_FALSE(fp8.ok());
  EXPECT_NE(fp8.err().message.find("--load-format dummy"), std::string::npos) << fp8.err().message;
  EXPECT_NE(fp8.err().message.find("quantization_config"), std::string::npos) << fp8.err().message;
  auto none = open_model_files("/nonexistent-model", weight_source{true, 0});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.err().message.find("/nonexistent-model/config.json"), std::string::npos) << none.err().message;
}

}  // namespace
}  // namespace actorserve::gpu
