// The real engine (request/scheduler/block-manager/executor actors over the CPU executor) on
// llama-tiny: preemption invariance, prefix caching and tensor-parallel shards (also on the MoE
// fixtures and DeepSeek-V2, whose KV cache holds the latent; their experts also whole per shard),
// cancellation storms and n > 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "config/model_config.hpp"
#include "engine_harness.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::actors {
namespace {

using namespace actors::testing;

/// The scenarios whose outputs must not depend on the model family: dense and mixture-of-experts,
/// per-head and latent KV caches.
class engine_model_test : public ::testing::TestWithParam<std::string> {};

TEST_P(engine_model_test, preemption_under_a_tiny_pool_keeps_greedy_outputs) {
  const std::string model = GetParam();
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  int64_t blocks_needed = 0;
  const int32_t max_tokens = 10;
  for (int i = 0; i < 256; ++i) {
    prompts.push_back(random_prompt(rng, 4, 28));
    blocks_needed += (static_cast<int64_t>(prompts.back().size()) + max_tokens + 15) / 16;
  }
  const int64_t tight_blocks = blocks_needed / 20;  // 5 % of what they need together

  auto ample = start_engine(tiny_config(4096, true, model));
  ASSERT_TRUE(ample);
  const auto expected = run_all(*ample, prompts, greedy(max_tokens));
  EXPECT_EQ(ample->stats().num_preemptions, 0);
  ample->shutdown(std::chrono::milliseconds(0));

  auto tight = start_engine(tiny_config(tight_blocks, true, model));
  ASSERT_TRUE(tight);
  const auto got = run_all(*tight, prompts, greedy(max_tokens));
  ASSERT_EQ(got.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& g = got.at(static_cast<int>(i)).at(0);
    const auto& x = expected.at(static_cast<int>(i)).at(0);
    EXPECT_EQ(g.tokens, x.tokens) << "request " << i;
    EXPECT_EQ(g.text, x.text) << "request " << i;
    EXPECT_EQ(g.finish, finish_reason::length);
    EXPECT_EQ(g.tokens.size(), static_cast<size_t>(max_tokens));
  }
  const auto s = wait_idle(*tight);
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_GT(s.num_recomputed_tokens, 0);
  EXPECT_EQ(s.kv_blocks_total, tight_blocks);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_cached, s.kv_blocks_total) << "blocks leaked";
  EXPECT_EQ(s.requests_finished, 256);
  EXPECT_TRUE(s.healthy);
  std::printf("[ figures  ] %s: tight pool %lld blocks (%lld needed): %lld preemptions, %lld recomputed tokens, "
              "%lld steps\n",
              model.c_str(), static_cast<long long>(tight_blocks), static_cast<long long>(blocks_needed),
              static_cast<long long>(s.num_preemptions), static_cast<long long>(s.num_recomputed_tokens),
              static_cast<long long>(s.num_steps));
}

/// Every token computed passes every sparse layer and goes to top_k experts there, counted once
/// whatever the number of shards.
void expect_each_token_routed_top_k_times(const engine_stats& s, const model_config& mc) {
  std::vector<int32_t> sparse;
  for (int32_t l = 0; l < static_cast<int32_t>(mc.num_layers); ++l)
    if (mc.moe->is_sparse(l)) sparse.push_back(l);
  EXPECT_EQ(s.moe_layers, sparse);
  const auto experts = static_cast<size_t>(mc.moe->num_experts);
  EXPECT_EQ(s.num_experts, static_cast<int32_t>(experts));
  ASSERT_EQ(s.moe_expert_tokens.size(), sparse.size() * experts);
  for (size_t l = 0; l < sparse.size(); ++l) {
    int64_t routed = 0, hottest = 0;
    for (size_t x = 0; x < experts; ++x) {
      routed += s.moe_expert_tokens[l * experts + x];
      hottest = std::max(hottest, s.moe_expert_tokens[l * experts + x]);
    }
    EXPECT_EQ(routed, s.num_computed_tokens * mc.moe->top_k) << "layer " << sparse[l];
    EXPECT_LE(hottest, s.num_computed_tokens) << "an expert sees a token at most once";
  }
}

/// 48 greedy requests over 2 and 4 shards with a tight pool (preemption and prefix hits over the
/// shards' caches) give one shard's tokens; `expert_parallel` gives each shard whole experts.
void expect_shards_keep_greedy_outputs_under_preemption(const std::string& model, bool expert_parallel) {
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 48; ++i) prompts.push_back(random_prompt(rng, 4, 40));
  const int32_t max_tokens = 8;
  auto one = start_engine(tiny_config(4096, true, model));
  ASSERT_TRUE(one);
  const auto expected = run_all(*one, prompts, greedy(max_tokens));
  one->shutdown(std::chrono::milliseconds(0));
  const char* mode = expert_parallel ? " ep" : "";
  for (int64_t tp : {2, 4}) {
    auto cfg = tiny_config(24, true, model);
    cfg.executor.tensor_parallel_size = tp;
    cfg.executor.enable_expert_parallel = expert_parallel;
    auto split = start_engine(cfg);
    ASSERT_TRUE(split);
    const auto got = run_all(*split, prompts, greedy(max_tokens));
    ASSERT_EQ(got.size(), prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(got.at(static_cast<int>(i)).at(0).tokens, expected.at(static_cast<int>(i)).at(0).tokens)
          << model << " tp " << tp << mode << " request " << i;
    const engine_stats s = wait_idle(*split);
    EXPECT_GT(s.num_preemptions, 0);
    if (expert_parallel) {
      auto mc = load_model_config(actorserve::testing::model_dir(model));
      ASSERT_TRUE(mc.ok()) << mc.err().message;
      expect_each_token_routed_top_k_times(s, mc.value());
    }
    split->shutdown(std::chrono::milliseconds(0));
  }
}

TEST_P(engine_model_test, tensor_parallel_shards_keep_greedy_outputs_under_preemption) {
  expect_shards_keep_greedy_outputs_under_preemption(GetParam(), false);
}

TEST_P(engine_model_test, expert_parallel_shards_keep_greedy_outputs_and_expert_counts_under_preemption) {
  const std::string model = GetParam();
  auto mc = load_model_config(actorserve::testing::model_dir(model));
  ASSERT_TRUE(mc.ok()) << mc.err().message;
  if (!mc->moe) {
    auto cfg = tiny_config(24, true, model);
    cfg.executor.tensor_parallel_size = 2;
    cfg.executor.enable_expert_parallel = true;
    auto e = engine::start(cfg);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.err().message.find("--enable-expert-parallel"), std::string::npos) << e.err().message;
    return;
  }
  expect_shards_keep_greedy_outputs_under_preemption(model, true);
}

TEST_P(engine_model_test, prefix_cache_computes_only_uncached_tokens) {
  const std::string model = GetParam();
  std::mt19937 rng(5);
  auto shared = random_prompt(rng, 200, 200);
  auto first = shared;
  auto second = std::vector<int32_t>(shared.begin(), shared.begin() + 192);
  for (int i = 0; i < 10; ++i) second.push_back(700 + i);
  const int32_t max_tokens = 8;

  auto e = start_engine(tiny_config(std::nullopt, true, model));
  ASSERT_TRUE(e);
  run_all(*e, {first}, greedy(max_tokens));
  const auto before = wait_idle(*e);
  EXPECT_EQ(before.num_computed_tokens, 200 + (max_tokens - 1));
  collector c;
  ASSERT_TRUE(e->submit(make_request("b", second, greedy(max_tokens)), c.sink(0)).ok());
  ASSERT_TRUE(c.wait());
  const auto after = wait_idle(*e);
  EXPECT_EQ(after.num_computed_tokens - before.num_computed_tokens, (202 - 192) + (max_tokens - 1))
      << "only the 10 new prompt tokens and the decode steps run through the model";
  EXPECT_EQ(after.prefix_cache_hits - before.prefix_cache_hits, 192);
  EXPECT_EQ(c.usage().at(0).cached_prompt_tokens, 192);

  auto fresh = start_engine(tiny_config(std::nullopt, false, model));
  ASSERT_TRUE(fresh);
  const auto reference = run_all(*fresh, {second}, greedy(max_tokens));
  EXPECT_EQ(c.results().at(0).at(0).tokens, reference.at(0).at(0).tokens);
  EXPECT_EQ(c.results().at(0).at(0).text, reference.at(0).at(0).text);
  EXPECT_EQ(fresh->stats().prefix_cache_hits, 0);
}

TEST_P(engine_model_test, routed_expert_tokens_count_each_computed_token_top_k_times) {
  const std::string model = GetParam();
  auto mc = load_model_config(actorserve::testing::model_dir(model));
  ASSERT_TRUE(mc.ok()) << mc.err().message;
  std::mt19937 rng(3);
  auto e = start_engine(tiny_config(std::nullopt, true, model));
  ASSERT_TRUE(e);
  run_all(*e, {random_prompt(rng, 50, 80), random_prompt(rng, 10, 30)}, greedy(6));
  engine_stats s = wait_idle(*e);
  if (!mc->moe) {
    EXPECT_TRUE(s.moe_layers.empty());
    EXPECT_TRUE(s.moe_expert_tokens.empty());
    return;
  }
  expect_each_token_routed_top_k_times(s, mc.value());
}

INSTANTIATE_TEST_SUITE_P(models, engine_model_test,
                         ::testing::Values("llama-tiny", "qwen3-moe-tiny", "mixtral-tiny", "qwen3-moe-bf16",
                                           "deepseek-v2-tiny", "deepseek-v2-qlora-yarn-bf16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(engine, cancellation_storm_leaks_nothing_and_keeps_serving) {
  auto e = start_engine(tiny_config(256));
  ASSERT_TRUE(e);
  std::mt19937 rng(99);
  collector c;
  const int n = 1000;
  for (int i = 0; i < n; ++i) {
    auto p = greedy(16);
    auto req = make_request("c" + std::to_string(i), random_prompt(rng, 3, 40), p);
    if (i % 10 == 3) req.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(rng() % 50);
    // Some consumers give up by returning false after a few deltas.
    ASSERT_TRUE(e->submit(std::move(req), c.sink(i, i % 7 == 5 ? 1 + static_cast<int>(rng() % 6) : 0)).ok());
    if (i % 3 == 0) e->cancel("c" + std::to_string(rng() % static_cast<uint32_t>(i + 1)));
  }
  // While they run: cancel at random points in time.
  for (int k = 0; k < 300; ++k) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    e->cancel("c" + std::to_string(rng() % n));
  }
  for (int i = 0; i < n; i += 2) e->cancel("c" + std::to_string(i));
  ASSERT_TRUE(c.wait(std::chrono::seconds(120)));
  auto s = wait_idle(*e);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_cached, s.kv_blocks_total) << "blocks leaked";
  EXPECT_GT(s.requests_cancelled, 300);
  EXPECT_TRUE(s.healthy);

  // The engine keeps serving, and what it serves matches a fresh engine.
  std::vector<int32_t> prompt{5, 9, 33, 70, 12, 401};
  const auto after = run_all(*e, {prompt}, greedy(12));
  auto fresh = start_engine(tiny_config());
  const auto reference = run_all(*fresh, {prompt}, greedy(12));
  EXPECT_EQ(after.at(0).at(0).tokens, reference.at(0).at(0).tokens);
  EXPECT_EQ(after.at(0).at(0).tokens.size(), 12u);
}

TEST(engine, parallel_sampling_shares_prompt_blocks) {
  auto e = start_engine(tiny_config());
  ASSERT_TRUE(e);
  std::mt19937 rng(21);
  const auto prompt = random_prompt(rng, 40, 40);  // 2 full blocks + 8 tokens
  sampling_params p;
  p.n = 4;
  p.temperature = 1.5f;
  p.max_tokens = 16;
  p.ignore_eos = true;
  p.seed = 1234;
  std::atomic<int64_t> max_shared{0};
  collector c;
  auto inner = c.sink(0);
  ASSERT_TRUE(e->submit(make_request("n4", prompt, p), [&](delta d) {
                  const int64_t shared = e->stats().kv_blocks_shared;
                  int64_t m = max_shared.load();
                  while (shared > m && !max_shared.compare_exchange_weak(m, shared)) {
                  }
                  return inner(std::move(d));
                }).ok());
  ASSERT_TRUE(c.wait());
  const auto r = c.results().at(0);
  ASSERT_EQ(r.size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (const auto& [index, choice] : r) {
    EXPECT_EQ(choice.tokens.size(), 16u) << "choice " << index;
    EXPECT_EQ(choice.finish, finish_reason::length);
    distinct.insert(choice.tokens);
  }
  EXPECT_GE(distinct.size(), 3u) << "four samples with different seeds are independent";
  EXPECT_EQ(max_shared.load(), 2) << "the two full prompt blocks are shared by the four samples";
  const auto s = wait_idle(*e);
  EXPECT_EQ(s.num_computed_tokens, 39 + 4 * 16) << "the prompt is computed once, then each sample alone";
  EXPECT_EQ(c.usage().at(0).completion_tokens, 64);
  EXPECT_EQ(s.kv_blocks_used, 0);

  // Same seed, same four streams.
  collector again;
  ASSERT_TRUE(e->submit(make_request("n4b", prompt, p), again.sink(0)).ok());
  ASSERT_TRUE(again.wait());
  const auto replay = again.results().at(0);
  for (const auto& [index, choice] : replay) EXPECT_EQ(choice.tokens, r.at(index).tokens);
}

TEST(engine, stop_strings_end_the_text_before_the_match) {
  auto e = start_engine(tiny_config());
  ASSERT_TRUE(e);
  const std::vector<int32_t> prompt{964, 653, 102, 252, 528, 174, 781};
  const auto full = run_all(*e, {prompt}, greedy(24)).at(0).at(0);
  ASSERT_GE(full.text.size(), 12u) << full.text;
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  const size_t cut = full.text.find(stop);
  auto p = greedy(24);
  p.stop = {stop};
  const auto stopped = run_all(*e, {prompt}, p).at(0).at(0);
  EXPECT_EQ(stopped.text, full.text.substr(0, cut));
  EXPECT_EQ(stopped.finish, finish_reason::stop);
  EXPECT_LT(stopped.tokens.size(), full.tokens.size());
  EXPECT_EQ(wait_idle(*e).kv_blocks_used, 0);
}

TEST(engine, logit_bias_steers_the_cpu_executor_and_out_of_range_ids_are_refused) {
  auto e = start_engine(tiny_config());
  ASSERT_TRUE(e);
  const std::vector<int32_t> prompt{964, 653, 102, 252};
  const auto plain = run_all(*e, {prompt}, greedy(6)).at(0).at(0);
  auto p = greedy(6);
  const int32_t forced = plain.tokens.at(0) == 77 ? 78 : 77;
  p.logit_bias = {{forced, 100.0f}};
  const auto steered = run_all(*e, {prompt}, p).at(0).at(0);
  EXPECT_EQ(steered.tokens, std::vector<int32_t>(steered.tokens.size(), forced));
  p.logit_bias = {{5'000'000, 1.0f}};
  auto st = e->submit(make_request("far", prompt, p), [](delta) { return true; });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().message.rfind("logit_bias:", 0), 0u) << st.err().message;
}

TEST(engine, the_token_that_stops_a_sequence_is_not_in_its_text) {
  auto e = start_engine(tiny_config());
  ASSERT_TRUE(e);
  const std::vector<int32_t> prompt{964, 653, 102, 252};
  const int32_t eos = e->tokenizer().eos_token_ids().at(0);
  for (bool skip_special : {true, false}) {
    auto p = greedy(6);
    p.skip_special_tokens = skip_special;
    p.ignore_eos = false;
    p.logit_bias = {{eos, 100.0f}};  // EOS first
    const auto at_eos = run_all(*e, {prompt}, p).at(0).at(0);
    EXPECT_EQ(at_eos.tokens, std::vector<int32_t>{eos});
    EXPECT_EQ(at_eos.text, "") << "skip_special_tokens " << skip_special;
    EXPECT_EQ(at_eos.finish, finish_reason::stop);
  }
  auto p = greedy(6);
  p.logit_bias = {{77, 100.0f}};
  p.stop_token_ids = {77};
  const auto stopped = run_all(*e, {prompt}, p).at(0).at(0);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>{77});
  EXPECT_EQ(stopped.text, "");
}

TEST(engine, a_request_arriving_while_the_pool_frees_a_finished_one_still_runs) {
  // When a request ends, the scheduler's next plan only frees its blocks. A request that arrived
  // while that reservation was out was left waiting for good (seen under TSan in
  // ServerEngine.StopStringEndsTheChoiceWithoutTheStopText). Each request here is submitted from
  // the sink of the previous one's last delta, i.e. just as the scheduler sends that free-only
  // reservation: every one of the chain must finish.
  auto e = start_engine(tiny_config());
  ASSERT_TRUE(e);
  constexpr int kChain = 200;
  const std::vector<int32_t> prompt{964, 653, 102, 252};
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::function<void(int)> submit_next = [&](int i) {
    auto sink = [&, i](delta d) {
      if (!d.usage) return true;  // not the last delta
      if (i + 1 < kChain) submit_next(i + 1);
      std::lock_guard<std::mutex> l(mu);
      ++finished;
      cv.notify_all();
      return true;
    };
    EXPECT_TRUE(e->submit(make_request("c" + std::to_string(i), prompt, greedy(1)), sink).ok());
  };
  submit_next(0);
  std::unique_lock<std::mutex> l(mu);
  EXPECT_TRUE(cv.wait_for(l, std::chrono::seconds(20), [&] { return finished == kChain; }))
      << finished << " of " << kChain << " requests finished";
  l.unlock();
  EXPECT_EQ(wait_idle(*e).kv_blocks_used, 0);
}

TEST(engine, a_deadline_cancels_a_long_request) {
  auto e = start_engine(tiny_config());
  ASSERT_TRUE(e);
  collector c;
  auto req = make_request("slow", {5, 6, 7, 8}, greedy(1500));
  req.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  ASSERT_TRUE(e->submit(std::move(req), c.sink(0)).ok());
  ASSERT_TRUE(c.wait());
  const auto r = c.results().at(0).at(0);
  EXPECT_EQ(r.finish, finish_reason::cancelled);
  EXPECT_LT(r.tokens.size(), 1500u);
  const auto s = wait_idle(*e);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.requests_cancelled, 1);
}

TEST(engine, a_submitted_batch_reaches_an_idle_engine_as_one_arrival) {
  // submit_batch holds planning until every admitted request reached the scheduler, so an idle
  // engine's first step prefills all of them; one at a time, the first arrival starts a step
  // alone. The invalid entries are refused as submit refuses them and are not waited for.
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 24; ++i) prompts.push_back(random_prompt(rng, 20, 60));
  const auto p = greedy(1);
  auto e = start_engine(tiny_config());
  ASSERT_TRUE(e);
  const auto one_by_one = run_all(*e, prompts, p);
  wait_idle(*e);

  const int64_t steps_before = e->stats().num_steps;
  collector c;
  std::vector<std::pair<generation_request, delta_sink>> batch;
  const auto refused_sink = [](delta) { return true; };
  batch.emplace_back(make_request("empty", {}, p), refused_sink);
  for (size_t i = 0; i < prompts.size(); ++i)
    batch.emplace_back(make_request("b" + std::to_string(i), prompts[i], p), c.sink(static_cast<int>(i)));
  batch.emplace_back(make_request("oob", {5, 5000}, p), refused_sink);
  const auto admitted = e->submit_batch(std::move(batch));
  ASSERT_EQ(admitted.size(), prompts.size() + 2);
  EXPECT_FALSE(admitted.front().ok());
  EXPECT_FALSE(admitted.back().ok());
  EXPECT_NE(admitted.back().err().message.find("out of range"), std::string::npos) << admitted.back().err().message;
  for (size_t i = 1; i + 1 < admitted.size(); ++i) EXPECT_TRUE(admitted[i].ok()) << i;
  ASSERT_TRUE(c.wait());
  EXPECT_EQ(e->stats().num_steps - steps_before, 1) << "24 prompts of at most 60 tokens fit one 2048-token step";
  const auto together = c.results();
  ASSERT_EQ(together.size(), one_by_one.size());
  for (const auto& [key, choices] : one_by_one) EXPECT_EQ(together.at(key).at(0).tokens, choices.at(0).tokens) << key;
  EXPECT_EQ(wait_idle(*e).kv_blocks_used, 0);
}

TEST(engine, rejects_invalid_requests_and_cuda_without_support) {
  auto e = start_engine(tiny_config());
  ASSERT_TRUE(e);
  collector c;
  EXPECT_FALSE(e->submit(make_request("empty", {}, greedy(4)), c.sink(0)).ok());
  EXPECT_FALSE(e->submit(make_request("oob", {5, 5000}, greedy(4)), c.sink(1)).ok());
  auto bad = greedy(4);
  bad.top_p = 0.0f;
  EXPECT_FALSE(e->submit(make_request("topp", {5, 6}, bad), c.sink(2)).ok());
  auto cfg = tiny_config();
  cfg.executor.device = device_kind::cuda;
  auto cuda = engine::start(cfg);
  if (cuda.ok()) return;  // a GPU host: --device cuda is served (the GPU suite covers it)
  EXPECT_TRUE(cuda.err().code == error_code::unsupported || cuda.err().code == error_code::unavailable);
  EXPECT_NE(cuda.err().message.find("--device cuda"), std::string::npos) << cuda.err().message;
}

}  // namespace
}  // namespace actorserve::actors
