// The CPU executor against HF transformers' fp32 reference outputs for every fixture model, and
// for DeepSeek-V2 in each form of its latent attention.
#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>

#include "model/model_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

constexpr double logits_tolerance = 1e-4;   // max |diff| / max |ref| for fp32
constexpr double margin_noise = 1e-3;       // greedy steps with a smaller top-2 margin may flip
constexpr int32_t block_size = 16;

/// A fixture, and for latent attention (DeepSeek-V2) the form the executor computes it in.
struct reference_param {
  std::string model;
  gpu::cpu::mla_form form = gpu::cpu::mla_form::automatic;
};

void PrintTo(const reference_param& p, std::ostream* os) { *os << p.model << " " << gpu::cpu::to_string(p.form); }

class reference_test : public ::testing::TestWithParam<reference_param> {};

TEST_P(reference_test, logits_and_greedy_match_transformers) {
  const std::string model = GetParam().model;
  const std::string name = model + (GetParam().form == gpu::cpu::mla_form::automatic
                                        ? std::string()
                                        : std::string("/") + gpu::cpu::to_string(GetParam().form));
  gpu::cpu_executor_options opts;
  opts.block_size = block_size;
  opts.num_blocks = 128;
  opts.threads = 2;
  opts.mla_form = GetParam().form;
  auto ex = gpu::cpu_executor::create(model_dir(model), opts);
  ASSERT_TRUE(ex.ok()) << ex.err().message;
  auto cases = load_reference(model);
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

std::string param_name(const ::testing::TestParamInfo<reference_param>& info) {
  std::string n = info.param.model;
  if (info.param.form != gpu::cpu::mla_form::automatic) n += std::string("_") + gpu::cpu::to_string(info.param.form);
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(models, reference_test,
                         ::testing::Values(reference_param{"llama-tiny"}, reference_param{"llama-hd128-bf16"},
                                           reference_param{"qwen2-tiny"}, reference_param{"mistral-tiny"},
                                           reference_param{"mistral-sliding-window"}, reference_param{"qwen3-tiny"},
                                           reference_param{"qwen3-hd128-bf16"}, reference_param{"qwen3-moe-tiny"},
                                           reference_param{"qwen3-moe-bf16"}, reference_param{"mixtral-tiny"},
                                           reference_param{"mixtral-bf16"}),
                         param_name);

// DeepSeek-V2 in each form of its latent attention: chosen per sequence by cost, and each forced.
std::vector<reference_param> deepseek_params() {
  std::vector<reference_param> out;
  for (const char* model : {"deepseek-v2-tiny", "deepseek-v2-qlora-yarn-bf16", "deepseek-v2-yarn-tiny"})
    for (auto form : {gpu::cpu::mla_form::automatic, gpu::cpu::mla_form::up_projected, gpu::cpu::mla_form::absorbed})
      out.push_back({model, form});
  return out;
}
INSTANTIATE_TEST_SUITE_P(deepseek, reference_test, ::testing::ValuesIn(deepseek_params()), param_name);

}  // namespace
}  // namespace actorserve::testing
