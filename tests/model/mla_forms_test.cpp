// DeepSeek-V2's latent attention in its two forms: absorbed and up-projected compute the same
// logits on the same inputs (prefill, chunked prefill over a cached prefix, decode), and the
// per-sequence choice between them follows their multiply-add counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "model/model_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using gpu::cpu::mla_form;

constexpr double forms_tolerance = 2e-6;   // max |diff| / max |ref|: summation order only

std::unique_ptr<gpu::cpu_executor> make(const std::string& model, mla_form form) {
  gpu::cpu_executor_options opts;
  opts.block_size = 16;
  opts.num_blocks = 80;
  opts.threads = 2;
  opts.mla_form = form;
  auto ex = gpu::cpu_executor::create(model_dir(model), opts);
  EXPECT_TRUE(ex.ok()) << (ex.ok() ? "" : ex.err().message);
  return ex.ok() ? std::move(ex).value() : nullptr;
}

/// Logits after each step: `tokens` fed in chunks of `chunk`, then one token a step (teacher
/// forcing, so both forms see the same inputs whatever they would sample).
std::vector<std::vector<float>> logits_per_step(gpu::cpu_executor& ex, const std::vector<int32_t>& tokens,
                                                size_t prefill, int32_t chunk) {
  std::vector<std::vector<float>> out;
  const std::vector<int32_t> blocks = block_range(0, static_cast<int32_t>((tokens.size() + 15) / 16));
  size_t done = 0;
  uint64_t step_id = 0;
  while (done < tokens.size()) {
    const size_t n = done < prefill ? std::min<size_t>(static_cast<size_t>(chunk), prefill - done) : 1;
    gpu::step_batch b;
    b.step_id = step_id++;
    b.seqs.push_back(greedy_seq(1, static_cast<int32_t>(done),
                                {tokens.begin() + static_cast<std::ptrdiff_t>(done),
                                 tokens.begin() + static_cast<std::ptrdiff_t>(done + n)},
                                blocks));
    std::vector<std::vector<float>> logits;
    auto r = ex.run_step_sync(b, &logits);
    EXPECT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    if (!r.outcome.ok()) return out;
    out.push_back(logits.at(0));
    done += n;
  }
  return out;
}

class mla_forms_test : public ::testing::TestWithParam<std::string> {};

TEST_P(mla_forms_test, absorbed_equals_up_projected_on_the_same_inputs) {
  auto up = make(GetParam(), mla_form::up_projected);
  auto absorbed = make(GetParam(), mla_form::absorbed);
  ASSERT_TRUE(up && absorbed);
  double worst = 0;
  for (const auto& c : load_reference(GetParam())) {
    if (c.prompt_ids.size() > 333) continue;
    std::vector<int32_t> tokens = c.prompt_ids;
    tokens.insert(tokens.end(), c.greedy_ids.begin(), c.greedy_ids.begin() + 8);
    for (int32_t chunk : {1000, 33}) {   // whole prompt, and chunks over a cached prefix
      const auto a = logits_per_step(*up, tokens, c.prompt_ids.size(), chunk);
      const auto b = logits_per_step(*absorbed, tokens, c.prompt_ids.size(), chunk);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        const double err = relative_error(b[i], a[i]);
        worst = std::max(worst, err);
        EXPECT_LT(err, forms_tolerance) << "prompt " << c.prompt_ids.size() << " chunk " << chunk << " step " << i;
      }
    }
  }
  std::printf("[ %s ] absorbed vs up-projected: max logits rel err %.3e\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(deepseek, mla_forms_test,
                         ::testing::Values("deepseek-v2-tiny", "deepseek-v2-qlora-yarn-bf16", "deepseek-v2-yarn-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

mla_config v2_lite() {
  mla_config m;
  m.kv_lora_rank = 512;
  m.qk_nope_head_dim = 128;
  m.qk_rope_head_dim = 64;
  m.v_head_dim = 128;
  return m;
}

TEST(mla_forms, costs_count_the_multiply_adds_of_each_form) {
  const mla_config m = v2_lite();
  // One decode query over 1,000 tokens: up-projected expands 1,000 latents (512 x 256 each) and
  // attends over 320 floats a key; absorbed maps the query and output (512 x 256) and attends over
  // 2 x 512 + 64 floats a key.
  EXPECT_DOUBLE_EQ(gpu::cpu::mla_form_cost(m, mla_form::up_projected, 1, 1000), 1000.0 * 512 * 256 + 1000.0 * 320);
  EXPECT_DOUBLE_EQ(gpu::cpu::mla_form_cost(m, mla_form::absorbed, 1, 1000), 512.0 * 256 + 1000.0 * 1088);
  // A prefill of 4 tokens visits 1 + 2 + 3 + 4 pairs.
  EXPECT_DOUBLE_EQ(gpu::cpu::mla_form_cost(m, mla_form::up_projected, 4, 4), 4.0 * 512 * 256 + 10.0 * 320);
  EXPECT_DOUBLE_EQ(gpu::cpu::mla_form_cost(m, mla_form::absorbed, 4, 4), 4.0 * 512 * 256 + 10.0 * 1088);
}

TEST(mla_forms, decode_is_absorbed_and_prefill_up_projected) {
  const mla_config m = v2_lite();
  for (int64_t context : {2, 17, 1000, 8192}) EXPECT_EQ(gpu::cpu::cheaper_mla_form(m, 1, context), mla_form::absorbed);
  for (int64_t n : {1, 16, 1000}) EXPECT_EQ(gpu::cpu::cheaper_mla_form(m, n, n), mla_form::up_projected) << n;
  // A short chunk after a long cached prefix: expanding the prefix costs more than absorbing.
  EXPECT_EQ(gpu::cpu::cheaper_mla_form(m, 16, 4096), mla_form::absorbed);
  // A long chunk after a short prefix: up-projected.
  EXPECT_EQ(gpu::cpu::cheaper_mla_form(m, 2048, 2100), mla_form::up_projected);
}

}  // namespace
}  // namespace actorserve::testing
