// The CPU executor against HF transformers' fp32 reference outputs for every fixture model.
#include <gtest/gtest.h>

#include <cstdio>

#include "model/model_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

constexpr double logits_tolerance = 1e-4;   // max |diff| / max |ref| for fp32
constexpr double margin_noise = 1e-3;       // greedy steps with a smaller top-2 margin may flip
constexpr int32_t block_size = 16;

class reference_test : public ::testing::TestWithParam<std::string> {};

TEST_P(reference_test, logits_and_greedy_match_transformers) {
  const std::string name = GetParam();
  gpu::cpu_executor_options opts;
  opts.block_size = block_size;
  opts.num_blocks = 128;
  opts.threads = 2;
  auto ex = gpu::cpu_executor::create(model_dir(name), opts);
  ASSERT_TRUE(ex.ok()) << ex.err().message;
  auto cases = load_reference(name);
  ASSERT_EQ(cases.size(), 8u);
  double worst = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& rc = cases[c];
    const int32_t total = static_cast<int32_t>(rc.prompt_ids.size() + rc.greedy_ids.size());
    // Blocks in reverse order: the paged path must not rely on contiguous block ids.
    std::vector<int32_t> blocks = block_range(0, (total + block_size - 1) / block_size);
    std::reverse(blocks.begin(), blocks.end());
    generation g = run_greedy(*ex.value(), rc.prompt_ids, blocks, 0, static_cast<int32_t>(rc.greedy_ids.size()));
    const double err = relative_error(g.prompt_logits, rc.last_logits);
    worst = std::max(worst, err);
    EXPECT_LT(err, logits_tolerance) << name << " case " << c << " (prompt " << rc.prompt_ids.size() << ")";
    size_t compared = 0;
    while (compared < rc.greedy_ids.size() && rc.greedy_top2_margins[compared] >= margin_noise) ++compared;
    size_t matched = 0;
    while (matched < g.tokens.size() && matched < rc.greedy_ids.size() && g.tokens[matched] == rc.greedy_ids[matched])
      ++matched;
    EXPECT_GE(matched, compared) << name << " case " << c << ": greedy diverged at step " << matched
                                 << " with reference margin " << rc.greedy_top2_margins[std::min(matched, compared)];
    std::printf("[ %s ] case %zu: prompt %zu tokens, logits rel err %.2e, greedy %zu/%zu steps matched "
                "(%zu above the %.0e margin)\n",
                name.c_str(), c, rc.prompt_ids.size(), err, matched, rc.greedy_ids.size(), compared, margin_noise);
  }
  std::printf("[ %s ] max logits rel err %.3e\n", name.c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(models, reference_test,
                         ::testing::Values("llama-tiny", "llama-hd128-bf16", "qwen2-tiny", "mistral-tiny",
                                           "mistral-sliding-window", "qwen3-tiny", "qwen3-hd128-bf16",
                                           "qwen3-moe-tiny", "qwen3-moe-bf16", "mixtral-tiny", "mixtral-bf16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace actorserve::testing
