// Loading model directories: sharded checkpoints, stored dtypes, and broken copies of the
// fixtures (each error names the file and tensor).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "gpu/model/dtype_convert.hpp"
#include "gpu/model/model_weights.hpp"
#include "model/model_test_util.hpp"
#include "model/safetensors_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

namespace fs = std::filesystem;

std::string load_error(const scratch_dir& dir) { return cpu_load_error(dir.path().string()); }

TEST(model_dir, missing_config_json) {
  const scratch_dir dir = copy_model("llama-tiny", "no_config");
  fs::remove(dir / "config.json");
  expect_has(load_error(dir), {(dir / "config.json").string()});
}

TEST(model_dir, unsupported_architecture) {
  const scratch_dir dir = copy_model("llama-tiny", "gpt2");
  write_file(dir / "config.json",
             replace_once(read_file(dir / "config.json"), "LlamaForCausalLM", "GPT2LMHeadModel"));
  expect_has(load_error(dir), {"config.json", "GPT2LMHeadModel"});
}

TEST(model_dir, missing_tensor) {
  const scratch_dir dir = copy_model("llama-tiny", "missing_tensor");
  auto parts = split_safetensors(read_file(dir / "model.safetensors"));
  parts.header = replace_once(parts.header, "\"model.norm.weight\"", "\"model.nrom.weight\"");
  write_file(dir / "model.safetensors", join_safetensors(parts.header, parts.data));
  expect_has(load_error(dir), {"model.safetensors", "'model.norm.weight'", "missing"});
}

TEST(model_dir, missing_expert_router_or_qk_norm_tensor_is_named) {
  struct broken {
    const char* model;
    const char* tensor;
  };
  for (const broken& b : {broken{"mixtral-tiny", "model.layers.1.block_sparse_moe.experts.3.w2.weight"},
                          broken{"mixtral-tiny", "model.layers.0.block_sparse_moe.gate.weight"},
                          broken{"qwen3-moe-tiny", "model.layers.2.mlp.experts.5.up_proj.weight"},
                          broken{"qwen3-moe-tiny", "model.layers.1.mlp.down_proj.weight"},   // the dense layer
                          broken{"qwen3-tiny", "model.layers.1.self_attn.k_norm.weight"},
                          broken{"deepseek-v2-tiny", "model.layers.1.self_attn.kv_b_proj.weight"},
                          broken{"deepseek-v2-tiny", "model.layers.0.self_attn.q_proj.weight"},
                          broken{"deepseek-v2-tiny", "model.layers.1.mlp.shared_experts.gate_proj.weight"},
                          broken{"deepseek-v2-qlora-yarn-bf16", "model.layers.2.self_attn.q_a_layernorm.weight"},
                          broken{"deepseek-v2-qlora-yarn-bf16", "model.layers.1.self_attn.kv_a_proj_with_mqa.weight"},
                          broken{"deepseek-v2-qlora-yarn-bf16", "model.layers.0.mlp.up_proj.weight"}}) {
    const scratch_dir dir = copy_model(b.model, "missing_expert");
    auto parts = split_safetensors(read_file(dir / "model.safetensors"));
    const std::string name = b.tensor;
    parts.header = replace_once(parts.header, "\"" + name + "\"", "\"" + name + "_gone\"");
    write_file(dir / "model.safetensors", join_safetensors(parts.header, parts.data));
    expect_has(load_error(dir), {"model.safetensors", "missing tensor '" + name + "'"});
  }
}

TEST(model_dir, mis_shaped_tensor) {
  const scratch_dir dir = copy_model("llama-tiny", "mis_shaped");
  write_file(dir / "config.json",
             replace_once(read_file(dir / "config.json"), "\"intermediate_size\": 172", "\"intermediate_size\": 171"));
  expect_has(load_error(dir), {"model.safetensors", "'model.layers.0.mlp.gate_proj.weight'", "[172, 64]", "[171, 64]"});
}

TEST(model_dir, truncated_safetensors) {
  const scratch_dir dir = copy_model("llama-tiny", "truncated");
  const std::string bytes = read_file(dir / "model.safetensors");
  write_file(dir / "model.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_has(load_error(dir), {"model.safetensors", "tensor '", "outside the data section"});
  write_file(dir / "model.safetensors", bytes.substr(0, 100));
  expect_has(load_error(dir), {"model.safetensors", "header length"});
}

TEST(model_dir, header_offsets_outside_the_file) {
  const scratch_dir dir = copy_model("llama-tiny", "offsets");
  auto parts = split_safetensors(read_file(dir / "model.safetensors"));
  const size_t at = parts.header.find("\"model.norm.weight\"");
  ASSERT_NE(at, std::string::npos);
  const size_t open = parts.header.find("\"data_offsets\":[", at) + 16;
  const size_t close = parts.header.find(']', open);
  parts.header.replace(open, close - open, "900000000,900000256");
  write_file(dir / "model.safetensors", join_safetensors(parts.header, parts.data));
  expect_has(load_error(dir), {"model.safetensors", "'model.norm.weight'", "outside the data section"});
}

/// Writes the fixture's tensors into two shard files plus model.safetensors.index.json.
void shard_model(const scratch_dir& dir) {
  const std::string bytes = read_file(dir / "model.safetensors");
  auto header = parse_safetensors_header(bytes, bytes.size(), "src");
  ASSERT_TRUE(header.ok());
  std::string index = R"({"metadata": {}, "weight_map": {)";
  std::string h[2] = {"{", "{"}, data[2];
  for (size_t i = 0; i < header->tensors.size(); ++i) {
    const auto& t = header->tensors[i];
    const int s = t.name.find("layers.1.") != std::string::npos || t.name == "lm_head.weight" ? 1 : 0;
    const std::string shard = s ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    h[s] += (h[s].size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + to_string(t.dtype) +
            "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(data[s].size()) + "," +
            std::to_string(data[s].size() + t.num_bytes()) + "]}";
    data[s] += bytes.substr(header->data_offset + t.begin, t.num_bytes());
    index += (i ? "," : "") + std::string("\"") + t.name + "\":\"" + shard + "\"";
  }
  write_file(dir / "model-00001-of-00002.safetensors", join_safetensors(h[0] + "}", data[0]));
  write_file(dir / "model-00002-of-00002.safetensors", join_safetensors(h[1] + "}", data[1]));
  write_file(dir / "model.safetensors.index.json", index + "}}");
  fs::remove(dir / "model.safetensors");
}

TEST(model_dir, sharded_checkpoint_gives_the_same_logits) {
  const scratch_dir dir = copy_model("llama-tiny", "sharded");
  shard_model(dir);
  auto store = gpu::weight_store::open_dir(dir.path().string());
  ASSERT_TRUE(store.ok()) << store.err().message;
  EXPECT_EQ(store->size(), 21u);
  gpu::cpu_executor_options opts;
  opts.num_blocks = 8;
  opts.threads = 2;
  auto sharded = gpu::cpu_executor::create(dir.path().string(), opts);
  ASSERT_TRUE(sharded.ok()) << sharded.err().message;
  const auto cases = load_reference("llama-tiny");
  generation g = run_greedy(*sharded.value(), cases[1].prompt_ids, block_range(0, 1), 0, 1);
  EXPECT_LT(relative_error(g.prompt_logits, cases[1].last_logits), 1e-4);
  // A tensor the index puts in the wrong shard is named.
  write_file(dir / "model.safetensors.index.json",
             replace_once(read_file(dir / "model.safetensors.index.json"),
                          "\"model.norm.weight\":\"model-00001-of-00002", "\"model.norm.weight\":\"model-00002-of-00002"));
  auto bad = gpu::weight_store::open_dir(dir.path().string());
  ASSERT_FALSE(bad.ok());
  expect_has(bad.err().message, {"model.safetensors.index.json", "'model.norm.weight'"});
}

TEST(model_dir, raw_views_keep_the_stored_dtype) {
  auto files = gpu::open_model_files(model_dir("llama-hd128-bf16"));
  ASSERT_TRUE(files.ok()) << files.err().message;
  const auto& v = files->views;
  EXPECT_EQ(v.embed_tokens.dtype, st_dtype::bf16);
  EXPECT_EQ(v.embed_tokens.shape, (std::vector<int64_t>{1024, 512}));
  EXPECT_EQ(v.embed_tokens.num_bytes(), 1024u * 512u * 2u);
  ASSERT_EQ(v.layers.size(), 2u);
  EXPECT_EQ(v.layers[0].k_proj.shape, (std::vector<int64_t>{256, 512}));
  EXPECT_FALSE(v.layers[0].q_bias.has_value());
  auto qwen = gpu::open_model_files(model_dir("qwen2-tiny"));
  ASSERT_TRUE(qwen.ok()) << qwen.err().message;
  EXPECT_TRUE(qwen->views.lm_head_tied);
  EXPECT_EQ(qwen->views.lm_head.data, qwen->views.embed_tokens.data);
  ASSERT_TRUE(qwen->views.layers[1].v_bias.has_value());
  EXPECT_EQ(qwen->views.layers[1].v_bias->shape, std::vector<int64_t>{64});
}

TEST(dtype_convert, half_and_bfloat16_upcast_exactly) {
  EXPECT_EQ(gpu::f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(gpu::f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(gpu::f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(gpu::f16_to_f32(0x0400), 6.103515625e-05f);         // smallest normal
  EXPECT_EQ(gpu::f16_to_f32(0x0001), 5.9604644775390625e-08f);   // smallest subnormal
  EXPECT_EQ(gpu::f16_to_f32(0x03ff), 6.097555160522461e-05f);    // largest subnormal
  EXPECT_EQ(gpu::f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::signbit(gpu::f16_to_f32(0x8000)));
  EXPECT_EQ(gpu::f16_to_f32(0x7c00), INFINITY);
  EXPECT_EQ(gpu::f16_to_f32(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(gpu::f16_to_f32(0x7e00)));
  EXPECT_EQ(gpu::bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(gpu::bf16_to_f32(0xc0a0), -5.0f);
  EXPECT_EQ(gpu::bf16_to_f32(0x3eab), 0.333984375f);
}

}  // namespace
}  // namespace actorserve::testing
