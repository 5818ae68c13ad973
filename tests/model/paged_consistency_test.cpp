// The paged path computes one function however a step is cut: chunked prefill, token-by-token,
// mixed batches, shuffled block tables and copy-on-write all give the same logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <random>

#include "model/model_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

constexpr double same_tolerance = 1e-5;   // different summation orders only

std::unique_ptr<gpu::cpu_executor> make_executor(const std::string& name, int32_t block_size = 16) {
  gpu::cpu_executor_options opts;
  opts.block_size = block_size;
  opts.num_blocks = 64;
  opts.threads = 2;
  auto ex = gpu::cpu_executor::create(model_dir(name), opts);
  EXPECT_TRUE(ex.ok()) << ex.err().message;
  return ex.ok() ? std::move(ex).value() : nullptr;
}

std::vector<int32_t> prompt_of(const std::string& name, size_t len) {
  for (const auto& c : load_reference(name))
    if (c.prompt_ids.size() == len) return c.prompt_ids;
  ADD_FAILURE() << "no case of length " << len;
  return {};
}

class chunking_test : public ::testing::TestWithParam<std::string> {};

TEST_P(chunking_test, prefill_chunked_and_token_by_token_agree) {
  auto ex = make_executor(GetParam());
  ASSERT_TRUE(ex);
  const auto prompt = prompt_of(GetParam(), 63);
  const auto blocks = block_range(0, 5);
  generation whole = run_greedy(*ex, prompt, blocks, 0, 4);
  for (int32_t chunk : {17, 5, 1}) {
    generation g = run_greedy(*ex, prompt, blocks, chunk, 4);
    EXPECT_LT(relative_error(g.prompt_logits, whole.prompt_logits), same_tolerance) << "chunk " << chunk;
    EXPECT_EQ(g.tokens, whole.tokens) << "chunk " << chunk;
  }
}

TEST_P(chunking_test, mixed_prefill_and_decode_step_equals_separate_steps) {
  auto ex = make_executor(GetParam());
  ASSERT_TRUE(ex);
  const auto long_prompt = prompt_of(GetParam(), 200);
  const auto short_prompt = prompt_of(GetParam(), 17);
  // Reference: each sequence alone.
  generation a = run_greedy(*ex, short_prompt, block_range(0, 2), 0, 2);
  generation b = run_greedy(*ex, long_prompt, block_range(10, 13), 0, 1);
  // Sequence A prefilled alone, then A's decode and B's whole prefill share one step.
  gpu::step_batch first;
  first.seqs.push_back(greedy_seq(1, 0, short_prompt, block_range(30, 2)));
  auto r1 = ex->run_step_sync(first);
  ASSERT_TRUE(r1.outcome.ok());
  ASSERT_EQ(r1.tokens.at(0).token_id, a.tokens[0]);
  gpu::step_batch mixed;
  mixed.seqs.push_back(greedy_seq(2, 0, long_prompt, block_range(40, 13)));
  mixed.seqs.push_back(greedy_seq(1, 17, {a.tokens[0]}, block_range(30, 2)));
  std::vector<std::vector<float>> logits;
  auto r2 = ex->run_step_sync(mixed, &logits);
  ASSERT_TRUE(r2.outcome.ok()) << r2.outcome.err().message;
  ASSERT_EQ(r2.tokens.size(), 2u);
  EXPECT_EQ(r2.tokens[0].seq_id, 2u);
  EXPECT_EQ(r2.tokens[0].token_id, b.tokens[0]);
  EXPECT_EQ(r2.tokens[1].seq_id, 1u);
  EXPECT_EQ(r2.tokens[1].token_id, a.tokens[1]);
  EXPECT_LT(relative_error(logits[0], b.prompt_logits), same_tolerance);
}

TEST_P(chunking_test, shuffled_block_table_gives_same_logits) {
  auto ex = make_executor(GetParam());
  ASSERT_TRUE(ex);
  const auto prompt = prompt_of(GetParam(), 200);
  generation plain = run_greedy(*ex, prompt, block_range(0, 14), 0, 3);
  std::vector<int32_t> shuffled = block_range(20, 44);
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(42));
  shuffled.resize(14);
  generation g = run_greedy(*ex, prompt, shuffled, 33, 3);
  EXPECT_LT(relative_error(g.prompt_logits, plain.prompt_logits), same_tolerance);
  EXPECT_EQ(g.tokens, plain.tokens);
}

INSTANTIATE_TEST_SUITE_P(models, chunking_test,
                         ::testing::Values("llama-tiny", "qwen2-tiny", "mistral-tiny", "mistral-sliding-window",
                                           "qwen3-tiny", "qwen3-moe-tiny", "mixtral-tiny", "deepseek-v2-tiny",
                                           "deepseek-v2-qlora-yarn-bf16", "deepseek-v2-yarn-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(cpu_executor, block_copy_forks_a_cached_prefix) {
  // Per-head K/V (llama-tiny) and the latent rows of multi-head latent attention (deepseek-v2-tiny).
  for (const char* model : {"llama-tiny", "deepseek-v2-tiny"}) {
    auto ex = make_executor(model, 4);
    ASSERT_TRUE(ex);
    const auto prompt = prompt_of(model, 7);   // blocks 0 (4 tokens) and 1 (3 tokens)
    generation ref = run_greedy(*ex, prompt, {0, 1}, 0, 2);
    // Fill block 5 with another sequence's K/V first, so that only the copy can make it right.
    run_greedy(*ex, prompt_of(model, 63), block_range(4, 16), 0, 1);
    // A second sequence shares block 0 and gets a copy of the half-full block 1 as block 5.
    gpu::step_batch b;
    b.block_copies.push_back({1, 5});
    b.seqs.push_back(greedy_seq(9, 7, {ref.tokens[0]}, {0, 5}));
    auto r = ex->run_step_sync(b);
    ASSERT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    EXPECT_EQ(r.tokens.at(0).token_id, ref.tokens[1]) << model;
  }
}

TEST(cpu_executor, submit_runs_steps_in_order_on_its_own_thread) {
  auto ex = make_executor("llama-tiny");
  ASSERT_TRUE(ex);
  const auto prompt = prompt_of("llama-tiny", 16);
  generation ref = run_greedy(*ex, prompt, block_range(0, 2), 0, 3);
  std::vector<uint64_t> order;
  std::vector<int32_t> tokens;
  std::promise<void> finished;
  const auto caller = std::this_thread::get_id();
  bool other_thread = true;
  gpu::step_batch prefill;
  prefill.step_id = 100;
  prefill.seqs.push_back(greedy_seq(3, 0, prompt, block_range(4, 2)));
  ex->submit(prefill, [&](gpu::step_result r) {
    other_thread = other_thread && std::this_thread::get_id() != caller;
    order.push_back(r.step_id);
    tokens.push_back(r.tokens.at(0).token_id);
    gpu::step_batch decode;   // issued from the callback, as the engine's scheduler would
    decode.step_id = 101;
    decode.seqs.push_back(greedy_seq(3, 16, {r.tokens.at(0).token_id}, block_range(4, 2)));
    ex->submit(decode, [&](gpu::step_result r2) {
      order.push_back(r2.step_id);
      tokens.push_back(r2.tokens.at(0).token_id);
      finished.set_value();
    });
  });
  ASSERT_EQ(finished.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(other_thread);
  EXPECT_EQ(order, (std::vector<uint64_t>{100, 101}));
  EXPECT_EQ(tokens, (std::vector<int32_t>{ref.tokens[0], ref.tokens[1]}));
}

}  // namespace
}  // namespace actorserve::testing
