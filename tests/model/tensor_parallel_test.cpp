// Tensor parallelism on the CPU executor: every fixture model split over 2 and 4 shard executors
// (an executor_group, each shard on its own thread, summing through their host_collective) gives
// the same greedy tokens as one shard and logits within fp32 summation-order tolerance, with the
// reference prompts batched together, prefilled whole and in chunks; the mixture-of-experts
// fixtures also with whole experts per shard (expert parallel).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/model_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

constexpr double logits_tolerance = 1e-4;   // max |diff| / max |one shard's|, as against transformers
constexpr double margin_noise = 1e-3;       // argmaxes with a smaller top-2 margin may flip
constexpr int32_t block_size = 16;

std::unique_ptr<gpu::executor_group> make(const std::string& model, int32_t tp, bool expert_parallel = false) {
  gpu::cpu_executor_options opts;
  opts.block_size = block_size;
  opts.num_blocks = 256;
  opts.threads = 2;
  opts.tensor_parallel_size = tp;
  opts.expert_parallel = expert_parallel;
  auto group = make_cpu_group(model_dir(model), opts);
  EXPECT_TRUE(group) << model << " tp " << tp << (expert_parallel ? " ep" : "");
  return group;
}

/// Runs every reference case as one sequence of a shared batch: prompts in chunks of `chunk`
/// tokens (0: whole), then the reference's greedy tokens fed back one per step. Returns, per case,
/// the logits after its prompt and after each fed token.
std::vector<std::vector<std::vector<float>>> forced_logits(gpu::executor_group& ex,
                                                           const std::vector<reference_case>& cases, int32_t chunk) {
  std::vector<std::vector<std::vector<float>>> out(cases.size());
  std::vector<std::vector<int32_t>> blocks;
  int32_t next_block = 0;
  size_t longest = 0;
  for (const auto& rc : cases) {
    const int32_t total = static_cast<int32_t>(rc.prompt_ids.size() + rc.greedy_ids.size());
    const int32_t n = (total + block_size - 1) / block_size;
    blocks.push_back(block_range(next_block, n));
    std::reverse(blocks.back().begin(), blocks.back().end());
    next_block += n;
    longest = std::max(longest, rc.prompt_ids.size() + rc.greedy_ids.size());
  }
  std::vector<size_t> fed(cases.size(), 0);   // tokens of prompt + greedy fed so far
  for (uint64_t step = 0;; ++step) {
    gpu::step_batch b;
    b.step_id = step;
    std::vector<size_t> in_batch;
    for (size_t c = 0; c < cases.size(); ++c) {
      const auto& rc = cases[c];
      const size_t p = rc.prompt_ids.size(), last = p + rc.greedy_ids.size() - 1;   // the last token is never fed
      if (fed[c] >= last) continue;
      std::vector<int32_t> toks;
      if (fed[c] < p) {
        const size_t end = chunk > 0 ? std::min(p, fed[c] + static_cast<size_t>(chunk)) : p;
        toks.assign(rc.prompt_ids.begin() + static_cast<ptrdiff_t>(fed[c]), rc.prompt_ids.begin() + static_cast<ptrdiff_t>(end));
      } else {
        toks.push_back(rc.greedy_ids[fed[c] - p]);
      }
      b.seqs.push_back(greedy_seq(c + 1, static_cast<int32_t>(fed[c]), toks, blocks[c]));
      fed[c] += toks.size();
      in_batch.push_back(c);
    }
    if (in_batch.empty()) break;
    std::vector<std::vector<float>> logits;
    gpu::step_result r = run_group_step(ex, b, &logits);
    EXPECT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    if (!r.outcome.ok()) return out;
    for (size_t i = 0; i < in_batch.size(); ++i)
      if (fed[in_batch[i]] >= cases[in_batch[i]].prompt_ids.size()) out[in_batch[i]].push_back(std::move(logits[i]));
  }
  return out;
}

/// Index of the largest logit and its margin over the second.
std::pair<size_t, double> top(const std::vector<float>& l) {
  size_t best = 0, second = l.size() > 1 ? 1 : 0;
  if (l[second] > l[best]) std::swap(best, second);
  for (size_t i = 2; i < l.size(); ++i) {
    if (l[i] > l[best]) {
      second = best;
      best = i;
    } else if (l[i] > l[second]) {
      second = i;
    }
  }
  return {best, static_cast<double>(l[best]) - l[second]};
}

struct tp_param {
  std::string model;
  int32_t tp;
  bool expert_parallel = false;   ///< whole experts per shard (--enable-expert-parallel)
};
void PrintTo(const tp_param& p, std::ostream* os) {
  *os << p.model << " tp " << p.tp << (p.expert_parallel ? " expert parallel" : "");
}

class tensor_parallel_test : public ::testing::TestWithParam<tp_param> {};

TEST_P(tensor_parallel_test, matches_one_shard) {
  const auto [model, tp, expert_parallel] = GetParam();
  const char* mode = expert_parallel ? " ep" : "";
  auto cases = load_reference(model);
  ASSERT_EQ(cases.size(), 8u);
  auto one = make(model, 1);
  auto split = make(model, tp, expert_parallel);
  ASSERT_TRUE(one && split);
  double worst_abs = 0, worst_rel = 0;
  size_t steps = 0, compared = 0, matched = 0;
  for (int32_t chunk : {0, 7}) {
    const auto want = forced_logits(*one, cases, chunk);
    const auto got = forced_logits(*split, cases, chunk);
    for (size_t c = 0; c < cases.size(); ++c) {
      ASSERT_EQ(got[c].size(), want[c].size()) << model << " case " << c;
      ASSERT_EQ(want[c].size(), cases[c].greedy_ids.size()) << model << " case " << c;
      for (size_t s = 0; s < want[c].size(); ++s) {
        const double rel = relative_error(got[c][s], want[c][s]);
        double abs = 0;
        for (size_t i = 0; i < want[c][s].size(); ++i)
          abs = std::max(abs, std::fabs(static_cast<double>(got[c][s][i]) - want[c][s][i]));
        worst_abs = std::max(worst_abs, abs);
        worst_rel = std::max(worst_rel, rel);
        EXPECT_LT(rel, logits_tolerance) << model << " tp " << tp << mode << " case " << c << " step " << s;
        ++steps;
        const auto [want_id, margin] = top(want[c][s]);
        if (margin < margin_noise) continue;
        ++compared;
        const bool same = top(got[c][s]).first == want_id;
        matched += same;
        EXPECT_TRUE(same) << model << " tp " << tp << mode << " case " << c << " step " << s
                          << ": greedy token differs";
      }
    }
  }
  std::printf("[ %s tp %d%s ] %zu steps: max |logit diff| %.3e, max rel err %.3e, greedy tokens %zu/%zu equal "
              "(steps with a top-2 margin >= %.0e)\n",
              model.c_str(), tp, mode, steps, worst_abs, worst_rel, matched, compared, margin_noise);
}

std::vector<tp_param> params() {
  std::vector<tp_param> out;
  for (const char* m : {"llama-tiny", "llama-hd128-bf16", "qwen2-tiny", "mistral-tiny", "mistral-sliding-window",
                        "qwen3-tiny", "qwen3-hd128-bf16", "qwen3-moe-tiny", "qwen3-moe-bf16", "mixtral-tiny",
                        "mixtral-bf16", "deepseek-v2-tiny", "deepseek-v2-qlora-yarn-bf16", "deepseek-v2-yarn-tiny"})
    for (int32_t tp : {2, 4}) out.push_back({m, tp});
  // Whole experts per shard: 4, 8 and 16 experts split evenly, deepseek-v2-yarn-tiny's 6 over 4
  // shards unevenly (1, 2, 1, 2).
  for (const char* m : {"qwen3-moe-tiny", "qwen3-moe-bf16", "mixtral-tiny", "mixtral-bf16", "deepseek-v2-tiny",
                        "deepseek-v2-qlora-yarn-bf16", "deepseek-v2-yarn-tiny"})
    for (int32_t tp : {2, 4}) out.push_back({m, tp, true});
  return out;
}

std::string param_name(const ::testing::TestParamInfo<tp_param>& info) {
  std::string n = info.param.model + "_tp" + std::to_string(info.param.tp) + (info.param.expert_parallel ? "_ep" : "");
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

INSTANTIATE_TEST_SUITE_P(models, tensor_parallel_test, ::testing::ValuesIn(params()), param_name);

TEST(tensor_parallel, sizes_that_do_not_divide_the_heads_are_refused_naming_the_flag) {
  // Every fixture has 4 attention heads: 3 shards cannot split them.
  for (const char* model : {"llama-tiny", "mixtral-tiny", "deepseek-v2-tiny"}) {
    gpu::cpu_executor_options opts;
    opts.num_blocks = 16;
    opts.threads = 1;
    opts.tensor_parallel_size = 3;
    auto ex = gpu::make_cpu_executor(model_dir(model), opts);
    ASSERT_FALSE(ex.ok()) << model;
    EXPECT_NE(ex.err().message.find("--tensor-parallel-size 3"), std::string::npos) << ex.err().message;
    EXPECT_NE(ex.err().message.find("4 attention heads"), std::string::npos) << ex.err().message;
  }
}

TEST(expert_parallel, is_refused_for_a_model_without_experts_naming_the_flag) {
  for (int32_t tp : {1, 2}) {
    gpu::cpu_executor_options opts;
    opts.num_blocks = 16;
    opts.threads = 1;
    opts.tensor_parallel_size = tp;
    opts.expert_parallel = true;
    auto ex = gpu::make_cpu_executor(model_dir("llama-tiny"), opts);
    ASSERT_FALSE(ex.ok()) << "tp " << tp;
    EXPECT_NE(ex.err().message.find("--enable-expert-parallel"), std::string::npos) << ex.err().message;
    EXPECT_NE(ex.err().message.find("LlamaForCausalLM has no routed experts"), std::string::npos) << ex.err().message;
  }
}

TEST(expert_parallel, kv_cache_bytes_are_tensor_parallels) {
  // Attention stays tensor parallel: the KV cache is split by heads exactly as without the flag.
  auto tp = make("mixtral-tiny", 2), ep = make("mixtral-tiny", 2, true);
  ASSERT_TRUE(tp && ep);
  EXPECT_EQ(ep->info().host_kv_cache_bytes, tp->info().host_kv_cache_bytes);
  EXPECT_EQ(ep->info().num_experts, 4);
}

TEST(tensor_parallel, kv_cache_bytes_count_every_shard) {
  // llama-tiny: 2 KV heads. Over 2 shards each holds one (the same bytes in all); over 4 each
  // holds a copy of one (twice the bytes).
  auto one = make("llama-tiny", 1), two = make("llama-tiny", 2), four = make("llama-tiny", 4);
  ASSERT_TRUE(one && two && four);
  EXPECT_EQ(two->info().host_kv_cache_bytes, one->info().host_kv_cache_bytes);
  EXPECT_EQ(four->info().host_kv_cache_bytes, 2 * one->info().host_kv_cache_bytes);
  EXPECT_EQ(four->info().vocab_size, one->info().vocab_size);
}

}  // namespace
}  // namespace actorserve::testing
