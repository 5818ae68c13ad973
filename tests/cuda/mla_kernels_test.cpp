// DeepSeek-V2's latent-attention kernels against plain host loops over the same rounded operands:
// the latent norm, interleaved rope (with YaRN's attention factor) and cache write against
// gpu/model/rope's apply_rope_interleaved, and the absorbed attention over a shuffled paged cache
// at awkward sizes (1, 17, 97 keys, a block size that does not divide them, padding rows, heads
// that are not a multiple of 16) in one piece and split over the context.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "gpu/cuda/mla/mla_kernels.hpp"
#include "gpu/model/rope.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

class CudaMla : public ::testing::TestWithParam<act_dtype> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

std::vector<float> uniform(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ud(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = ud(rng);
  return v;
}

struct attention_shape {
  int heads, rank, rope_dim, block_size;
  std::vector<int> contexts;  ///< per row: its position + 1; 0 for a padding row
};

TEST_P(CudaMla, LatentAttentionMatchesAHostLoopInOnePieceAndSplit) {
  const act_dtype dt = GetParam();
  const attention_shape shapes[] = {{4, 32, 8, 16, {1, 17, 97, 0}},         // deepseek-v2-tiny's sizes
                                    {20, 64, 16, 7, {97, 1, 33, 0, 64}},    // two CTAs of heads, the second partial
                                    {16, 512, 64, 64, {300, 1, 129}}};      // DeepSeek-V2-Lite's widths
  for (const attention_shape& sh : shapes) {
    const int n = int(sh.contexts.size()), H = sh.heads, r = sh.rank, W = r + sh.rope_dim, bs = sh.block_size;
    // Each row is its own sequence over its own shuffled blocks.
    int total_blocks = 0;
    for (int c : sh.contexts) total_blocks += (c + bs - 1) / bs;
    std::vector<int32_t> perm(size_t(total_blocks) + 3);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(uint32_t(W + H));
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> tables, token_seqs(size_t(n), -1), positions(size_t(n), 0);
    std::vector<cuda::attn_seq> seqs;
    for (int t = 0; t < n; ++t) {
      if (sh.contexts[t] == 0) continue;
      cuda::attn_seq s;
      s.q_start = t;
      s.q_len = 1;
      s.context_len = sh.contexts[t];
      s.bt_offset = int32_t(tables.size());
      for (int b = 0; b < (sh.contexts[t] + bs - 1) / bs; ++b) tables.push_back(perm[tables.size()]);
      token_seqs[t] = int32_t(seqs.size());
      positions[t] = sh.contexts[t] - 1;
      seqs.push_back(s);
    }
    const size_t slots = perm.size() * size_t(bs);
    std::vector<uint16_t> cache_bits = random_act_bits(dt, slots * W, 3);
    const std::vector<float> q = uniform(size_t(n) * H * W, 4, 0.3f);
    const float scale = 0.125f;
    // The host loop: fp64 over the rounded cache.
    std::vector<float> want(size_t(n) * H * r, 0.0f);
    for (int t = 0; t < n; ++t) {
      if (token_seqs[t] < 0) continue;
      const cuda::attn_seq& s = seqs[size_t(token_seqs[t])];
      for (int h = 0; h < H; ++h) {
        const float* qh = &q[(size_t(t) * H + h) * W];
        std::vector<double> p(size_t(s.context_len));
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < s.context_len; ++j) {
          const size_t slot = size_t(tables[size_t(s.bt_offset + j / bs)]) * bs + j % bs;
          double d = 0.0;
          for (int k = 0; k < W; ++k) d += double(qh[k]) * from_act_bits(dt, cache_bits[slot * W + k]);
          p[size_t(j)] = d * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        for (auto& x : p) sum += (x = std::exp(x - mx));
        for (int j = 0; j < s.context_len; ++j) {
          const size_t slot = size_t(tables[size_t(s.bt_offset + j / bs)]) * bs + j % bs;
          for (int k = 0; k < r; ++k)
            want[(size_t(t) * H + h) * r + k] += float(p[size_t(j)] / sum * from_act_bits(dt, cache_bits[slot * W + k]));
        }
      }
    }
    dev_vec<uint16_t> d_cache(cache_bits), d_out(size_t(n) * H * r);
    dev_vec<float> d_q(q), d_po(size_t(cuda::mla_max_splits) * n * H * r), d_pml(size_t(cuda::mla_max_splits) * n * H * 2);
    dev_vec<int32_t> d_tables(tables), d_token_seqs(token_seqs), d_positions(positions);
    dev_vec<cuda::attn_seq> d_seqs(seqs);
    for (int splits : {1, 3, cuda::mla_max_splits}) {
      d_out.poison();
      const cuda::latent_attention_args a{.q_abs = d_q.get(), .cache = d_cache.get(), .block_tables = d_tables.get(),
                                          .seqs = d_seqs.get(), .token_seqs = d_token_seqs.get(),
                                          .positions = d_positions.get(), .n = n, .num_heads = H, .rank = r,
                                          .rope_dim = sh.rope_dim, .block_size = bs, .num_splits = splits,
                                          .scale = scale, .partial_o = d_po.get(), .partial_ml = d_pml.get(),
                                          .out = d_out.get()};
      ASSERT_EQ(cuda::latent_attention(dt, a, nullptr), 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto got = download_act(dt, d_out);
      for (int t = 0; t < n; ++t) {
        if (token_seqs[t] >= 0) continue;
        for (int k = 0; k < H * r; ++k) ASSERT_EQ(got[size_t(t) * H * r + k], 0.0f) << "padding row " << t;
      }
      EXPECT_LT(rel_max_err(got, want), dt == act_dtype::bf16 ? 1e-2 : 2e-3)
          << H << " heads, rank " << r << ", block " << bs << ", " << splits << " splits";
    }
  }
}

TEST_P(CudaMla, LatentWriteNormalisesRotatesAndWritesItsSlot) {
  const act_dtype dt = GetParam();
  const int n = 5, H = 3, r = 32, dn = 16, dr = 8, W = r + dr, qk = dn + dr, num_slots = 40;
  rope_config rc;
  rc.kind = rope_kind::yarn;
  rc.factor = 32.0;
  rc.original_max_position_embeddings = 64;
  rc.mscale = 1.0;
  const std::vector<float> inv_freq = gpu::rope_inv_freq(rc, dr);
  const float factor = float(gpu::rope_attention_factor(rc));
  const std::vector<float> kv_a = uniform(size_t(n) * W, 5), bias = uniform(W, 6, 0.1f), norm = uniform(r, 7);
  const std::vector<uint16_t> q_bits = random_act_bits(dt, size_t(n) * H * qk, 8);
  const std::vector<int32_t> positions = {0, 5, 77, 300, 2}, slots = {3, 17, -1, 39, 0};
  dev_vec<float> d_kv_a(kv_a), d_bias(bias), d_norm(norm), d_inv(inv_freq), d_q_abs(size_t(n) * H * W);
  dev_vec<uint16_t> d_q(q_bits), d_cache(size_t(num_slots) * W);
  dev_vec<int32_t> d_pos(positions), d_slots(slots);
  d_cache.poison();
  const cuda::mla_latent_args a{.kv_a = d_kv_a.get(), .kv_a_bias = d_bias.get(), .kv_a_norm = d_norm.get(),
                                .eps = 1e-6f, .q = d_q.get(), .q_abs = d_q_abs.get(), .positions = d_pos.get(),
                                .slots = d_slots.get(), .inv_freq = d_inv.get(), .attention_factor = factor,
                                .cache = d_cache.get(), .n = n, .num_heads = H, .rank = r, .nope_dim = dn,
                                .rope_dim = dr};
  ASSERT_EQ(cuda::mla_latent_write(dt, a, nullptr), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto cache = download_act(dt, d_cache);
  const auto q_abs = d_q_abs.download();
  std::vector<float> cs(dr / 2), sn(dr / 2);
  for (int t = 0; t < n; ++t) {
    gpu::rope_cos_sin(inv_freq, positions[t], cs.data(), sn.data(), factor);
    std::vector<float> row(static_cast<size_t>(W));
    double ss = 0.0;
    for (int i = 0; i < W; ++i) row[i] = kv_a[size_t(t) * W + i] + bias[i];
    for (int i = 0; i < r; ++i) ss += double(row[i]) * row[i];
    const float inv = 1.0f / std::sqrt(float(ss / r) + 1e-6f);
    for (int i = 0; i < r; ++i) row[i] = norm[i] * (row[i] * inv);
    gpu::apply_rope_interleaved(row.data() + r, cs.data(), sn.data(), dr / 2);
    for (int i = 0; slots[t] >= 0 && i < W; ++i) {
      EXPECT_NEAR(cache[size_t(slots[t]) * W + i], row[i], 1e-2 * std::max(1.0f, std::abs(row[i])))
          << "token " << t << " value " << i;
    }
    for (int h = 0; h < H; ++h) {
      std::vector<float> pe(static_cast<size_t>(dr));
      for (int i = 0; i < dr; ++i) pe[i] = from_act_bits(dt, q_bits[(size_t(t) * H + h) * qk + dn + i]);
      gpu::apply_rope_interleaved(pe.data(), cs.data(), sn.data(), dr / 2);
      for (int i = 0; i < dr; ++i)
        EXPECT_NEAR(q_abs[(size_t(t) * H + h) * W + r + i], pe[i], 1e-5f) << "token " << t << " head " << h;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMla, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return std::string(info.param == act_dtype::bf16 ? "bf16" : "fp16"); });

}  // namespace
}  // namespace actorserve::testing
