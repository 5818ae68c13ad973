// Element-wise kernels against CPU fp32 references: embedding, residual add + RMSNorm,
// SiLU-and-mul, rotary embedding fused with the paged KV write, KV block copies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "cuda_test_util.hpp"
#include "config/model_config.hpp"
#include "gpu/cuda/attention/launch.hpp"
#include "gpu/model/fp8.hpp"
#include "gpu/model/rope.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// rope_kv_write's arguments for n tokens of H q / KVH kv heads of D, into caches k and v.
cuda::rope_kv_args rope_args(float* qkv, const float* bias, const int32_t* positions, const int32_t* slots,
                             const float* inv_freq, void* k_cache, void* v_cache, int n, int H, int KVH, int D) {
  cuda::rope_kv_args a;
  a.qkv = qkv;
  a.bias = bias;
  a.positions = positions;
  a.slots = slots;
  a.inv_freq = inv_freq;
  a.k_cache = k_cache;
  a.v_cache = v_cache;
  a.n = n;
  a.num_heads = H;
  a.num_kv_heads = KVH;
  a.head_dim = D;
  return a;
}

class CudaKernels : public ::testing::TestWithParam<act_dtype> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_P(CudaKernels, AddRmsNormMatchesCpu) {
  const act_dtype dt = GetParam();
  for (int hidden : {64, 4096, 5120 + 8, 8192 + 520}) {  // the last one: over 8 values per thread
    for (int n : {1, 257}) {
      auto res = randn(size_t(n) * hidden, 1), delta = randn(size_t(n) * hidden, 2), bias = randn(hidden, 3);
      auto w = randn(hidden, 4);
      std::vector<int32_t> rows(n);
      std::iota(rows.begin(), rows.end(), 0);
      std::reverse(rows.begin(), rows.end());
      dev_vec<float> d_res(res), d_delta(delta), d_bias(bias), d_w(w);
      dev_vec<int32_t> d_rows(rows);
      dev_vec<uint16_t> d_out(size_t(n) * hidden);
      d_out.poison();
      ASSERT_EQ(cuda::add_rmsnorm(dt, d_res.get(), d_delta.get(), d_bias.get(), d_w.get(), 1e-5f, d_rows.get(), n,
                                  hidden, d_out.get(), nullptr), 0);
      auto out = download_act(dt, d_out);
      auto res_out = d_res.download();
      std::vector<float> ref(out.size()), ref_res(res.size());
      for (int i = 0; i < n; ++i) {
        const int r = rows[i];
        double ss = 0;
        for (int k = 0; k < hidden; ++k) {
          const size_t j = size_t(r) * hidden + k;
          ref_res[j] = res[j] + delta[j] + bias[k];
          ss += double(ref_res[j]) * ref_res[j];
        }
        const double rstd = 1.0 / std::sqrt(ss / hidden + 1e-5);
        for (int k = 0; k < hidden; ++k) ref[size_t(i) * hidden + k] = float(w[k] * ref_res[size_t(r) * hidden + k] * rstd);
      }
      EXPECT_LT(rel_max_err(res_out, ref_res), 1e-6) << "hidden " << hidden << " n " << n;
      EXPECT_LT(rel_max_err(out, ref), 8e-3) << "hidden " << hidden << " n " << n;
    }
  }
}

TEST_P(CudaKernels, AddRmsNormOfManyRowsMatchesCpuAndNotTheRowCount) {
  // Over kNormRegsMaxRows rows a 128-thread block takes each row (16-byte loads, its own order
  // of sums). Both paths the executor uses: adding a delta, and the residual alone (the o / down
  // GEMMs added into it); rows through an index list; each row's bits the same at another count.
  const act_dtype dt = GetParam();
  for (int hidden : {4096, 5120 + 8, 8192}) {
    for (const bool with_delta : {true, false}) {
      const int n = 1000, fewer = 129;
      auto res = randn(size_t(n) * hidden, 5), delta = randn(size_t(n) * hidden, 6), bias = randn(hidden, 7);
      auto w = randn(hidden, 8);
      std::vector<int32_t> rows(n);
      for (int i = 0; i < n; ++i) rows[i] = (i * 7) % n;  // 7 and 1000 coprime: a permutation
      dev_vec<float> d_res(res), d_res2(res), d_delta(delta), d_bias(bias), d_w(w);
      dev_vec<int32_t> d_rows(rows);
      dev_vec<uint16_t> d_out(size_t(n) * hidden), d_out2(size_t(fewer) * hidden);
      d_out.poison();
      d_out2.poison();
      const float* del = with_delta ? d_delta.get() : nullptr;
      const float* b = with_delta ? d_bias.get() : nullptr;
      ASSERT_EQ(cuda::add_rmsnorm(dt, d_res.get(), del, b, d_w.get(), 1e-5f, d_rows.get(), n, hidden, d_out.get(),
                                  nullptr), 0);
      ASSERT_EQ(cuda::add_rmsnorm(dt, d_res2.get(), del, b, d_w.get(), 1e-5f, d_rows.get(), fewer, hidden,
                                  d_out2.get(), nullptr), 0);
      auto out = download_act(dt, d_out);
      auto res_out = d_res.download();
      std::vector<float> ref(out.size()), ref_res(res);
      for (int i = 0; i < n; ++i) {
        const int r = rows[i];
        double ss = 0;
        for (int k = 0; k < hidden; ++k) {
          const size_t j = size_t(r) * hidden + k;
          if (with_delta) ref_res[j] = res[j] + delta[j] + bias[k];
          ss += double(ref_res[j]) * ref_res[j];
        }
        const double rstd = 1.0 / std::sqrt(ss / hidden + 1e-5);
        for (int k = 0; k < hidden; ++k) ref[size_t(i) * hidden + k] = float(w[k] * ref_res[size_t(r) * hidden + k] * rstd);
      }
      const std::string what = "hidden " + std::to_string(hidden) + (with_delta ? " with" : " without") + " delta";
      if (with_delta)
        EXPECT_LT(rel_max_err(res_out, ref_res), 1e-6) << what;
      else
        EXPECT_EQ(count_unequal(res_out, res), 0) << what << ": the residual must stay as it was";
      EXPECT_LT(rel_max_err(out, ref), 8e-3) << what;
      auto out_first = d_out.download(), out_fewer = d_out2.download();
      out_first.resize(out_fewer.size());
      EXPECT_EQ(count_unequal(out_first, out_fewer), 0) << what << ": " << fewer << " rows against " << n;
    }
  }
}

TEST_P(CudaKernels, EmbeddingAndSiluMulMatchCpu) {
  const act_dtype dt = GetParam();
  const int vocab = 1000, hidden = 72, n = 257;
  auto table = randn(size_t(vocab) * hidden, 5);
  std::vector<uint16_t> table_bits(table.size());
  for (size_t i = 0; i < table.size(); ++i) table_bits[i] = to_act_bits(dt, table[i]);
  std::vector<int32_t> ids(n);
  std::mt19937 rng(6);
  for (auto& id : ids) id = int32_t(rng() % vocab);
  dev_vec<uint16_t> d_table(table_bits);
  dev_vec<int32_t> d_ids(ids);
  dev_vec<float> d_emb(size_t(n) * hidden);
  d_emb.poison();
  ASSERT_EQ(cuda::embedding_gather(dt, d_table.get(), d_ids.get(), n, hidden, d_emb.get(), nullptr), 0);
  auto emb = d_emb.download();
  for (int t = 0; t < n; ++t)
    for (int k = 0; k < hidden; ++k)
      ASSERT_EQ(emb[size_t(t) * hidden + k], from_act_bits(dt, table_bits[size_t(ids[t]) * hidden + k]));

  // inter % 4 == 0 takes the 4-wide kernel, 342 the scalar one.
  for (const int inter : {344, 342}) {
    auto gu = randn(size_t(n) * 2 * inter, 7, 3.0f);
    dev_vec<float> d_gu(gu);
    dev_vec<uint16_t> d_out(size_t(n) * inter);
    d_out.poison();
    ASSERT_EQ(cuda::silu_and_mul(dt, d_gu.get(), n, inter, d_out.get(), nullptr), 0);
    auto out = download_act(dt, d_out);
    std::vector<float> ref(out.size());
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < inter; ++i) {
        const double g = gu[size_t(t) * 2 * inter + i], u = gu[size_t(t) * 2 * inter + inter + i];
        ref[size_t(t) * inter + i] = float(g / (1 + std::exp(-g)) * u);
      }
    EXPECT_LT(rel_max_err(out, ref), 8e-3) << "inter " << inter;
  }
}

TEST_P(CudaKernels, RopeKvWriteMatchesCpu) {
  const act_dtype dt = GetParam();
  struct shape { int H, KVH, D; rope_kind kind; };
  for (const shape& sh : {shape{4, 2, 16, rope_kind::default_rope}, shape{32, 8, 128, rope_kind::llama3},
                          shape{4, 1, 32, rope_kind::linear}, shape{8, 2, 64, rope_kind::yarn}}) {
    rope_config rc;
    rc.theta = sh.kind == rope_kind::llama3 ? 500000.0 : 10000.0;
    rc.kind = sh.kind;
    rc.factor = sh.kind == rope_kind::default_rope ? 1.0 : 8.0;
    rc.original_max_position_embeddings = 256;
    rc.mscale = 1.0;  // YaRN: an attention factor of 1.2079 on cos and sin (factor 8)
    const auto inv_freq = gpu::rope_inv_freq(rc, sh.D);
    const float attention_factor = static_cast<float>(gpu::rope_attention_factor(rc));
    const int n = 257, block_size = 16, num_blocks = 40;
    const int width = (sh.H + 2 * sh.KVH) * sh.D;
    auto qkv = randn(size_t(n) * width, 8), bias = randn(width, 9, 0.1f);
    std::vector<int32_t> pos(n), slots(n);
    std::vector<int32_t> perm(num_blocks * block_size);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(10);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int t = 0; t < n; ++t) {
      pos[t] = int32_t(rng() % 1000);
      slots[t] = t % 7 == 3 ? -1 : perm[t];
    }
    dev_vec<float> d_qkv(qkv), d_bias(bias), d_inv(inv_freq);
    dev_vec<int32_t> d_pos(pos), d_slots(slots);
    const size_t cache_elems = size_t(num_blocks) * block_size * sh.KVH * sh.D;
    dev_vec<uint16_t> d_k(cache_elems), d_v(cache_elems);
    d_k.poison();
    d_v.poison();
    cuda::rope_kv_args a = rope_args(d_qkv.get(), d_bias.get(), d_pos.get(), d_slots.get(), d_inv.get(), d_k.get(),
                                     d_v.get(), n, sh.H, sh.KVH, sh.D);
    dev_vec<uint16_t> d_q16(size_t(n) * sh.H * sh.D);  // the prefill kernel's 16-bit scaled copy
    d_q16.poison();
    a.q16 = d_q16.get();
    a.q16_scale = cuda::prefill_q_scale(1.0f / std::sqrt(float(sh.D)));
    a.attention_factor = attention_factor;
    ASSERT_EQ(cuda::rope_kv_write(dt, a, nullptr), 0);
    auto q_out = d_qkv.download();
    {  // every token's rotated q, scaled and rounded, beside the fp32 q written back
      const auto q16 = d_q16.download();
      std::vector<uint16_t> want(q16.size());
      for (int t = 0; t < n; ++t)
        for (int c = 0; c < sh.H * sh.D; ++c)
          want[size_t(t) * sh.H * sh.D + c] = to_act_bits(dt, q_out[size_t(t) * width + c] * a.q16_scale);
      EXPECT_EQ(count_unequal(q16, want), 0) << "D " << sh.D;
    }
    auto k_out = download_act(dt, d_k), v_out = download_act(dt, d_v);
    std::vector<float> q_ref, q_got, k_ref, k_got, v_ref, v_got;
    std::vector<float> cs(sh.D / 2), sn(sh.D / 2);
    for (int t = 0; t < n; ++t) {
      std::vector<float> row(qkv.begin() + size_t(t) * width, qkv.begin() + size_t(t + 1) * width);
      for (int c = 0; c < width; ++c) row[c] += bias[c];
      gpu::rope_cos_sin(inv_freq, pos[t], cs.data(), sn.data(), attention_factor);
      for (int h = 0; h < sh.H + sh.KVH; ++h) gpu::apply_rope(row.data() + h * sh.D, cs.data(), sn.data(), sh.D / 2);
      for (int c = 0; c < sh.H * sh.D; ++c) {
        q_ref.push_back(row[c]);
        q_got.push_back(q_out[size_t(t) * width + c]);
      }
      if (slots[t] < 0) continue;
      for (int c = 0; c < sh.KVH * sh.D; ++c) {
        k_ref.push_back(row[sh.H * sh.D + c]);
        k_got.push_back(k_out[size_t(slots[t]) * sh.KVH * sh.D + c]);
        v_ref.push_back(row[(sh.H + sh.KVH) * sh.D + c]);
        v_got.push_back(v_out[size_t(slots[t]) * sh.KVH * sh.D + c]);
      }
    }
    EXPECT_LT(rel_max_err(q_got, q_ref), 1e-5) << "D " << sh.D;
    EXPECT_LT(rel_max_err(k_got, k_ref), 8e-3) << "D " << sh.D;
    EXPECT_LT(rel_max_err(v_got, v_ref), 8e-3) << "D " << sh.D;
  }
}

TEST_P(CudaKernels, RopeKvWriteFrom16BitInputEqualsFp32InputOfTheSameValues) {
  // The executor's prefill-carrying steps: the QKV GEMM writes its output rounded to the
  // activation dtype (qkv16), and rope writes the fp32 q only of tokens that q32 marks (decode
  // tokens). Against the fp32 path over the same rounded values: q16 and both caches bit-equal,
  // the marked tokens' fp32 q bit-equal, everything else in the fp32 buffer left as it was.
  const act_dtype dt = GetParam();
  const int H = 8, KVH = 2, D = 128, n = 97, block_size = 16, num_blocks = 8;
  const int width = (H + 2 * KVH) * D;
  rope_config rc;
  rc.theta = 500000.0;
  const auto inv_freq = gpu::rope_inv_freq(rc, D);
  const auto bits = random_act_bits(dt, size_t(n) * width, 21, 3.0f);
  std::vector<float> rounded(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) rounded[i] = from_act_bits(dt, bits[i]);
  const auto bias = randn(width, 22, 0.1f);
  std::vector<int32_t> pos(n), slots(n), q32(n);
  std::mt19937 rng(23);
  for (int t = 0; t < n; ++t) {
    pos[t] = int32_t(rng() % 4000);
    slots[t] = t % 11 == 5 ? -1 : t;
    q32[t] = t % 3 == 0;
  }
  dev_vec<float> d_bias(bias), d_inv(inv_freq);
  dev_vec<int32_t> d_pos(pos), d_slots(slots), d_q32(q32);
  dev_vec<uint16_t> d_bits(bits);
  const size_t cache_elems = size_t(num_blocks) * block_size * KVH * D;
  struct outputs { std::vector<float> qkv; std::vector<uint16_t> q16, k, v; };
  const auto run = [&](bool from16) {
    dev_vec<float> d_qkv(size_t(n) * width);
    if (from16) d_qkv.poison();
    else d_qkv.upload(rounded);
    dev_vec<uint16_t> d_k(cache_elems), d_v(cache_elems), d_q16(size_t(n) * H * D);
    d_k.poison();
    d_v.poison();
    d_q16.poison();
    cuda::rope_kv_args a = rope_args(d_qkv.get(), d_bias.get(), d_pos.get(), d_slots.get(), d_inv.get(), d_k.get(),
                                     d_v.get(), n, H, KVH, D);
    a.qkv16 = from16 ? d_bits.get() : nullptr;
    a.q32 = from16 ? d_q32.get() : nullptr;
    a.q16 = d_q16.get();
    a.q16_scale = cuda::prefill_q_scale(1.0f / std::sqrt(float(D)));
    EXPECT_EQ(cuda::rope_kv_write(dt, a, nullptr), 0);
    return outputs{d_qkv.download(), d_q16.download(), d_k.download(), d_v.download()};
  };
  const outputs want = run(false), got = run(true);
  EXPECT_EQ(count_unequal(got.q16, want.q16), 0);
  EXPECT_EQ(count_unequal(got.k, want.k), 0);
  EXPECT_EQ(count_unequal(got.v, want.v), 0);
  const uint32_t poison_bits = 0xffffffffu;  // dev_vec::poison's bytes
  float poison = 0.0f;
  std::memcpy(&poison, &poison_bits, sizeof poison);
  int q_rows = 0, wrong = 0;
  for (int t = 0; t < n; ++t) {
    for (int c = 0; c < width; ++c) {
      const float g = got.qkv[size_t(t) * width + c];
      const float w = q32[t] && c < H * D ? want.qkv[size_t(t) * width + c] : poison;
      wrong += std::memcmp(&g, &w, sizeof(float)) != 0;
    }
    q_rows += q32[t];
  }
  EXPECT_EQ(wrong, 0) << "of " << n * width << " fp32 values (" << q_rows << " tokens marked)";
}

TEST_P(CudaKernels, RopeKvWriteFp8CodesMatchTheCpuRounding) {
  // --kv-cache-dtype fp8: the cache bytes are the E4M3 codes of x / scale as the CPU executor's
  // write_kv rounds them (gpu::e4m3_encode of the fp32 quotient), bit for bit. At position 0 the
  // rotation is exact (cos 1, sin 0), so the host knows every fp32 value the kernel encodes: k and
  // v plus the bias. The values span E4M3's subnormals, normals and saturation (|x| / s >= 448),
  // in fp32 and from the 16-bit QKV input.
  const act_dtype dt = GetParam();
  const int n = 37, H = 4, KVH = 2, D = 128, block_size = 16, num_blocks = 4;
  const int width = (H + 2 * KVH) * D;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> expo(-14.0f, 12.0f);
  std::vector<float> qkv(size_t(n) * width), bias(width);
  for (auto& x : qkv) x = (rng() & 1 ? -1.0f : 1.0f) * std::exp2(expo(rng));
  for (size_t c = 0; c < bias.size(); ++c) bias[c] = c % 2 ? 0.0f : 0.01f * float(int(rng() % 201) - 100);
  qkv[size_t(3) * width + H * D] = 0.0f;  // exact zero and ties of the rounding
  qkv[size_t(3) * width + H * D + 1] = 1.0625f;
  qkv[size_t(3) * width + H * D + 2] = -1.1875f;
  std::vector<int32_t> pos(n, 0), slots(n);
  for (int t = 0; t < n; ++t) slots[t] = t == 5 ? -1 : (t * 7) % (num_blocks * block_size);
  std::vector<float> inv_freq(D / 2);
  for (int i = 0; i < D / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / float(D));
  std::vector<uint16_t> bits(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) bits[i] = to_act_bits(dt, qkv[i]);
  dev_vec<float> d_bias(bias), d_inv(inv_freq);
  dev_vec<int32_t> d_pos(pos), d_slots(slots);
  dev_vec<uint16_t> d_bits(bits);
  const size_t cache_elems = size_t(num_blocks) * block_size * KVH * D;
  for (bool from16 : {false, true}) {
    for (float k_scale : {1.0f, 0.0371f}) {
      const float v_scale = k_scale == 1.0f ? 2.5f : 1.0f;
      dev_vec<float> d_qkv(qkv);
      dev_vec<uint8_t> d_k(cache_elems), d_v(cache_elems);
      d_k.poison();
      d_v.poison();
      cuda::rope_kv_args a = rope_args(d_qkv.get(), d_bias.get(), d_pos.get(), d_slots.get(), d_inv.get(), d_k.get(),
                                       d_v.get(), n, H, KVH, D);
      a.qkv16 = from16 ? d_bits.get() : nullptr;
      a.kv_fp8 = true;
      a.k_scale = k_scale;
      a.v_scale = v_scale;
      ASSERT_EQ(cuda::rope_kv_write(dt, a, nullptr), 0);
      const std::vector<uint8_t> k = d_k.download(), v = d_v.download();
      int wrong = 0, checked = 0;
      for (int t = 0; t < n; ++t) {
        if (slots[t] < 0) continue;
        for (int c = H * D; c < width; ++c) {
          const float in = from16 ? from_act_bits(dt, bits[size_t(t) * width + c]) : qkv[size_t(t) * width + c];
          const float x = in + bias[c];
          const bool is_k = c < (H + KVH) * D;
          const int e = c - (is_k ? H * D : (H + KVH) * D);
          const uint8_t want = gpu::e4m3_encode(x / (is_k ? k_scale : v_scale));
          const uint8_t got = (is_k ? k : v)[size_t(slots[t]) * KVH * D + e];
          if (got != want && ++wrong <= 5)
            ADD_FAILURE() << (is_k ? "k" : "v") << " token " << t << " elem " << e << " x " << x << ": code 0x"
                          << std::hex << int(got) << ", want 0x" << int(want) << std::dec;
          ++checked;
        }
      }
      EXPECT_EQ(wrong, 0) << "of " << checked << " codes (16-bit input " << from16 << ", k_scale " << k_scale << ")";
    }
  }
}

TEST_P(CudaKernels, RopeKvWriteRefusesHeadDimsItCannotTake) {
  // Whole 4-pair groups and the shared angle table bound the head dim: 12 and 264 are refused
  // before anything is launched (the buffers here would be too small to touch).
  for (int D : {12, 264}) {
    cuda::rope_kv_args a;
    a.n = 1;
    a.num_heads = 1;
    a.num_kv_heads = 1;
    a.head_dim = D;
    EXPECT_EQ(cuda::rope_kv_write(GetParam(), a, nullptr), int(cudaErrorInvalidValue)) << "D " << D;
  }
}

TEST_P(CudaKernels, CopyKvBlocksCopiesEveryCache) {
  const int num_caches = 6, num_blocks = 9, block_elems = 16 * 2 * 16;
  std::vector<uint16_t> pool(size_t(num_caches) * num_blocks * block_elems);
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = uint16_t(i * 2654435761u >> 16);
  std::vector<int32_t> pairs = {2, 7, 0, 5, 8, 1};
  dev_vec<uint16_t> d_pool(pool);
  dev_vec<int32_t> d_pairs(pairs);
  ASSERT_EQ(cuda::copy_kv_blocks(d_pool.get(), d_pairs.get(), 3, num_caches, size_t(num_blocks) * block_elems * 2,
                                 block_elems * 2, nullptr), 0);
  auto got = d_pool.download();
  auto want = pool;
  for (int c = 0; c < num_caches; ++c)
    for (size_t p = 0; p < pairs.size(); p += 2)
      std::copy_n(pool.begin() + (size_t(c) * num_blocks + pairs[p]) * block_elems, block_elems,
                  want.begin() + (size_t(c) * num_blocks + pairs[p + 1]) * block_elems);
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaKernels, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return info.param == act_dtype::bf16 ? "bf16" : "fp16"; });

}  // namespace
}  // namespace actorserve::testing
