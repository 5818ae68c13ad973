// DeepSeek-V2's latent-attention kernels against plain host loops over the same rounded operands:
// the latent norm, interleaved rope (with YaRN's attention factor) and cache write against
// gpu/model/rope's apply_rope_interleaved, and the absorbed attention over a shuffled paged cache
// at awkward sizes (1, 17, 97 keys, a block size that does not divide them, padding rows, heads
// that are not a multiple of 16) in one piece and split over the context into up to 16 pieces
// (never shorter than mla_min_piece keys: a short context takes fewer, its spare CTAs idle, a
// last piece of one key), which the last piece's CTA merges, alike launch after launch and in
// CUDA graph replays with
// its counters never reset by hand; and the up-projected
// prefill (gather, kv_b_proj's expansion, scores, causal softmax, P V) against the same attention
// computed per head in fp64: several sequences of one step, chunks after a cached prefix, one
// tile and many, rows of up to 4,096 keys and longer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/mla/mla_attention.hpp"
#include "gpu/cuda/mla/head_gemv.hpp"
#include "gpu/cuda/mla/mla_kernels.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
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

/// One step of decode rows for latent_attention, each row its own sequence over its own shuffled
/// blocks of a random paged cache, with random absorbed queries; `want` is the attention computed
/// by a host loop in fp64 over the same rounded cache. The device buffers hold partials for up to
/// mla_max_splits pieces and one split counter per (row, head group), zeroed.
class latent_attention_case {
 public:
  latent_attention_case(act_dtype dt, const attention_shape& sh) : dt_(dt), sh_(sh) {
    const int n = rows(), H = sh.heads, r = sh.rank, W = r + sh.rope_dim, bs = sh.block_size;
    int total_blocks = 0;
    for (int c : sh.contexts) total_blocks += (c + bs - 1) / bs;
    std::vector<int32_t> perm(size_t(total_blocks) + 3);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(uint32_t(W + H));
    std::shuffle(perm.begin(), perm.end(), rng);
    token_seqs_.assign(size_t(n), -1);
    std::vector<int32_t> tables, positions(size_t(n), 0);
    std::vector<cuda::attn_seq> seqs;
    for (int t = 0; t < n; ++t) {
      if (sh.contexts[t] == 0) continue;
      cuda::attn_seq s;
      s.q_start = t;
      s.q_len = 1;
      s.context_len = sh.contexts[t];
      s.bt_offset = int32_t(tables.size());
      for (int b = 0; b < (sh.contexts[t] + bs - 1) / bs; ++b) tables.push_back(perm[tables.size()]);
      token_seqs_[t] = int32_t(seqs.size());
      positions[t] = sh.contexts[t] - 1;
      seqs.push_back(s);
    }
    const size_t slots = perm.size() * size_t(bs);
    const std::vector<uint16_t> cache_bits = random_act_bits(dt, slots * W, 3);
    const std::vector<float> q = uniform(size_t(n) * H * W, 4, 0.3f);
    // The host loop: fp64 over the rounded cache.
    want.assign(size_t(n) * H * r, 0.0f);
    for (int t = 0; t < n; ++t) {
      if (token_seqs_[t] < 0) continue;
      const cuda::attn_seq& s = seqs[size_t(token_seqs_[t])];
      for (int h = 0; h < H; ++h) {
        const float* qh = &q[(size_t(t) * H + h) * W];
        std::vector<double> p(size_t(s.context_len));
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < s.context_len; ++j) {
          const size_t slot = size_t(tables[size_t(s.bt_offset + j / bs)]) * bs + j % bs;
          double d = 0.0;
          for (int k = 0; k < W; ++k) d += double(qh[k]) * from_act_bits(dt, cache_bits[slot * W + k]);
          p[size_t(j)] = d * kScale;
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
    cache_.upload(cache_bits);
    q_.upload(q);
    tables_.upload(tables);
    token_seqs_dev_.upload(token_seqs_);
    positions_.upload(positions);
    seqs_.upload(seqs);
    out.resize(size_t(n) * H * r);
    partial_o_.resize(size_t(cuda::mla_max_splits) * n * H * r + 1);
    partial_ml_.resize(size_t(cuda::mla_max_splits) * n * H * 2);
    counters.upload(std::vector<int32_t>(size_t(n) * head_groups(), 0));
  }

  int rows() const { return int(sh_.contexts.size()); }
  int head_groups() const { return cuda::mla_head_groups(sh_.heads); }

  /// The arguments for `splits` pieces merged within clusters, or by the last piece's CTA;
  /// misaligned: partial_o one float past a 16-byte boundary, which that merge reads a float at a
  /// time.
  cuda::latent_attention_args args(int splits, bool cluster, bool misaligned = false) const {
    return {.q_abs = q_.get(), .cache = cache_.get(), .block_tables = tables_.get(), .seqs = seqs_.get(),
            .token_seqs = token_seqs_dev_.get(), .positions = positions_.get(), .n = rows(),
            .num_heads = sh_.heads, .rank = sh_.rank, .rope_dim = sh_.rope_dim, .block_size = sh_.block_size,
            .num_splits = splits, .scale = kScale, .cluster_merge = cluster,
            .partial_o = partial_o_.get() + (misaligned ? 1 : 0),
            .partial_ml = partial_ml_.get(), .split_counters = counters.get(), .out = out.get()};
  }

  /// Checks the output against the host loop, a padding row's zeros exactly.
  void expect_matches(const std::vector<float>& got, const std::string& what) const {
    const int HR = sh_.heads * sh_.rank;
    for (int t = 0; t < rows(); ++t) {
      if (token_seqs_[t] >= 0) continue;
      for (int k = 0; k < HR; ++k) ASSERT_EQ(got[size_t(t) * HR + k], 0.0f) << "padding row " << t << ", " << what;
    }
    EXPECT_LT(rel_max_err(got, want), dt_ == act_dtype::bf16 ? 1e-2 : 2e-3)
        << sh_.heads << " heads, rank " << sh_.rank << ", block " << sh_.block_size << ", " << what;
  }

  static constexpr float kScale = 0.125f;
  std::vector<float> want;   ///< [rows][H][r]
  dev_vec<uint16_t> out;     ///< [rows][H][r] of dt
  dev_vec<int32_t> counters; ///< [rows][head groups]

 private:
  act_dtype dt_;
  attention_shape sh_;
  std::vector<int32_t> token_seqs_;
  dev_vec<uint16_t> cache_;
  dev_vec<float> q_, partial_o_, partial_ml_;
  dev_vec<int32_t> tables_, token_seqs_dev_, positions_;
  dev_vec<cuda::attn_seq> seqs_;
};

/// The merges a GPU runs: the last piece's CTA's everywhere, the cluster merge on 9.x.
std::vector<bool> merges() {
  if (gpu::runs_tma(cuda::loaded_gpu_target())) return {false, true};
  return {false};
}
std::string merge_name(bool cluster) { return cluster ? "cluster merge" : "last-piece merge"; }

TEST_P(CudaMla, LatentAttentionMatchesAHostLoopInOnePieceAndSplit) {
  const act_dtype dt = GetParam();
  const attention_shape shapes[] = {{4, 32, 8, 16, {1, 17, 97, 0}},         // deepseek-v2-tiny's sizes
                                    {20, 64, 16, 7, {97, 1, 33, 0, 64}},    // two CTAs of heads, the second partial
                                    {16, 512, 64, 64, {300, 1, 129}},       // DeepSeek-V2-Lite's widths
                                    {16, 512, 64, 16, {1100}},              // V2-Lite's batch-1 decode
                                    // 16 pieces of 160 keys (2100), pieces ending mid-tile (700),
                                    // a context shorter than a tile (31), pieces of mla_min_piece
                                    // keys (256) and a last one of one key (257).
                                    {16, 512, 64, 16, {2100, 31, 0, 700, 256, 257}}};
  for (const attention_shape& sh : shapes) {
    latent_attention_case c(dt, sh);
    // One piece (no merge), and pieces of lengths that do not divide the contexts, fewer than
    // the splits for a short context, up to the most the kernel takes.
    // The last piece's merge reads float4s, or single floats where the partials are not 16-byte
    // aligned; clusters of 8 and of more (the GPU's largest placeable size).
    for (bool cluster : merges())
      for (int splits : {1, 2, 3, 7, 8, 9, cuda::mla_max_splits})
        for (bool misaligned : {false, true}) {
          if ((splits == 1 || cluster) && misaligned) continue;
          const std::string what = std::to_string(splits) + " splits, " + merge_name(cluster) +
                                   (misaligned ? ", partials misaligned" : "");
          c.out.poison();
          ASSERT_EQ(cuda::latent_attention(dt, c.args(splits, cluster, misaligned), nullptr), 0) << what;
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
          c.expect_matches(download_act(dt, c.out), what);
          for (int32_t v : c.counters.download()) ASSERT_EQ(v, 0) << what << ": a counter left behind";
        }
  }
}

TEST_P(CudaMla, LatentAttentionMergesAlikeLaunchAfterLaunchAndInGraphReplays) {
  const act_dtype dt = GetParam();
  struct repeat_case {
    attention_shape shape;
    int splits;
  };
  const repeat_case cases[] = {{{16, 512, 64, 16, {1100}}, cuda::mla_max_splits},  // V2-Lite's batch-1 decode
                               {{16, 512, 64, 16, {2100, 31, 0, 700, 257}}, 7},  // 1 to 7 pieces a row
                               {{20, 64, 16, 7, {97, 1, 33, 0, 64}}, 5}};            // two head groups, padding
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const repeat_case& rc : cases)
    for (bool cluster : merges()) {
      latent_attention_case c(dt, rc.shape);
      const cuda::latent_attention_args a = c.args(rc.splits, cluster);
      const std::string what = std::to_string(rc.splits) + " splits, " + merge_name(cluster);
      // The last piece's merge needs its counters; the cluster merge touches none of the buffers.
      cuda::latent_attention_args no_buffers = a;
      no_buffers.split_counters = nullptr;
      if (!cluster) {
        EXPECT_EQ(cuda::latent_attention(dt, no_buffers, stream), int(cudaErrorInvalidValue));
      } else {
        no_buffers.partial_o = no_buffers.partial_ml = nullptr;
        c.out.poison();
        ASSERT_EQ(cuda::latent_attention(dt, no_buffers, stream), 0);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        c.expect_matches(download_act(dt, c.out), what + ", no partial buffers");
      }
      // The first launch against the host loop, then every later one bit for bit against it, the
      // counters never reset in between: a launch that found them non-zero would merge nothing and
      // leave the poison.
      c.out.poison();
      ASSERT_EQ(cuda::latent_attention(dt, a, stream), 0);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const std::vector<uint16_t> first = c.out.download();
      c.expect_matches(download_act(dt, c.out), what);
      for (int i = 0; i < 3; ++i) {
        c.out.poison();
        ASSERT_EQ(cuda::latent_attention(dt, a, stream), 0);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_EQ(count_unequal(c.out.download(), first), 0) << "launch " << i + 2 << ", " << what;
      }
      // Three launches back to back, then the replays of one captured launch.
      c.out.poison();
      for (int i = 0; i < 3; ++i) ASSERT_EQ(cuda::latent_attention(dt, a, stream), 0);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      EXPECT_EQ(count_unequal(c.out.download(), first), 0) << "back to back, " << what;
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      const int launched = cuda::latent_attention(dt, a, stream);
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      ASSERT_EQ(launched, 0);
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      for (int i = 0; i < 3; ++i) {
        c.out.poison();
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_EQ(count_unequal(c.out.download(), first), 0) << "replay " << i + 1 << ", " << what;
      }
      ASSERT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
      ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
      for (int32_t v : c.counters.download()) EXPECT_EQ(v, 0) << what << ": a counter left behind";
    }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
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
  const auto q_after = download_act(dt, d_q);
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
      // The query keeps q_nope and gets the rotated q_pe in place, rounded (the up-projected query).
      for (int i = 0; i < qk; ++i) {
        const size_t at = (size_t(t) * H + h) * qk + i;
        const float want = i < dn ? from_act_bits(dt, q_bits[at]) : round_act(dt, pe[i - dn]);
        EXPECT_NEAR(q_after[at], want, 1e-2f * std::max(1.0f, std::abs(want))) << "token " << t << " head " << h;
      }
    }
  }
}

/// The dt query rows [rows][width] that the fused GEMV's fp32 output (rows `stride` floats apart)
/// rounds to, rounded on the host.
std::vector<uint16_t> rounded_query_bits(act_dtype dt, const std::vector<float>& q_f32, int rows, int width,
                                         int stride) {
  std::vector<uint16_t> bits(size_t(rows) * width);
  for (int t = 0; t < rows; ++t)
    for (int i = 0; i < width; ++i) bits[size_t(t) * width + i] = to_act_bits(dt, q_f32[size_t(t) * stride + i]);
  return bits;
}

/// What a latent write leaves behind: the query, the cache and the absorbed query.
struct latent_outputs {
  std::vector<uint16_t> q, cache;
  std::vector<float> q_abs;
};

void expect_latent_outputs_equal(const latent_outputs& got, const latent_outputs& want, const std::string& what) {
  EXPECT_EQ(count_unequal(got.q, want.q), 0) << what << ": the query";
  EXPECT_EQ(count_unequal(got.cache, want.cache), 0) << what << ": the cache";
  EXPECT_EQ(count_unequal(got.q_abs, want.q_abs), 0) << what << ": q_abs";
}

/// The one-token step's form (mla_attention::run): the query comes as the fused GEMV's fp32 output
/// (rows q_f32_stride apart, kv_a behind it) and the kernel rounds it; everything it writes equals
/// what the dt query rounded on the host gives.
TEST_P(CudaMla, LatentWriteOfAnFp32QueryEqualsItsDtRounding) {
  const act_dtype dt = GetParam();
  const int n = 3, H = 4, r = 32, dn = 16, dr = 8, W = r + dr, qk = dn + dr, stride = H * qk + W, num_slots = 8;
  rope_config rc;
  const std::vector<float> inv_freq = gpu::rope_inv_freq(rc, dr);
  const std::vector<float> kv_a = uniform(size_t(n) * W, 15), norm = uniform(r, 16);
  const std::vector<float> q_f32 = uniform(size_t(n) * stride, 17, 4.0f);
  const std::vector<uint16_t> q_bits = rounded_query_bits(dt, q_f32, n, H * qk, stride);
  const std::vector<int32_t> positions = {3, 40, 9}, slots = {1, -1, 6};
  dev_vec<float> d_kv_a(kv_a), d_norm(norm), d_inv(inv_freq), d_qf(q_f32);
  dev_vec<int32_t> d_pos(positions), d_slots(slots);
  const auto run = [&](bool fp32_query) {
    dev_vec<uint16_t> d_q(q_bits), d_cache(size_t(num_slots) * W);
    dev_vec<float> d_q_abs(size_t(n) * H * W);
    d_cache.poison();
    d_q_abs.poison();
    if (fp32_query) d_q.poison();
    const cuda::mla_latent_args a{.kv_a = d_kv_a.get(), .kv_a_norm = d_norm.get(), .eps = 1e-6f, .q = d_q.get(),
                                  .q_f32 = fp32_query ? d_qf.get() : nullptr, .q_f32_stride = stride,
                                  .q_abs = d_q_abs.get(), .positions = d_pos.get(), .slots = d_slots.get(),
                                  .inv_freq = d_inv.get(), .cache = d_cache.get(), .n = n, .num_heads = H,
                                  .rank = r, .nope_dim = dn, .rope_dim = dr};
    EXPECT_EQ(cuda::mla_latent_write(dt, a, nullptr), 0);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return latent_outputs{d_q.download(), d_cache.download(), d_q_abs.download()};
  };
  expect_latent_outputs_equal(run(true), run(false), "fp32 query");
}

/// The decode step's W_UK product with the latent write in its launch (mla_head_gemv_latent_write)
/// against the two launches: the same query, cache and absorbed query, bit for bit; with the dt
/// query at 1 and 3 rows, and with the one GEMV's fp32 query (q poisoned: the launch writes it).
TEST_P(CudaMla, LatentWriteInTheWukLaunchEqualsTheTwoLaunches) {
  const act_dtype dt = GetParam();
  const int H = 4, r = 32, dn = 16, dv = 16, dr = 8, W = r + dr, qk = dn + dr, stride = H * qk + W, num_slots = 8;
  const std::vector<float> inv_freq = gpu::rope_inv_freq(rope_config{}, dr);
  const std::vector<float> norm = uniform(r, 21);
  const std::vector<uint16_t> kv_b = random_act_bits(dt, size_t(H) * (dn + dv) * r, 22, 0.2f);
  dev_vec<float> d_norm(norm), d_inv(inv_freq);
  dev_vec<uint16_t> d_kv_b(kv_b);
  const std::vector<int32_t> positions = {5, 0, 31}, slots = {2, 7, -1};
  dev_vec<int32_t> d_pos(positions), d_slots(slots);
  for (const auto& [rows, fp32_query] : {std::pair{1, true}, std::pair{1, false}, std::pair{3, false}}) {
    const std::string what = std::to_string(rows) + (fp32_query ? " row, fp32 query" : " rows");
    const std::vector<float> kv_a = uniform(size_t(rows) * W, 23), q_f32 = uniform(size_t(rows) * stride, 24, 3.0f);
    const std::vector<uint16_t> q_bits = rounded_query_bits(dt, q_f32, rows, H * qk, stride);
    dev_vec<float> d_kv_a(kv_a), d_qf(q_f32);
    const auto run = [&](bool fused) {
      dev_vec<uint16_t> d_q(q_bits), d_cache(size_t(num_slots) * W);
      dev_vec<float> d_q_abs(size_t(rows) * H * W);
      d_cache.poison();
      d_q_abs.poison();
      if (fused && fp32_query) d_q.poison();
      const cuda::mla_latent_args la{.kv_a = d_kv_a.get(), .kv_a_norm = d_norm.get(), .eps = 1e-6f, .q = d_q.get(),
                                     .q_f32 = fused && fp32_query ? d_qf.get() : nullptr, .q_f32_stride = stride,
                                     .q_abs = d_q_abs.get(), .positions = d_pos.get(), .slots = d_slots.get(),
                                     .inv_freq = d_inv.get(), .cache = d_cache.get(), .n = rows, .num_heads = H,
                                     .rank = r, .nope_dim = dn, .rope_dim = dr};
      cuda::head_gemv_args g{.batch = H, .m = rows, .n = r, .k = dn, .a = d_q.get(), .lda = H * qk,
                             .stride_a = qk, .b = d_kv_b.get(), .b_rows_are_n = false, .ldb = r,
                             .stride_b = (dn + dv) * r, .c = d_q_abs.get(), .c_f32 = true, .ldc = H * W,
                             .stride_c = W};
      if (fused) {
        if (fp32_query) g.a_f32 = d_qf.get();
        EXPECT_EQ(cuda::mla_head_gemv_latent_write(dt, g, la, nullptr), 0) << what;
      } else {
        EXPECT_EQ(cuda::mla_latent_write(dt, la, nullptr), 0) << what;
        EXPECT_EQ(cuda::mla_head_gemv(dt, g, nullptr), 0) << what;
      }
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      return latent_outputs{d_q.download(), d_cache.download(), d_q_abs.download()};
    };
    expect_latent_outputs_equal(run(true), run(false), what);
  }
}

struct prefill_seq {
  int q_len, context;
};

TEST_P(CudaMla, UpProjectedPrefillMatchesAnFp64LoopPerHead) {
  const act_dtype dt = GetParam();
  struct shape {
    int heads, rank, nope, rope, v, block_size;
    std::vector<prefill_seq> seqs;  ///< one step's sequences, in row order
  };
  const shape shapes[] = {
      // Odd heads, dv != dn, chunks after a cached prefix, long contexts (the small-width kernel).
      {3, 32, 16, 8, 24, 7, {{5, 5}, {13, 40}, {2, 2}, {1, 9}, {3, 4200}, {150, 1100}}},
      // DeepSeek-V2-Lite's widths: query tiles of 64 whole and partial, diagonal and full key tiles.
      {16, 512, 128, 64, 128, 16, {{70, 70}, {33, 129}, {100, 100}, {130, 260}, {1, 200}}},
      // Widths below the widest kernel's (padded with zeros there): qk 96, dv 64.
      {4, 128, 64, 32, 64, 16, {{130, 130}, {65, 300}}},
  };
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cuda::gemm_runner g;
  ASSERT_TRUE(g.init(stream, 1 << 22).ok());
  for (const shape& sh : shapes) {
    const int H = sh.heads, r = sh.rank, dn = sh.nope, dr = sh.rope, dv = sh.v, W = r + dr, qk = dn + dr;
    const int bs = sh.block_size;
    int rows = 0, max_ctx = 0, total_blocks = 0;
    for (const prefill_seq& q : sh.seqs) {
      rows += q.q_len;
      max_ctx = std::max(max_ctx, q.context);
      total_blocks += (q.context + bs - 1) / bs;
    }
    std::vector<int32_t> perm(size_t(total_blocks) + 2);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(uint32_t(H * 31 + r));
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> tables;
    std::vector<cuda::attn_seq> seqs;
    for (int i = 0, row = 0; i < int(sh.seqs.size()); ++i) {
      cuda::attn_seq a;
      a.q_start = row;
      a.q_len = sh.seqs[i].q_len;
      a.context_len = sh.seqs[i].context;
      a.bt_offset = int32_t(tables.size());
      for (int b = 0; b < (a.context_len + bs - 1) / bs; ++b) tables.push_back(perm[tables.size()]);
      seqs.push_back(a);
      row += a.q_len;
    }
    const size_t slots = perm.size() * size_t(bs);
    const std::vector<uint16_t> cache = random_act_bits(dt, slots * W, 21);
    const std::vector<uint16_t> kv_b = random_act_bits(dt, size_t(H) * (dn + dv) * r, 22, 1.0f / std::sqrt(float(r)));
    const std::vector<uint16_t> q = random_act_bits(dt, size_t(rows) * H * qk, 23);
    const float scale = 1.0f / std::sqrt(float(qk));
    const auto c_at = [&](const cuda::attn_seq& a, int j, int k) {
      const size_t slot = size_t(tables[size_t(a.bt_offset + j / bs)]) * bs + j % bs;
      return double(from_act_bits(dt, cache[slot * W + k]));
    };
    // fp64 over the rounded operands; k_nope and v rounded to dt as the GEMMs write them.
    std::vector<float> want(size_t(rows) * H * dv);
    for (const cuda::attn_seq& a : seqs) {
      const int c = a.context_len, first = c - a.q_len;
      for (int h = 0; h < H; ++h) {
        std::vector<double> kn(size_t(c) * dn), vv(size_t(c) * dv);
        for (int j = 0; j < c; ++j)
          for (int e = 0; e < dn + dv; ++e) {
            double acc = 0.0;
            for (int k = 0; k < r; ++k)
              acc += double(from_act_bits(dt, kv_b[(size_t(h) * (dn + dv) + e) * r + k])) * c_at(a, j, k);
            const double rounded = round_act(dt, float(acc));
            (e < dn ? kn[size_t(j) * dn + e] : vv[size_t(j) * dv + e - dn]) = rounded;
          }
        for (int i = 0; i < a.q_len; ++i) {
          const uint16_t* qh = &q[(size_t(a.q_start + i) * H + h) * qk];
          const int keys = first + i + 1;
          std::vector<double> p(static_cast<size_t>(keys));
          double mx = -INFINITY, sum = 0.0;
          for (int j = 0; j < keys; ++j) {
            double d = 0.0;
            for (int e = 0; e < dn; ++e) d += double(from_act_bits(dt, qh[e])) * kn[size_t(j) * dn + e];
            for (int e = 0; e < dr; ++e) d += double(from_act_bits(dt, qh[dn + e])) * c_at(a, j, r + e);
            p[size_t(j)] = d * scale;
            mx = std::max(mx, p[size_t(j)]);
          }
          for (auto& x : p) sum += (x = std::exp(x - mx));
          for (int e = 0; e < dv; ++e) {
            double o = 0.0;
            for (int j = 0; j < keys; ++j) o += p[size_t(j)] / sum * vv[size_t(j) * dv + e];
            want[(size_t(a.q_start + i) * H + h) * dv + e] = float(o);
          }
        }
      }
    }
    dev_vec<uint16_t> d_cache(cache), d_kv_b(kv_b), d_q(q), d_out(size_t(rows) * H * dv);
    dev_vec<int32_t> d_tables(tables);
    // The workspace, poisoned (every value the attention reads is written first): the longest
    // context (a group a sequence, or two short ones), then every context in one group.
    int all_contexts = 0;
    for (const cuda::attn_seq& a : seqs) all_contexts += a.context_len;
    for (const int tokens : {max_ctx, all_contexts}) {
      cuda::mla_prefill_workspace ws;
      ws.tokens = tokens;
      dev_vec<uint16_t> lat(size_t(tokens) * r), k(size_t(tokens) * H * qk), v(size_t(tokens) * H * dv);
      for (auto* b : {&lat, &k, &v}) b->poison();
      ws.latents = lat.get();
      ws.k = k.get();
      ws.v = v.get();
      d_out.poison();
      const cuda::mla_dims d{.heads = H, .rank = r, .nope_dim = dn, .rope_dim = dr, .v_dim = dv};
      ASSERT_TRUE(cuda::mla_prefill(g, dt, d, ws, d_kv_b.get(), d_q.get(), seqs, d_tables.get(), d_cache.get(), bs,
                                    scale, d_out.get(), stream)
                      .ok());
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const auto got = download_act(dt, d_out);
      EXPECT_LT(rel_max_err(got, want), dt == act_dtype::bf16 ? 2e-2 : 4e-3)
          << H << " heads, rank " << r << ", workspace of " << tokens << " tokens";
    }
    cuda::mla_prefill_workspace too_small;
    too_small.tokens = max_ctx - 1;
    const cuda::mla_dims d{.heads = H, .rank = r, .nope_dim = dn, .rope_dim = dr, .v_dim = dv};
    EXPECT_FALSE(cuda::mla_prefill(g, dt, d, too_small, d_kv_b.get(), d_q.get(), seqs, d_tables.get(), d_cache.get(),
                                   bs, scale, d_out.get(), stream)
                     .ok());
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(CudaMlaUpProjected, RefusesWidthsItDoesNotTake) {
  EXPECT_TRUE(cuda::mla_up_projected_supported(192, 128));
  EXPECT_TRUE(cuda::mla_up_projected_supported(24, 16));
  for (const auto& [qk, v] : {std::pair{200, 128}, std::pair{192, 136}, std::pair{20, 16}, std::pair{24, 12},
                              std::pair{0, 16}}) {
    EXPECT_FALSE(cuda::mla_up_projected_supported(qk, v)) << qk << " / " << v;
    cuda::mla_up_projected_args a{.num_heads = 1, .qk_dim = qk, .v_dim = v};
    a.launch.num_pieces = a.launch.num_items = 1;
    a.launch.pieces[0] = {.q_row = 0, .queries = 1, .kv_row = 0, .context = 1};
    EXPECT_EQ(cuda::mla_up_projected_attention(act_dtype::bf16, a, nullptr), int(cudaErrorInvalidValue));
  }
  // A piece of more queries than keys; an item past its piece's queries or pieces.
  cuda::mla_up_projected_args a{.num_heads = 1, .qk_dim = 24, .v_dim = 16};
  a.launch.num_pieces = a.launch.num_items = 1;
  a.launch.pieces[0] = {.q_row = 0, .queries = 5, .kv_row = 0, .context = 4};
  EXPECT_EQ(cuda::mla_up_projected_attention(act_dtype::bf16, a, nullptr), int(cudaErrorInvalidValue));
  a.launch.pieces[0].context = 5;
  for (const cuda::mla_up_projected_item item : {cuda::mla_up_projected_item{.piece = 0, .tile = 1},
                                                  cuda::mla_up_projected_item{.piece = 1, .tile = 0}}) {
    a.launch.items[0] = item;
    EXPECT_EQ(cuda::mla_up_projected_attention(act_dtype::bf16, a, nullptr), int(cudaErrorInvalidValue))
        << item.piece << " / " << item.tile;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMla, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return std::string(info.param == act_dtype::bf16 ? "bf16" : "fp16"); });

}  // namespace
}  // namespace actorserve::testing
