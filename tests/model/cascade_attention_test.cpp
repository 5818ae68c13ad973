// Cascade attention on the CPU executor: the log-sum-exp merge and the shared-prefix pass
// against a plain softmax, then whole steps of real fixture models with cascade on and off —
// decodes behind a cached shared prompt give the same logits and tokens either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "gpu/cpu/cascade_attention.hpp"
#include "model/model_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

/// fp32 with a different summation order (an online softmax per block, then a merge).
constexpr double cascade_tolerance = 1e-5;

/// softmax(q . k_j * scale) . v over keys [lo, hi) of row-major k, v [keys][n].
std::vector<float> plain_attention(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, size_t lo, size_t hi, float scale) {
  const size_t n = q.size();
  std::vector<double> s(hi - lo);
  for (size_t j = lo; j < hi; ++j)
    s[j - lo] = scale * std::inner_product(q.begin(), q.end(), k.begin() + static_cast<ptrdiff_t>(j * n), 0.0);
  const double m = *std::max_element(s.begin(), s.end());
  double sum = 0.0;
  for (double& x : s) sum += (x = std::exp(x - m));
  std::vector<float> o(n, 0.0f);
  for (size_t j = lo; j < hi; ++j)
    for (size_t d = 0; d < n; ++d) o[d] += static_cast<float>(s[j - lo] / sum * v[j * n + d]);
  return o;
}

double max_abs_diff(const float* a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < b.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

TEST(cascade_attention, shared_prefix_pass_and_merge_equal_one_softmax_over_all_keys) {
  // 4 blocks of 16 keys of one KV head, head dim 32; 5 query rows; the merge adds 9 more keys.
  constexpr int64_t bs = 16, hd = 32, blocks = 4, extra = 9;
  gpu::cpu::paged_kv_cache cache(1, 8, bs, gpu::cpu::kv_cache_layout::per_head(1, hd));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);   // wide scores: the running max moves often
  const size_t keys = static_cast<size_t>(blocks * bs + extra);
  std::vector<float> k(keys * hd), v(keys * hd);
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  const std::vector<int32_t> table{5, 2, 7, 0};   // shuffled physical blocks
  for (int64_t b = 0; b < blocks; ++b) {
    std::copy_n(&k[static_cast<size_t>(b * bs * hd)], bs * hd, cache.k(0, table[static_cast<size_t>(b)], 0));
    std::copy_n(&v[static_cast<size_t>(b * bs * hd)], bs * hd, cache.v(0, table[static_cast<size_t>(b)], 0));
  }
  std::vector<std::vector<float>> q(5, std::vector<float>(hd));
  for (auto& row : q)
    for (auto& x : row) x = nd(rng);
  std::vector<const float*> rows;
  for (const auto& row : q) rows.push_back(row.data());
  const float scale = 0.2f;
  std::vector<float> out(q.size() * hd);
  std::vector<gpu::cpu::softmax_stats> stats(q.size());
  gpu::cpu::shared_prefix_pass(cache, 0, 0, table, rows, scale, out.data(), stats.data());
  const size_t prefix = static_cast<size_t>(blocks * bs);
  for (size_t r = 0; r < q.size(); ++r) {
    EXPECT_LT(max_abs_diff(&out[r * hd], plain_attention(q[r], k, v, 0, prefix, scale)), 1e-5) << "row " << r;
    // The suffix as a partial of its own, merged in.
    std::vector<float> suffix = plain_attention(q[r], k, v, prefix, keys, scale);
    gpu::cpu::softmax_stats ss;
    for (size_t j = prefix; j < keys; ++j)
      ss.m = std::max(ss.m, scale * static_cast<float>(std::inner_product(q[r].begin(), q[r].end(),
                                                                          k.begin() + static_cast<ptrdiff_t>(j * hd), 0.0)));
    for (size_t j = prefix; j < keys; ++j)
      ss.s += std::exp(scale * static_cast<float>(std::inner_product(q[r].begin(), q[r].end(),
                                                                     k.begin() + static_cast<ptrdiff_t>(j * hd), 0.0)) -
                       ss.m);
    gpu::cpu::merge_partial(suffix.data(), ss, &out[r * hd], stats[r], hd);
    EXPECT_LT(max_abs_diff(suffix.data(), plain_attention(q[r], k, v, 0, keys, scale)), 1e-5) << "row " << r;
  }
}

std::unique_ptr<gpu::executor_group> make_executor(const std::string& model, bool cascade, int32_t tp = 1) {
  gpu::cpu_executor_options opts;
  opts.block_size = 16;
  opts.num_blocks = 256;
  opts.threads = 2;
  opts.tensor_parallel_size = tp;
  opts.cascade_attention = cascade;
  return make_cpu_group(model_dir(model), opts);
}

struct step_outcome {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
  int32_t cascade_seqs = 0;
};

/// A chat backend's step sequence: a 300-token system prompt prefilled once (blocks 0-18), then
/// six sequences continuing from its 18 cached full blocks — the prompt's own and five with user
/// turns of their own, prefilled in one step — decoding together for `decodes` steps.
std::vector<step_outcome> shared_prompt_steps(gpu::executor_group& ex, int32_t decodes) {
  std::mt19937 rng(17);
  const auto vocab = static_cast<uint32_t>(std::min(ex.info().vocab_size, 1000));
  auto tokens = [&](size_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = 2 + static_cast<int32_t>(rng() % (vocab - 2));
    return t;
  };
  const std::vector<int32_t> system = tokens(300);
  std::vector<gpu::step_sequence> seqs;
  seqs.push_back(greedy_seq(100, 0, system, block_range(0, 19)));
  std::vector<step_outcome> out;
  int32_t next_block = 100;   // blocks of the decodes' own tokens
  auto run = [&](std::vector<gpu::step_sequence>& batch) {
    gpu::step_batch b;
    b.seqs = batch;
    step_outcome o;
    gpu::step_result r = run_group_step(ex, b, &o.logits);
    EXPECT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    for (const auto& t : r.tokens) o.tokens.push_back(t.token_id);
    o.cascade_seqs = r.cascade_seqs;
    for (size_t i = 0; i < batch.size() && i < r.tokens.size(); ++i) {
      auto& s = batch[i];
      s.num_computed += static_cast<int32_t>(s.new_tokens.size());
      s.new_tokens = {r.tokens[i].token_id};
      if (s.num_computed + 1 > static_cast<int32_t>(s.block_table.size()) * 16) s.block_table.push_back(next_block++);
    }
    out.push_back(std::move(o));
  };
  run(seqs);
  // Five more: the system prompt's last 12 tokens (its 19th block is not full, so not cached)
  // and a user turn of 5-17 tokens in blocks of their own, after the 18 cached blocks.
  for (int32_t i = 0; i < 5; ++i) {
    auto turn = std::vector<int32_t>(system.begin() + 288, system.end());
    const auto user = tokens(static_cast<size_t>(5 + 3 * i));
    turn.insert(turn.end(), user.begin(), user.end());
    auto table = block_range(0, 18);
    table.push_back(20 + 2 * i);
    table.push_back(21 + 2 * i);
    seqs.push_back(greedy_seq(static_cast<uint64_t>(i + 1), 288, turn, table));
  }
  std::vector<gpu::step_sequence> users(seqs.begin() + 1, seqs.end());
  run(users);
  for (size_t i = 1; i < seqs.size(); ++i) seqs[i] = users[i - 1];
  for (int32_t d = 0; d < decodes; ++d) run(seqs);
  return out;
}

class cascade_model_test : public ::testing::TestWithParam<std::string> {};

TEST_P(cascade_model_test, decodes_behind_a_cached_prompt_match_the_per_sequence_path) {
  auto on = make_executor(GetParam(), true);
  auto off = make_executor(GetParam(), false);
  ASSERT_TRUE(on && off);
  const auto a = shared_prompt_steps(*on, 6);
  const auto b = shared_prompt_steps(*off, 6);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t st = 0; st < a.size(); ++st) {
    EXPECT_EQ(a[st].tokens, b[st].tokens) << "step " << st;
    ASSERT_EQ(a[st].logits.size(), b[st].logits.size());
    for (size_t i = 0; i < a[st].logits.size(); ++i) worst = std::max(worst, relative_error(a[st].logits[i], b[st].logits[i]));
    EXPECT_EQ(b[st].cascade_seqs, 0);
  }
  EXPECT_LT(worst, cascade_tolerance);
  // The prefills stay per sequence; every decode step groups all six behind the 18 shared blocks.
  EXPECT_EQ(a[0].cascade_seqs, 0);
  EXPECT_EQ(a[1].cascade_seqs, 0);
  for (size_t st = 2; st < a.size(); ++st) EXPECT_EQ(a[st].cascade_seqs, 6) << "step " << st;
  std::printf("[ figures  ] %s: worst relative logit error cascade vs per-sequence %.2e\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(models, cascade_model_test,
                         ::testing::Values("llama-tiny", "qwen2-tiny", "mistral-tiny", "llama-hd128-bf16",
                                           "qwen3-tiny", "mixtral-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(cascade_attention, tensor_parallel_shards_take_the_same_groups) {
  auto on = make_executor("llama-tiny", true, 2);
  auto off = make_executor("llama-tiny", false, 1);
  ASSERT_TRUE(on && off);
  const auto a = shared_prompt_steps(*on, 4);
  const auto b = shared_prompt_steps(*off, 4);
  ASSERT_EQ(a.size(), b.size());
  for (size_t st = 0; st < a.size(); ++st) {
    EXPECT_EQ(a[st].tokens, b[st].tokens) << "step " << st;
    for (size_t i = 0; i < a[st].logits.size(); ++i)
      EXPECT_LT(relative_error(a[st].logits[i], b[st].logits[i]), cascade_tolerance) << "step " << st;
  }
  EXPECT_EQ(a.back().cascade_seqs, 6);
}

TEST(cascade_attention, models_it_does_not_fit_keep_the_per_sequence_path) {
  // A 48-token sliding window: the queries do not all see the prefix. DeepSeek-V2: latent attention.
  for (const char* model : {"mistral-sliding-window", "deepseek-v2-tiny"}) {
    auto on = make_executor(model, true);
    ASSERT_TRUE(on);
    for (const auto& st : shared_prompt_steps(*on, 2)) EXPECT_EQ(st.cascade_seqs, 0) << model;
  }
}

}  // namespace
}  // namespace actorserve::testing
