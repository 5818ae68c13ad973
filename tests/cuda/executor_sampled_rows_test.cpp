// The last layer of a prefill-carrying step runs past its K/V writes on the sampled rows only
// (cuda_step.cpp, launch_shape::sampled_only). The same mixed steps through an executor with it
// and one without (cuda_tuning::last_layer_all_rows) give the same logits, and the K/V both
// write lets later decode steps agree too.
#include <gtest/gtest.h>

#include <random>

#include <fmt/format.h>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

struct sampled_rows_param {
  const char* model;
  kv_cache_layout layout;
  int block_size;
};

class CudaSampledRows : public ::testing::TestWithParam<sampled_rows_param> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

std::unique_ptr<gpu::executor> make(const sampled_rows_param& p, bool all_rows) {
  gpu::cuda_executor_options o = test_options(true);
  o.kv_layout = p.layout;
  o.block_size = p.block_size;
  o.tuning.last_layer_all_rows = all_rows;
  auto made = gpu::make_cuda_executor(model_dir(p.model), o);
  EXPECT_TRUE(made.ok()) << made.err().message;
  return made.ok() ? std::move(made.value()) : nullptr;
}

struct prompt_run {
  std::vector<std::vector<float>> logits;  ///< every sampled row of every step, in order
  std::vector<int32_t> tokens;             ///< what was sampled, in the same order
};

/// Four prompts in chunks: a step that samples nothing (two first chunks), one that finishes two
/// prompts, starts a third whole and a fourth's first chunk, one mixing decodes with the fourth's
/// last chunk, then six decode steps. Decode inputs come from `forced` when given (the same
/// tokens into both executors), else from the executor's own samples.
prompt_run run(gpu::executor& ex, const std::vector<int32_t>& forced) {
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(&ex);
  std::mt19937 rng(5);
  const int lens[4] = {70, 50, 25, 60};
  std::vector<std::vector<int32_t>> prompts(4), blocks(4);
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < lens[s]; ++i) prompts[s].push_back(int32_t(rng() % 1000));
    for (int k = 0; k < 8; ++k) blocks[s].push_back(s * 8 + k);
  }
  auto chunk = [&](int s, int from, int to) {
    std::vector<int32_t> t(prompts[s].begin() + from, prompts[s].begin() + to);
    return greedy(uint64_t(s), from, t, blocks[s], to == lens[s]);
  };
  prompt_run out;
  std::vector<int32_t> last(4, 0);
  size_t next_forced = 0;
  auto step = [&](gpu::step_batch b) {
    auto r = run_step(ex, b);
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    const auto l = probe->last_logits();
    size_t row = 0;
    for (const auto& s : b.seqs) {
      if (!s.sample) continue;
      ASSERT_LT(row, l.size());
      out.logits.push_back(l[row]);
      out.tokens.push_back(r.tokens.at(row).token_id);
      last[s.seq_id] = next_forced < forced.size() ? forced[next_forced] : r.tokens.at(row).token_id;
      ++next_forced;
      ++row;
    }
  };
  auto decode = [&](int s, int done) { return greedy(uint64_t(s), done, {last[s]}, blocks[s]); };
  step({.seqs = {chunk(0, 0, 40), chunk(1, 0, 30)}});
  step({.seqs = {chunk(0, 40, 70), chunk(1, 30, 50), chunk(2, 0, 25), chunk(3, 0, 33)}});
  step({.seqs = {decode(0, 70), decode(1, 50), chunk(3, 33, 60), decode(2, 25)}});
  for (int k = 0; k < 6; ++k) {
    gpu::step_batch b;
    for (int s = 0; s < 4; ++s) b.seqs.push_back(decode(s, lens[s] + (s == 3 ? k : k + 1)));
    step(b);
  }
  return out;
}

TEST_P(CudaSampledRows, LastLayerOnSampledRowsMatchesAllRows) {
  const sampled_rows_param& param = GetParam();
  const std::string name = fmt::format("{} {}/{}", param.model, to_string(param.layout), param.block_size);
  auto all = make(param, true);
  auto sampled = make(param, false);
  ASSERT_TRUE(all && sampled);
  auto steps = [](gpu::executor& ex) { return dynamic_cast<gpu::cuda_executor_probe&>(ex).sampled_only_steps(); };
  // Start-up's memory-planning step (all tokens, none sampled) may count already.
  const int64_t all_before = steps(*all), sampled_before = steps(*sampled);
  const prompt_run ref = run(*all, {});
  const prompt_run got = run(*sampled, ref.tokens);
  ASSERT_EQ(ref.logits.size(), got.logits.size());
  ASSERT_EQ(ref.logits.size(), 3u + 4u + 6u * 4u);  // steps 2 and 3, then 6 decodes of 4
  double worst = 0;
  int compared = 0;
  for (size_t i = 0; i < ref.logits.size(); ++i) {
    const double err = rel_max_err(got.logits[i], ref.logits[i]);
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-2) << name << " sampled row " << i;
    if (top2_margin(ref.logits[i]) >= 5e-2) {
      ++compared;
      EXPECT_EQ(got.tokens[i], ref.tokens[i]) << name << " sampled row " << i;
    }
  }
  std::printf("%s sampled rows vs all rows in the last layer: logits max abs err / max abs ref %.3g; tokens "
              "compared %d\n", name.c_str(), worst, compared);
  EXPECT_EQ(all_before, 0);
  EXPECT_EQ(steps(*all), 0);
  // The three prefill-carrying steps (the first samples nothing at all); not the decodes.
  EXPECT_EQ(steps(*sampled) - sampled_before, 3);
}

// Both tensor-core backends, the generic kernel (qwen2-tiny: head dim 32), and experts in the
// last layer (mixtral-bf16: every layer sparse).
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaSampledRows,
                         ::testing::Values(sampled_rows_param{"llama-hd128-bf16", kv_cache_layout::vllm, 16},
                                           sampled_rows_param{"llama-hd128-bf16", kv_cache_layout::flash_decoding, 64},
                                           sampled_rows_param{"qwen2-tiny", kv_cache_layout::vllm, 16},
                                           sampled_rows_param{"mixtral-bf16", kv_cache_layout::vllm, 16}),
                         [](const auto& info) {
                           const sampled_rows_param& p = info.param;
                           std::string n = fmt::format("{}_{}_{}", p.model, to_string(p.layout), p.block_size);
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace actorserve::testing
