// --load-format dummy on the real engine: a directory with config.json and the tokenizer only
// serves tokens from generated weights, the same for the same --seed; a missing config.json is
// named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "engine_harness.hpp"
#include "scratch_dir.hpp"

namespace actorserve::actors {
namespace {

using namespace actors::testing;
using actorserve::testing::scratch_dir;
namespace fs = std::filesystem;

/// A fresh directory with `fixture`'s config.json and tokenizer files, no weights.
scratch_dir config_only_copy(const std::string& fixture, const std::string& name) {
  scratch_dir dir("dummy_" + name);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    const fs::path src = fs::path(actorserve::testing::model_dir(fixture)) / f;
    if (fs::exists(src)) fs::copy_file(src, dir / f);
  }
  return dir;
}

engine_config dummy_config(const std::string& dir, uint64_t seed) {
  engine_config cfg = tiny_config(512);
  cfg.model.model_dir = dir;
  cfg.model.load = load_format::dummy;
  cfg.executor.seed = seed;
  return cfg;
}

/// Greedy tokens of two prompts, checking every reported logprob is finite.
std::vector<std::vector<int32_t>> generate(engine& e, int32_t max_tokens) {
  collector c;
  sampling_params p = greedy(max_tokens);
  p.num_logprobs = 2;
  const std::vector<std::vector<int32_t>> prompts{{1, 5, 9, 200}, {1, 77, 3}};
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_TRUE(e.submit(make_request("d" + std::to_string(i), prompts[i], p), c.sink(static_cast<int>(i))).ok());
  EXPECT_TRUE(c.wait());
  std::vector<std::vector<int32_t>> out;
  for (auto& [key, choices] : c.results()) {
    const choice_result& r = choices.at(0);
    for (const auto& lp : r.logprobs) {
      EXPECT_TRUE(std::isfinite(lp.logprob)) << "request " << key;
      for (const auto& [id, v] : lp.top) EXPECT_TRUE(std::isfinite(v)) << "request " << key << " token " << id;
    }
    out.push_back(r.tokens);
  }
  return out;
}

TEST(dummy_load, a_config_only_directory_serves_the_same_tokens_for_the_same_seed) {
  const scratch_dir copy = config_only_copy("llama-tiny", "llama");
  const std::string dir = copy.path().string();
  ASSERT_FALSE(fs::exists(dir + "/model.safetensors"));
  auto first = start_engine(dummy_config(dir, 7));
  ASSERT_TRUE(first);
  const auto a = generate(*first, 12);
  first->shutdown(std::chrono::milliseconds(0));
  ASSERT_EQ(a.size(), 2u);
  for (const auto& tokens : a) EXPECT_EQ(tokens.size(), 12u);
  auto second = start_engine(dummy_config(dir, 7));
  ASSERT_TRUE(second);
  EXPECT_EQ(generate(*second, 12), a);
  second->shutdown(std::chrono::milliseconds(0));
}

TEST(dummy_load, moe_models_shard_over_tensor_and_expert_parallel_with_the_same_tokens) {
  const scratch_dir copy = config_only_copy("mixtral-tiny", "mixtral");
  const std::string dir = copy.path().string();
  auto one = start_engine(dummy_config(dir, 3));
  ASSERT_TRUE(one);
  const auto a = generate(*one, 6);
  one->shutdown(std::chrono::milliseconds(0));
  for (const auto& tokens : a) EXPECT_EQ(tokens.size(), 6u);
  engine_config ep = dummy_config(dir, 3);
  ep.executor.tensor_parallel_size = 2;
  ep.executor.enable_expert_parallel = true;
  auto sharded = start_engine(ep);
  ASSERT_TRUE(sharded);
  EXPECT_EQ(generate(*sharded, 6), a);
  sharded->shutdown(std::chrono::milliseconds(0));
}

TEST(dummy_load, a_missing_config_json_is_named) {
  const scratch_dir copy = config_only_copy("llama-tiny", "no_config");
  const std::string dir = copy.path().string();
  fs::remove(dir + "/config.json");
  auto e = engine::start(dummy_config(dir, 0));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.err().message.find("config.json"), std::string::npos) << e.err().message;
}

TEST(dummy_load, without_the_flag_the_missing_weights_are_named) {
  const scratch_dir copy = config_only_copy("llama-tiny", "no_flag");
  engine_config cfg = tiny_config(512);
  cfg.model.model_dir = copy.path().string();
  auto e = engine::start(cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.err().message.find("model.safetensors"), std::string::npos) << e.err().message;
}

}  // namespace
}  // namespace actorserve::actors
