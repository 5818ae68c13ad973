// Paged attention against a CPU fp32 reference over the same (rounded) cache contents: prefill
// chunks over a cached prefix, decode, awkward KV lengths, shuffled block tables, batch 1 and 257,
// with and without split-KV.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "cuda_test_util.hpp"
#include "gpu/cuda/attention_plan.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

struct seq_spec { int context_len; int q_len; };

struct attention_case {
  int H, KVH, D, block_size;
  std::vector<seq_spec> seqs;
};

/// Runs one case; returns max |gpu - ref| / max |ref|.
double run_case(act_dtype dt, const attention_case& c, int target_blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  const int H = c.H, KVH = c.KVH, D = c.D, bs = c.block_size, G = H / KVH;
  int total_blocks = 0, n_tokens = 0;
  for (auto& s : c.seqs) {
    total_blocks += (s.context_len + bs - 1) / bs;
    n_tokens += s.q_len;
  }
  total_blocks += 3;  // unused blocks in the pool
  std::vector<int32_t> perm(total_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const size_t row = size_t(KVH) * D;
  std::vector<uint16_t> kc(size_t(total_blocks) * bs * row), vc(kc.size());
  for (size_t i = 0; i < kc.size(); ++i) {
    kc[i] = to_act_bits(dt, nd(rng));
    vc[i] = to_act_bits(dt, nd(rng));
  }
  const int q_stride = (H + 2 * KVH) * D;  // as in the fused QKV buffer
  std::vector<float> q(size_t(n_tokens) * q_stride);
  for (auto& x : q) x = nd(rng);
  std::vector<cuda::attn_seq> seqs;
  std::vector<int32_t> bt;
  int next_block = 0, q_start = 0;
  for (auto& s : c.seqs) {
    cuda::attn_seq a;
    a.q_start = q_start;
    a.q_len = s.q_len;
    a.context_len = s.context_len;
    a.bt_offset = int32_t(bt.size());
    for (int b = 0; b < (s.context_len + bs - 1) / bs; ++b) bt.push_back(perm[next_block++]);
    seqs.push_back(a);
    q_start += s.q_len;
  }
  const int max_partials = 4096;
  auto plan = cuda::plan_attention(seqs, H, KVH, target_blocks, max_partials);
  dev_vec<float> d_q(q);
  dev_vec<uint16_t> d_k(kc), d_v(vc);
  dev_vec<int32_t> d_bt(bt);
  dev_vec<cuda::attn_seq> d_seqs(seqs);
  dev_vec<cuda::attn_item> d_items(plan.items);
  dev_vec<cuda::attn_combine> d_comb(plan.combines);
  dev_vec<int32_t> d_counts(std::vector<int32_t>{int32_t(plan.items.size()), int32_t(plan.combines.size())});
  dev_vec<float> d_pacc(size_t(std::max(1, plan.num_partials)) * cuda::attn_tile_rows * D);
  dev_vec<float> d_pml(size_t(std::max(1, plan.num_partials)) * cuda::attn_tile_rows * 2);
  dev_vec<uint16_t> d_out(size_t(n_tokens) * H * D);
  d_out.poison();
  d_pacc.poison();
  cuda::attention_args a;
  a.q = d_q.get();
  a.q_stride = q_stride;
  a.k_cache = d_k.get();
  a.v_cache = d_v.get();
  a.block_tables = d_bt.get();
  a.seqs = d_seqs.get();
  a.items = d_items.get();
  a.combines = d_comb.get();
  a.counts = d_counts.get();
  a.item_grid = int(plan.items.size()) + 5;  // extra blocks must exit
  a.combine_grid = int(plan.combines.size());
  a.partial_acc = d_pacc.get();
  a.partial_ml = d_pml.get();
  a.out = d_out.get();
  a.num_heads = H;
  a.num_kv_heads = KVH;
  a.head_dim = D;
  a.block_size = bs;
  a.scale = 1.0f / std::sqrt(float(D));
  EXPECT_EQ(cuda::paged_attention(dt, a, nullptr), 0);
  auto bits = d_out.download();
  std::vector<float> got(bits.size()), ref(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) got[i] = from_act_bits(dt, bits[i]);
  for (size_t si = 0; si < seqs.size(); ++si) {
    const auto& s = seqs[si];
    for (int i = 0; i < s.q_len; ++i) {
      const int t = s.q_start + i, qpos = s.context_len - s.q_len + i;
      for (int h = 0; h < H; ++h) {
        const int kvh = h / G;
        std::vector<double> sc(qpos + 1);
        double mx = -1e300;
        for (int k = 0; k <= qpos; ++k) {
          const size_t base = (size_t(bt[s.bt_offset + k / bs]) * bs + k % bs) * row + size_t(kvh) * D;
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += double(q[size_t(t) * q_stride + h * D + d]) * from_act_bits(dt, kc[base + d]);
          sc[k] = dot / std::sqrt(double(D));
          mx = std::max(mx, sc[k]);
        }
        double l = 0;
        for (auto& x : sc) l += (x = std::exp(x - mx));
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int k = 0; k <= qpos; ++k) {
            const size_t base = (size_t(bt[s.bt_offset + k / bs]) * bs + k % bs) * row + size_t(kvh) * D;
            acc += sc[k] * from_act_bits(dt, vc[base + d]);
          }
          ref[size_t(t) * H * D + h * D + d] = float(acc / l);
        }
      }
    }
  }
  return rel_max_err(got, ref);
}

class CudaAttention : public ::testing::TestWithParam<act_dtype> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_P(CudaAttention, PrefillChunksAndDecodeMatchCpu) {
  const act_dtype dt = GetParam();
  // Whole prompts, chunks over a cached prefix and decode tokens in one step; KV lengths 1, 17,
  // 97 and 1000, none a multiple of the block size except by accident.
  const std::vector<seq_spec> mixed = {{1, 1}, {17, 17}, {97, 30}, {1000, 1}, {1000, 77}, {17, 1}, {97, 1}};
  for (const attention_case& c : {attention_case{4, 2, 16, 16, mixed}, attention_case{4, 1, 32, 16, mixed},
                                  attention_case{8, 2, 128, 16, mixed}, attention_case{4, 4, 256, 32, mixed},
                                  attention_case{32, 8, 128, 16, {{1000, 1}}}}) {
    for (int target : {0, 264}) {
      const double err = run_case(dt, c, target, 11);
      std::printf("attention H=%d KVH=%d D=%d bs=%d split_target=%d: max abs err / max abs ref %.3g\n", c.H, c.KVH,
                  c.D, c.block_size, target, err);
      EXPECT_LT(err, 1e-2);
    }
  }
}

TEST_P(CudaAttention, DecodeBatch257MatchesCpu) {
  const act_dtype dt = GetParam();
  std::vector<seq_spec> seqs;
  const int lens[] = {1, 17, 97, 1000, 33, 250};
  for (int i = 0; i < 257; ++i) seqs.push_back({lens[i % 6], 1});
  for (int target : {0, 264}) {
    const double err = run_case(dt, attention_case{8, 2, 64, 16, seqs}, target, 12);
    std::printf("attention decode batch 257 split_target=%d: max abs err / max abs ref %.3g\n", target, err);
    EXPECT_LT(err, 1e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttention, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return info.param == act_dtype::bf16 ? "bf16" : "fp16"; });

}  // namespace
}  // namespace actorserve::testing
