// Rotary frequencies per rope type (YaRN with its attention factors too), dtype rounding of
// inv_freq, and the rotate_half and interleaved-pair rotations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "gpu/model/rope.hpp"

namespace actorserve::testing {
namespace {

rope_config rope(rope_kind kind, double theta = 10000.0, double factor = 1.0, int64_t orig = 0) {
  rope_config r;
  r.kind = kind;
  r.theta = theta;
  r.factor = factor;
  r.original_max_position_embeddings = orig;
  return r;
}

TEST(rope, default_linear_and_dynamic_frequencies) {
  auto d = gpu::rope_inv_freq(rope(rope_kind::default_rope), 4);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_FLOAT_EQ(d[1], 0.01f);   // 1 / 10000^(2/4)
  auto l = gpu::rope_inv_freq(rope(rope_kind::linear, 10000.0, 4.0), 4);
  EXPECT_EQ(l[0], 0.25f);
  EXPECT_FLOAT_EQ(l[1], 0.0025f);
  // Dynamic NTK: unchanged within the original context, base grown beyond it:
  // base' = theta * (factor * len / orig - (factor - 1))^(dim / (dim - 2)) = 10000 * 3^2.
  auto same = gpu::rope_inv_freq(rope(rope_kind::dynamic, 10000.0, 2.0, 100), 4, 50);
  EXPECT_EQ(same, d);
  auto grown = gpu::rope_inv_freq(rope(rope_kind::dynamic, 10000.0, 2.0, 100), 4, 200);
  EXPECT_EQ(grown[0], 1.0f);
  EXPECT_FLOAT_EQ(grown[1], 1.0f / 300.0f);
}

TEST(rope, llama3_keeps_high_scales_low_and_blends_medium_frequencies) {
  rope_config r = rope(rope_kind::llama3, 500000.0, 8.0, 256);
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  const auto base = gpu::rope_inv_freq(rope(rope_kind::default_rope, 500000.0), 128);
  const auto inv = gpu::rope_inv_freq(r, 128);
  ASSERT_EQ(inv.size(), 64u);
  int high = 0, low = 0, medium = 0;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double wavelen = 2 * M_PI / base[i];
    if (wavelen < 256.0 / 4.0) {   // high frequency: kept
      EXPECT_EQ(inv[i], base[i]) << i;
      ++high;
    } else if (wavelen > 256.0) {   // low frequency: divided by the factor
      EXPECT_FLOAT_EQ(inv[i], base[i] / 8.0f) << i;
      ++low;
    } else {   // smooth = (256 / wavelen - 1) / 3; (1 - smooth) * f / 8 + smooth * f
      const double smooth = (256.0 / wavelen - 1.0) / 3.0;
      EXPECT_NEAR(inv[i], (1 - smooth) * base[i] / 8 + smooth * base[i], 1e-6 * base[i]) << i;
      ++medium;
    }
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
}

TEST(rope, inv_freq_rounds_to_the_checkpoint_dtype) {
  EXPECT_EQ(gpu::round_to_dtype(1.0f / 3.0f, "bfloat16"), 0.333984375f);
  EXPECT_EQ(gpu::round_to_dtype(1.0f / 3.0f, "float16"), 0.333251953125f);
  EXPECT_EQ(gpu::round_to_dtype(1e-6f, "float16"), 17.0f * std::ldexp(1.0f, -24));   // subnormal
  EXPECT_EQ(gpu::round_to_dtype(1.0f / 3.0f, "float32"), 1.0f / 3.0f);
  model_config cfg;
  cfg.architecture = "LlamaForCausalLM";
  cfg.head_dim = 128;
  cfg.rope = rope(rope_kind::default_rope, 500000.0);
  cfg.torch_dtype = "bfloat16";
  for (float f : gpu::model_rope_inv_freq(cfg)) EXPECT_EQ(f, gpu::round_to_dtype(f, "bfloat16"));
  // The architectures whose references reload the checkpoint in float32 keep the exact values.
  cfg.architecture = "Qwen3MoeForCausalLM";
  EXPECT_EQ(gpu::model_rope_inv_freq(cfg), gpu::rope_inv_freq(cfg.rope, cfg.head_dim));
  EXPECT_NE(gpu::model_rope_inv_freq(cfg)[1], gpu::round_to_dtype(gpu::model_rope_inv_freq(cfg)[1], "bfloat16"));
}

TEST(rope, rotate_half_pairs_i_with_i_plus_half) {
  float x[4] = {1, 2, 3, 4};
  const float cos_v[2] = {0, 1}, sin_v[2] = {1, 0};
  gpu::apply_rope(x, cos_v, sin_v, 2);
  EXPECT_EQ(x[0], -3.0f);   // 1*cos0 - 3*sin0
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_EQ(x[2], 1.0f);    // 3*cos0 + 1*sin0
  EXPECT_EQ(x[3], 4.0f);
  float c[2], s[2];
  gpu::rope_cos_sin({1.0f, 0.5f}, 3, c, s);
  EXPECT_FLOAT_EQ(c[0], std::cos(3.0f));
  EXPECT_FLOAT_EQ(s[1], std::sin(1.5f));
}

/// DeepSeek-V2-Lite's rope_scaling: YaRN factor 40 over 4,096 positions, rope dim 64.
rope_config v2_lite_yarn() {
  rope_config r = rope(rope_kind::yarn, 10000.0, 40.0, 4096);
  r.beta_fast = 32.0;
  r.beta_slow = 1.0;
  r.mscale = 0.707;
  r.mscale_all_dim = 0.707;
  return r;
}

TEST(rope, yarn_keeps_fast_dims_interpolates_slow_dims_and_ramps_between) {
  const auto base = gpu::rope_inv_freq(rope(rope_kind::default_rope), 64);
  const auto inv = gpu::rope_inv_freq(v2_lite_yarn(), 64);
  ASSERT_EQ(inv.size(), 32u);
  // Correction range: dims where a frequency turns beta rotations over the original context,
  // 64 * ln(4096 / (beta * 2 pi)) / (2 ln 10000): 10.47 for beta_fast 32 (floored to 10) and
  // 22.51 for beta_slow 1 (ceiled to 23).
  const double low = 10, high = 23;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double want = base[i] / 40.0 * ramp + base[i] * (1.0 - ramp);
    EXPECT_NEAR(inv[i], want, 2e-7 * base[i]) << i;
  }
  EXPECT_EQ(inv[10], base[10]);
  EXPECT_FLOAT_EQ(inv[23], base[23] / 40.0f);
  EXPECT_FLOAT_EQ(inv[31], base[31] / 40.0f);
  // Without truncation the range is 10.47 .. 22.51.
  rope_config exact = v2_lite_yarn();
  exact.truncate = false;
  const auto ramped = gpu::rope_inv_freq(exact, 64);
  const double lo = 64 * std::log(4096 / (32 * 2 * M_PI)) / (2 * std::log(10000.0));
  const double hi = 64 * std::log(4096 / (2 * M_PI)) / (2 * std::log(10000.0));
  for (size_t i : {size_t{10}, size_t{11}, size_t{16}, size_t{22}, size_t{23}}) {
    const double ramp = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
    EXPECT_NEAR(ramped[i], base[i] / 40.0 * ramp + base[i] * (1.0 - ramp), 2e-7 * base[i]) << i;
  }
}

TEST(rope, yarn_attention_factor_and_deepseek_softmax_scale) {
  EXPECT_DOUBLE_EQ(gpu::yarn_mscale(1.0, 0.707), 1.0);
  EXPECT_DOUBLE_EQ(gpu::yarn_mscale(40.0, 0.707), 0.1 * 0.707 * std::log(40.0) + 1.0);
  // DeepSeek-V2(-Lite): mscale = mscale_all_dim, so cos/sin are unscaled and the softmax scale
  // grows by mscale(40, 0.707)^2 = 1.5896.
  rope_config lite = v2_lite_yarn();
  EXPECT_DOUBLE_EQ(gpu::rope_attention_factor(lite), 1.0);
  EXPECT_NEAR(gpu::yarn_softmax_scale_factor(lite), 1.589626, 1e-6);
  // mscale 1 and no mscale_all_dim (deepseek-v2-yarn-tiny): cos/sin times mscale(32, 1), softmax
  // scale unchanged.
  rope_config tiny = rope(rope_kind::yarn, 10000.0, 32.0, 64);
  tiny.mscale = 1.0;
  EXPECT_NEAR(gpu::rope_attention_factor(tiny), 1.346574, 1e-6);
  EXPECT_DOUBLE_EQ(gpu::yarn_softmax_scale_factor(tiny), 1.0);
  // mscale and mscale_all_dim differing: the ratio of the two corrections.
  tiny.mscale_all_dim = 0.5;
  EXPECT_NEAR(gpu::rope_attention_factor(tiny), (0.1 * std::log(32.0) + 1) / (0.05 * std::log(32.0) + 1), 1e-12);
  // An explicit attention_factor wins; the other rope kinds are never scaled.
  tiny.attention_factor = 0.5;
  EXPECT_DOUBLE_EQ(gpu::rope_attention_factor(tiny), 0.5);
  EXPECT_DOUBLE_EQ(gpu::rope_attention_factor(rope(rope_kind::linear, 10000.0, 4.0)), 1.0);
  EXPECT_DOUBLE_EQ(gpu::yarn_softmax_scale_factor(rope(rope_kind::linear, 10000.0, 4.0)), 1.0);
  float c[1], s[1];
  gpu::rope_cos_sin({0.5f}, 2, c, s, 2.0f);
  EXPECT_FLOAT_EQ(c[0], 2.0f * std::cos(1.0f));
  EXPECT_FLOAT_EQ(s[0], 2.0f * std::sin(1.0f));
}

TEST(rope, interleaved_pairs_rotate_2i_with_2i_plus_1) {
  float x[4] = {1, 2, 3, 4};
  const float cos_v[2] = {0, 1}, sin_v[2] = {1, 0};
  gpu::apply_rope_interleaved(x, cos_v, sin_v, 2);
  // (1 + 2i) * (0 + 1i) = -2 + 1i; (3 + 4i) * 1 = 3 + 4i.
  EXPECT_EQ(x[0], -2.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_EQ(x[2], 3.0f);
  EXPECT_EQ(x[3], 4.0f);
}

}  // namespace
}  // namespace actorserve::testing
