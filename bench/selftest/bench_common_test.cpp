// Tests of the benchmark helpers: the random model writer produces a directory the loader, the
// tokenizer and the CPU executor accept, byte-identical for any thread count; the SSE reader,
// percentiles and length distributions behave as documented.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include "bench/common/length_dist.hpp"
#include "bench/common/random_model.hpp"
#include "bench/common/serving_client.hpp"
#include "bench/common/shared_prefix.hpp"
#include "bench/common/stats.hpp"
#include "config/model_config.hpp"
#include "gpu/cpu/cpu_executor.hpp"
#include "gpu/model/model_weights.hpp"
#include "protocol/tokenizer/tokenizer.hpp"
#include "tests/scratch_dir.hpp"

namespace actorserve::bench {
namespace {

namespace fs = std::filesystem;
using actorserve::testing::scratch_dir;

std::string fixture_tokenizer() {
  const char* env = std::getenv("ACTORSERVE_TEST_DATA");
  const std::string root = env && *env ? env : ACTORSERVE_SOURCE_DIR "/tests/data";
  return root + "/models/llama-tiny/tokenizer.json";
}

model_shape small_qwen2() {
  model_shape s = preset_shape("qwen2-7b").value();
  s.num_layers = 2;
  s.hidden_size = 64;
  s.intermediate_size = 96;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.vocab_size = 2000;  // more than the fixture tokenizer's 1024
  s.max_position_embeddings = 512;
  return s;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(RandomModel, PresetsCarryTheRealShapes) {
  auto l3 = preset_shape("llama-3-8b").value();
  EXPECT_EQ(l3.vocab_size, 128256);
  EXPECT_EQ(l3.num_kv_heads, 8);
  EXPECT_EQ(l3.intermediate_size, 14336);
  EXPECT_EQ(l3.num_parameters(), 8030261248);  // Meta-Llama-3-8B's published parameter count
  auto l2 = preset_shape("llama-2-7b").value();
  EXPECT_EQ(l2.num_parameters(), 6738415616);  // Llama-2-7b-hf
  auto l70 = preset_shape("llama-3-70b").value();
  EXPECT_EQ(l70.num_heads, 64);
  EXPECT_EQ(l70.num_kv_heads, 8);
  EXPECT_EQ(l70.num_parameters(), 70553706496);  // Meta-Llama-3-70B's published parameter count
  EXPECT_FALSE(preset_shape("gpt-5").ok());
}

TEST(RandomModel, WrittenDirectoryLoadsAndRunsOnTheCpuExecutor) {
  scratch_dir dir("bench_load");
  random_model_options o;
  o.output_dir = dir.path().string();
  o.tokenizer_json = fixture_tokenizer();
  o.shard_bytes = 60000;  // several shards
  o.threads = 2;
  const model_shape shape = small_qwen2();
  auto rep = write_random_model(shape, o);
  ASSERT_TRUE(rep.ok()) << rep.err().message;
  EXPECT_GT(rep->num_shards, 1);
  EXPECT_EQ(rep->added_tokens, 2000 - 1024);

  auto cfg = load_model_config(o.output_dir);
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(cfg->qkv_bias);
  EXPECT_EQ(cfg->vocab_size, 2000);
  EXPECT_EQ(cfg->num_kv_heads, 2);
  EXPECT_EQ(cfg->torch_dtype, "bfloat16");
  EXPECT_DOUBLE_EQ(cfg->rope.theta, 1000000.0);

  auto tok = protocol::tokenizer::from_model_dir(o.output_dir);
  ASSERT_TRUE(tok.ok()) << tok.err().message;
  EXPECT_EQ(tok->vocab_size(), 2000);
  const int32_t ids[] = {1500, 1999};
  EXPECT_EQ(tok->decode(ids, false), " tok1500 tok1999");
  EXPECT_EQ(tok->encode("hello", false), protocol::tokenizer::from_files(o.tokenizer_json, "")->encode("hello", false));

  gpu::cpu_executor_options eo;
  eo.num_blocks = 4;
  auto ex = gpu::cpu_executor::create(o.output_dir, eo);
  ASSERT_TRUE(ex.ok()) << ex.err().message;
  gpu::step_batch batch;
  gpu::step_sequence seq;
  seq.new_tokens = {3, 1999, 42};
  seq.block_table = {0};
  seq.sample = true;
  seq.params.temperature = 0;
  batch.seqs.push_back(seq);
  std::vector<std::vector<float>> logits;
  auto r = ex.value()->run_step_sync(batch, &logits);
  ASSERT_TRUE(r.outcome.ok()) << r.outcome.err().message;
  ASSERT_EQ(logits.at(0).size(), 2000u);
  for (float v : logits[0]) ASSERT_TRUE(std::isfinite(v));
}

TEST(RandomModel, MixtureOfExpertsPresetsHaveTheRealShapes) {
  auto mixtral = preset_shape("mixtral-8x7b").value();
  EXPECT_EQ(mixtral.architecture, "MixtralForCausalLM");
  EXPECT_EQ(mixtral.num_parameters(), 46702792704);   // Mixtral-8x7B-v0.1's published count
  EXPECT_EQ(mixtral.num_active_parameters(), 12879925248);
  auto qwen = preset_shape("qwen3-30b-a3b").value();
  EXPECT_EQ(qwen.architecture, "Qwen3MoeForCausalLM");
  EXPECT_EQ(qwen.num_parameters(), 30532122624);      // 30.5B, 3.3B active
  EXPECT_EQ(qwen.num_active_parameters(), 3353032704);
  // Their config.json reads back as written.
  auto cfg = parse_model_config(config_json(qwen, 0, {1}), "", "/q");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  ASSERT_TRUE(cfg->moe.has_value());
  EXPECT_EQ(cfg->moe->num_experts, 128);
  EXPECT_EQ(cfg->moe->top_k, 8);
  EXPECT_EQ(cfg->moe->expert_intermediate_size, 768);
  EXPECT_TRUE(cfg->moe->renormalize);
  EXPECT_EQ(cfg->head_dim, 128);
  EXPECT_TRUE(cfg->qk_norm);
  cfg = parse_model_config(config_json(mixtral, 0, {1}), "", "/x");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  EXPECT_EQ(cfg->moe->num_experts, 8);
  EXPECT_EQ(cfg->moe->expert_intermediate_size, 14336);
  EXPECT_EQ(cfg->num_kv_heads, 8);
  EXPECT_FALSE(cfg->sliding_window.has_value());
}

TEST(RandomModel, DeepseekV2LitePresetHasTheRealShapeAndConfig) {
  auto lite = preset_shape("deepseek-v2-lite").value();
  EXPECT_EQ(lite.architecture, "DeepseekV2ForCausalLM");
  EXPECT_EQ(lite.num_parameters(), 15706484224);          // DeepSeek-V2-Lite's 15.7 B (31.4 GB bf16)
  EXPECT_EQ(lite.num_active_parameters(), 2661150208);    // 6 of 64 experts in the 26 sparse layers
  // Its config.json reads back as the checkpoint's: latent attention, experts, YaRN.
  auto cfg = parse_model_config(config_json(lite, 0, {1}), "", "/d");
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  ASSERT_TRUE(cfg->mla.has_value());
  EXPECT_EQ(cfg->mla->q_lora_rank, 0);
  EXPECT_EQ(cfg->mla->kv_lora_rank, 512);
  EXPECT_EQ(cfg->mla->qk_head_dim(), 192);
  EXPECT_EQ(cfg->mla->v_head_dim, 128);
  EXPECT_EQ(cfg->mla->cache_dim(), 576);
  EXPECT_EQ(cfg->rope.kind, rope_kind::yarn);
  EXPECT_DOUBLE_EQ(cfg->rope.factor, 40.0);
  EXPECT_EQ(cfg->rope.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(cfg->rope.mscale, 0.707);
  EXPECT_DOUBLE_EQ(cfg->rope.mscale_all_dim, 0.707);
  EXPECT_EQ(cfg->max_position_embeddings, 163840);
  ASSERT_TRUE(cfg->moe.has_value());
  EXPECT_EQ(cfg->moe->num_experts, 64);
  EXPECT_EQ(cfg->moe->top_k, 6);
  EXPECT_EQ(cfg->moe->expert_intermediate_size, 1408);
  EXPECT_EQ(cfg->moe->num_shared_experts, 2);
  EXPECT_FALSE(cfg->moe->renormalize);
  EXPECT_EQ(cfg->intermediate_size, 10944);
  EXPECT_FALSE(cfg->is_sparse_layer(0));
  EXPECT_TRUE(cfg->is_sparse_layer(26));
}

TEST(RandomModel, WrittenMixtureOfExpertsModelsGenerateOnTheCpuExecutor) {
  for (const char* preset : {"tiny-moe", "tiny-mixtral", "deepseek-tiny"}) {
    scratch_dir dir(std::string("bench_") + preset);
    random_model_options o;
    o.output_dir = dir.path().string();
    o.tokenizer_json = fixture_tokenizer();
    o.threads = 2;
    ASSERT_TRUE(write_random_model(preset_shape(preset).value(), o).ok()) << preset;
    gpu::cpu_executor_options eo;
    eo.num_blocks = 4;
    eo.threads = 2;
    auto ex = gpu::cpu_executor::create(o.output_dir, eo);
    ASSERT_TRUE(ex.ok()) << ex.err().message;
    ASSERT_TRUE(ex.value()->config().moe.has_value()) << preset;
    EXPECT_EQ(ex.value()->config().mla.has_value(), std::string(preset) == "deepseek-tiny");
    // A prompt, then greedy decode steps, each with finite logits.
    std::vector<int32_t> tokens = {3, 1000, 42, 7, 7, 900};
    for (int step = 0; step < 6; ++step) {
      gpu::step_batch batch;
      gpu::step_sequence seq;
      seq.seq_id = 1;
      seq.num_computed = step == 0 ? 0 : static_cast<int32_t>(tokens.size()) - 1;
      seq.new_tokens = step == 0 ? tokens : std::vector<int32_t>{tokens.back()};
      seq.block_table = {0};
      seq.sample = true;
      seq.params.temperature = 0;
      batch.step_id = static_cast<uint64_t>(step);
      batch.seqs.push_back(seq);
      std::vector<std::vector<float>> logits;
      auto r = ex.value()->run_step_sync(batch, &logits);
      ASSERT_TRUE(r.outcome.ok()) << preset << ": " << r.outcome.err().message;
      for (float v : logits.at(0)) ASSERT_TRUE(std::isfinite(v)) << preset;
      tokens.push_back(r.tokens.at(0).token_id);
    }
    EXPECT_EQ(tokens.size(), 12u);
  }
}

TEST(RandomModel, WeightsAreNormalWithUnitNormsAndIndependentOfThreadCount) {
  scratch_dir a("bench_threads_a"), b("bench_threads_b");
  random_model_options o;
  o.tokenizer_json = fixture_tokenizer();
  o.seed = 7;
  model_shape shape = preset_shape("tiny").value();
  o.output_dir = a.path().string();
  o.threads = 1;
  ASSERT_TRUE(write_random_model(shape, o).ok());
  o.output_dir = b.path().string();
  o.threads = 3;
  ASSERT_TRUE(write_random_model(shape, o).ok());
  const std::string shard = "model-00001-of-00001.safetensors";
  EXPECT_EQ(read_bytes(a / shard), read_bytes(b / shard));

  auto files = gpu::open_model_files(a.path().string());
  ASSERT_TRUE(files.ok()) << files.err().message;
  const auto embed = gpu::weight_store::to_f32(files->views.embed_tokens);  // 1024 x 64
  const double mean = std::accumulate(embed.begin(), embed.end(), 0.0) / double(embed.size());
  double var = 0;
  for (float v : embed) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / double(embed.size()));
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(sd, 0.02, 0.0005);
  for (float v : gpu::weight_store::to_f32(files->views.layers.at(1).post_norm)) ASSERT_EQ(v, 1.0f);
}

TEST(RandomModel, ConfigOnlyWritesNoWeightsAndLoadsWithDummyWeights) {
  scratch_dir dir("bench_config_only");
  random_model_options o;
  o.tokenizer_json = fixture_tokenizer();
  o.output_dir = dir.path().string();
  const model_shape shape = preset_shape("tiny-mixtral").value();
  ASSERT_TRUE(write_random_model(shape, o).ok());
  ASSERT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  o.config_only = true;
  auto rep = write_random_model(shape, o);
  ASSERT_TRUE(rep.ok()) << rep.err().message;
  EXPECT_EQ(rep->bytes_written, 0);
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_NE(entry.path().extension(), ".safetensors") << entry.path();
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(gpu::open_model_files(dir.path().string()).ok());
  auto files = gpu::open_model_files(dir.path().string(), gpu::weight_source{true, 0});
  ASSERT_TRUE(files.ok()) << files.err().message;
  EXPECT_EQ(files->store.total_bytes(), static_cast<uint64_t>(shape.num_parameters()) * 2);
}

TEST(SseReader, JoinsEventsSplitAcrossReadsAndIgnoresCarriageReturns) {
  sse_reader r;
  EXPECT_TRUE(r.feed("data: {\"a\":").empty());
  EXPECT_EQ(r.feed("1}\n\nda"), (std::vector<std::string>{"{\"a\":1}"}));
  EXPECT_EQ(r.feed("ta: x\r\n\r\ndata:[DONE]\n\n"), (std::vector<std::string>{"x", "[DONE]"}));
  EXPECT_EQ(r.feed(": comment\nevent: e\ndata: y\n\n"), (std::vector<std::string>{"y"}));
}

TEST(ExtraBody, MembersJoinTheRequestAndTheBenchmarksOwnFieldsAreRefused) {
  EXPECT_EQ(extra_body_members("").value(), "");
  EXPECT_EQ(extra_body_members(" {} ").value(), "");
  EXPECT_EQ(extra_body_members(R"({ "response_format": {"type": "json_object"}, "seed": 3 })").value(),
            R"(,"response_format":{"type":"json_object"},"seed":3)");
  for (const char* bad : {"[1]", "{", "3", R"({"a":1} x)"}) {
    auto r = extra_body_members(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.err().message.find("--extra-body: expected one JSON object"), std::string::npos) << r.err().message;
  }
  auto own = extra_body_members(R"({"max_tokens": 5})");
  ASSERT_FALSE(own);
  EXPECT_NE(own.err().message.find("'max_tokens' is set by the benchmark itself"), std::string::npos);
}

TEST(Stats, PercentilesInterpolateAsNumpyDoes) {
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  std::vector<double> v(100);
  std::iota(v.begin(), v.end(), 1.0);
  EXPECT_NEAR(percentile(v, 99), 99.01, 1e-9);   // numpy.percentile(range(1, 101), 99)
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
  auto s = summarize({1, 2, 3, 10});
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.max, 10.0);
}

TEST(LengthDist, ShareGptLikeStaysInsideTheFilterWithALongTail) {
  std::mt19937_64 rng(1);
  auto pairs = sample_lengths({length_kind::sharegpt, 0, 0, 0}, 20000, rng);
  std::vector<double> in, out;
  for (auto [i, o] : pairs) {
    ASSERT_GE(i, 4);
    ASSERT_GE(o, 4);
    ASSERT_LE(i, 1024);
    ASSERT_LE(i + o, 2048);
    in.push_back(i);
    out.push_back(o);
  }
  const auto si = summarize(in), so = summarize(out);
  EXPECT_GT(si.mean, 180);
  EXPECT_LT(si.mean, 230);
  EXPECT_GT(so.mean, 165);
  EXPECT_LT(so.mean, 215);
  EXPECT_LT(si.median, 0.75 * si.mean);  // long tail
  EXPECT_GT(si.p99, 700);
}

TEST(LengthDist, UniformAndFixed) {
  std::mt19937_64 rng(2);
  for (auto [i, o] : sample_lengths({length_kind::uniform, 100, 50, 0.5}, 2000, rng)) {
    ASSERT_GE(i, 50);
    ASSERT_LE(i, 150);
    ASSERT_GE(o, 25);
    ASSERT_LE(o, 75);
  }
  for (auto [i, o] : sample_lengths({length_kind::fixed, 7, 9, 0.5}, 10, rng)) {
    EXPECT_EQ(i, 7);
    EXPECT_EQ(o, 9);
  }
  EXPECT_FALSE(parse_length_kind("zipf").ok());
  EXPECT_EQ(parse_length_kind("random").value(), length_kind::uniform);
}

TEST(SharedPrefix, ThePresetFillsWhatTheFlagsLeaveAndThePrefixDependsOnItsSeedOnly) {
  const char* argv[] = {"bench", "--preset", "shared-system-prompt", "--output-len=64"};
  workload_lengths w{1000, 0, 1024, 64};
  ASSERT_TRUE(apply_preset("shared-system-prompt", 4, argv, w).ok());
  EXPECT_EQ(w.num_prompts, 256);
  EXPECT_EQ(w.prefix_len, 4096);
  EXPECT_EQ(w.input_len, 128);
  EXPECT_EQ(w.output_len, 64) << "--output-len given: the preset leaves it";
  EXPECT_FALSE(apply_preset("long-chat", 4, argv, w).ok());
  workload_lengths none{10, 0, 20, 30};
  ASSERT_TRUE(apply_preset("", 4, argv, none).ok());
  EXPECT_EQ(none.num_prompts, 10);
  const auto a = shared_prefix_ids(7, 4096, 1000);
  EXPECT_EQ(a.size(), 4096u);
  EXPECT_EQ(a, shared_prefix_ids(7, 4096, 1000));
  EXPECT_NE(a, shared_prefix_ids(8, 4096, 1000));
  for (int32_t id : a) ASSERT_LT(id, 1000);
}

}  // namespace
}  // namespace actorserve::bench
