// The CPU paged KV cache's layouts: per-head K/V and multi-head latent attention's one row per
// token, the bytes a block takes in each, and block copies over all layers.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "gpu/cpu/kv_cache.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using gpu::cpu::kv_cache_layout;
using gpu::cpu::paged_kv_cache;

kv_cache_layout layout_of(const std::string& model) {
  auto cfg = load_model_config(model_dir(model));
  EXPECT_TRUE(cfg.ok()) << (cfg.ok() ? "" : cfg.err().message);
  return cfg.ok() ? kv_cache_layout::of(cfg.value()) : kv_cache_layout{};
}

TEST(kv_cache, layouts_follow_the_attention) {
  const kv_cache_layout llama = layout_of("llama-tiny");   // 2 kv heads of 16
  EXPECT_FALSE(llama.is_latent());
  EXPECT_EQ(llama.floats_per_token(), 2 * 2 * 16);
  EXPECT_EQ(paged_kv_cache::bytes_per_block(2, 16, llama), 4u * 2 * 16 * 64);
  // DeepSeek-V2-Lite: 512 + 64 = 576 floats a token and layer instead of 16 heads x (192 + 128).
  const kv_cache_layout lite = kv_cache_layout::latent(512 + 64);
  EXPECT_TRUE(lite.is_latent());
  EXPECT_EQ(lite.floats_per_token(), 576);
  EXPECT_EQ(paged_kv_cache::bytes_per_block(27, 16, lite), 4u * 27 * 16 * 576);
}

TEST(kv_cache, regions_are_disjoint_and_copies_cover_every_layer) {
  for (const kv_cache_layout& layout : {kv_cache_layout::per_head(2, 8), kv_cache_layout::latent(40)}) {
    const int64_t layers = 3, blocks = 4, bs = 5;
    paged_kv_cache cache(layers, blocks, bs, layout);
    const size_t per_layer_block = static_cast<size_t>(bs * layout.floats_per_token());
    // Fill every (layer, block) through its accessors with a distinct value per float.
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t b = 0; b < blocks; ++b) {
        const float tag = static_cast<float>(1000 * l + 100 * b);
        if (layout.is_latent()) {
          float* row = cache.latent(l, b);
          for (size_t i = 0; i < per_layer_block; ++i) row[i] = tag + static_cast<float>(i);
        } else {
          const size_t head = static_cast<size_t>(bs * layout.head_dim);
          for (int64_t h = 0; h < layout.num_kv_heads; ++h)
            for (size_t i = 0; i < head; ++i) {
              cache.k(l, b, h)[i] = tag + static_cast<float>(static_cast<size_t>(h) * head + i);
              cache.v(l, b, h)[i] = tag + static_cast<float>((static_cast<size_t>(layout.num_kv_heads + h)) * head + i);
            }
        }
      }
    // Each region holds what was written to it (no overlap), and a copy moves all layers.
    cache.copy_block(1, 3);
    for (int64_t l = 0; l < layers; ++l) {
      const float* src = layout.is_latent() ? cache.latent(l, 1) : cache.k(l, 1, 0);
      const float* dst = layout.is_latent() ? cache.latent(l, 3) : cache.k(l, 3, 0);
      for (size_t i = 0; i < per_layer_block; ++i) {
        ASSERT_EQ(src[i], static_cast<float>(1000 * l + 100) + static_cast<float>(i)) << l << " " << i;
        ASSERT_EQ(dst[i], src[i]) << l << " " << i;
      }
      const float* untouched = layout.is_latent() ? cache.latent(l, 2) : cache.k(l, 2, 0);
      EXPECT_EQ(untouched[0], static_cast<float>(1000 * l + 200));
    }
  }
}

}  // namespace
}  // namespace actorserve::testing
