// FP8 fixtures end to end on the CPU executor. Each FP8 checkpoint must compute exactly what the
// same model with its dequantized weights written as fp32 computes (the dequantization here is
// the test's own), and close to the bf16 model it was quantized from (greedy agreement and the
// largest first-step logprob difference are printed). Also --quantization fp8 and
// --kv-cache-dtype fp8 on the CPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "config/safetensors_header.hpp"
#include "gpu/model/dtype_convert.hpp"
#include "model/model_test_util.hpp"
#include "model/safetensors_test_util.hpp"
#include "scratch_dir.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

namespace fs = std::filesystem;

constexpr int32_t block_size = 16;
constexpr int32_t decode_steps = 24;

/// E4M3 by its definition: (-1)^s x 2^(e-7) x (1 + m/8), or 2^-6 x m/8 when e = 0.
float e4m3_by_definition(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  const double mag = e == 0 ? std::pow(2.0, -6) * (m / 8.0) : std::pow(2.0, e - 7) * (1.0 + m / 8.0);
  return static_cast<float>((b & 0x80) ? -mag : mag);
}

float stored_float(const std::string& bytes, size_t offset, st_dtype dtype) {
  float f = 0;
  gpu::upcast_to_f32(reinterpret_cast<const std::byte*>(bytes.data() + offset), dtype, 1, &f);
  return f;
}

/// Writes `out`/model.safetensors with every weight of `fp8_model` in F32: F8_E4M3 tensors times
/// their scale (per block of `block` x `block` when it is not 0, else per tensor or per row as the
/// scale's size says), float tensors upcast;
/// scale tensors dropped. config.json and the rest come from the unquantized `source` model.
void write_dequantized(const std::string& fp8_model, const std::string& source, int64_t block, const fs::path& out) {
  fs::create_directories(out);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json"})
    fs::copy_file(fs::path(model_dir(source)) / f, out / f, fs::copy_options::overwrite_existing);
  const std::string bytes = read_file(fs::path(model_dir(fp8_model)) / "model.safetensors");
  auto header = parse_safetensors_header(bytes, bytes.size(), fp8_model);
  ASSERT_TRUE(header.ok()) << header.err().message;
  std::map<std::string, const safetensors_tensor*> by_name;
  for (const auto& t : header->tensors) by_name[t.name] = &t;
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::string json = "{", data;
  for (const auto& [name, t] : by_name) {
    if (ends_with(name, "_scale") || ends_with(name, "_scale_inv")) continue;
    std::vector<float> values(t->num_elements());
    const size_t base = header->data_offset + t->begin;
    if (t->dtype == st_dtype::f8_e4m3) {
      const std::string module = name.substr(0, name.size() - std::string("weight").size());
      const safetensors_tensor* s = by_name.count(module + "weight_scale") ? by_name[module + "weight_scale"]
                                                                            : by_name[module + "weight_scale_inv"];
      ASSERT_NE(s, nullptr) << name;
      const int64_t rows = t->shape[0], cols = t->shape[1];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          // Blocks when the fixture is block-wise; else one scale, or one per row.
          size_t si = 0;
          if (block > 0) si = static_cast<size_t>((r / block) * s->shape[1] + c / block);
          else if (s->num_elements() > 1) si = static_cast<size_t>(r);
          const float scale = stored_float(bytes, header->data_offset + s->begin + si * dtype_size(s->dtype), s->dtype);
          values[static_cast<size_t>(r * cols + c)] =
              e4m3_by_definition(static_cast<uint8_t>(bytes[base + static_cast<size_t>(r * cols + c)])) * scale;
        }
    } else {
      for (size_t i = 0; i < values.size(); ++i) values[i] = stored_float(bytes, base + i * dtype_size(t->dtype), t->dtype);
    }
    std::string shape;
    for (int64_t d : t->shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    json += fmt::format("{}\"{}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", json.size() > 1 ? "," : "",
                        name, shape, data.size(), data.size() + values.size() * 4);
    data.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  }
  json += "}";
  std::string file(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(file.data(), &n, 8);
  write_file(out / "model.safetensors", file + json + data);
}

std::unique_ptr<gpu::cpu_executor> executor(const std::string& dir, bool quantize = false, bool kv_fp8 = false) {
  gpu::cpu_executor_options opts;
  opts.block_size = block_size;
  opts.num_blocks = 128;
  opts.threads = 2;
  opts.quantize_weights_fp8 = quantize;
  opts.kv_cache_fp8 = kv_fp8;
  auto ex = gpu::cpu_executor::create(dir, opts);
  EXPECT_TRUE(ex.ok()) << dir << ": " << (ex.ok() ? "" : ex.err().message);
  return ex.ok() ? std::move(ex).value() : nullptr;
}

std::vector<double> log_softmax(const std::vector<float>& x) {
  double mx = *std::max_element(x.begin(), x.end()), sum = 0;
  for (float v : x) sum += std::exp(v - mx);
  std::vector<double> out;
  for (float v : x) out.push_back(v - mx - std::log(sum));
  return out;
}

struct comparison {
  double max_logit_rel_err = 0;     ///< max over prompts of max |a - b| / max |b|
  double max_logprob_diff = 0;      ///< first step: max over prompts and vocabulary of |logprob a - logprob b|
  size_t greedy_matched = 0, greedy_total = 0;   ///< steps equal before the first divergence, summed
  size_t first_agree = 0, prompts = 0;           ///< prompts whose first greedy token is the same
};

/// Runs the same prompts (those of `reference_model`'s reference.json) through both executors.
comparison compare(gpu::cpu_executor& a, gpu::cpu_executor& b, const std::string& reference_model) {
  comparison out;
  for (const auto& rc : load_reference(reference_model)) {
    if (rc.prompt_ids.size() > 333) continue;   // the 1000-token prompt adds time, not coverage
    const int32_t total = static_cast<int32_t>(rc.prompt_ids.size()) + decode_steps;
    const auto blocks = block_range(0, (total + block_size - 1) / block_size);
    generation ga = run_greedy(a, rc.prompt_ids, blocks, 0, decode_steps);
    generation gb = run_greedy(b, rc.prompt_ids, blocks, 0, decode_steps);
    out.max_logit_rel_err = std::max(out.max_logit_rel_err, relative_error(ga.prompt_logits, gb.prompt_logits));
    const auto la = log_softmax(ga.prompt_logits), lb = log_softmax(gb.prompt_logits);
    for (size_t i = 0; i < la.size(); ++i) out.max_logprob_diff = std::max(out.max_logprob_diff, std::fabs(la[i] - lb[i]));
    size_t m = 0;
    while (m < ga.tokens.size() && m < gb.tokens.size() && ga.tokens[m] == gb.tokens[m]) ++m;
    out.greedy_matched += m;
    out.first_agree += m > 0 ? 1 : 0;
    ++out.prompts;
    out.greedy_total += ga.tokens.size();
  }
  return out;
}

struct fixture {
  const char* fp8;
  const char* bf16;
  int64_t block;
};

class fp8_model_test : public ::testing::TestWithParam<fixture> {};

TEST_P(fp8_model_test, computes_what_its_dequantized_weights_compute_and_stays_close_to_bf16) {
  const fixture f = GetParam();
  const scratch_dir deq(std::string(f.fp8) + "-dequantized");
  write_dequantized(f.fp8, f.bf16, f.block, deq.path());
  auto fp8 = executor(model_dir(f.fp8));
  auto dequantized = executor(deq.path().string());
  auto bf16 = executor(model_dir(f.bf16));
  ASSERT_TRUE(fp8 && dequantized && bf16);
  const comparison same = compare(*fp8, *dequantized, f.bf16);
  EXPECT_LT(same.max_logit_rel_err, 1e-6) << f.fp8;
  EXPECT_EQ(same.greedy_matched, same.greedy_total) << f.fp8;
  const comparison close = compare(*fp8, *bf16, f.bf16);
  EXPECT_GT(close.max_logprob_diff, 0.0) << f.fp8 << ": FP8 weights must differ from bf16";
  EXPECT_LT(close.max_logprob_diff, 1.0) << f.fp8;
  std::printf("[ %s ] vs dequantized fp32: max logit rel err %.2e, greedy %zu/%zu; vs %s: first token agrees on "
              "%zu/%zu prompts, greedy %zu/%zu steps agree before divergence, max first-step logprob diff %.4f, "
              "max logit rel err %.2e\n",
              f.fp8, same.max_logit_rel_err, same.greedy_matched, same.greedy_total, f.bf16, close.first_agree,
              close.prompts, close.greedy_matched, close.greedy_total, close.max_logprob_diff, close.max_logit_rel_err);
}

INSTANTIATE_TEST_SUITE_P(fixtures, fp8_model_test,
                         ::testing::Values(fixture{"qwen3-hd128-fp8", "qwen3-hd128-bf16", 0},
                                           fixture{"qwen3-hd128-fp8-channel", "qwen3-hd128-bf16", 0},
                                           fixture{"mixtral-fp8-block", "mixtral-bf16", 128}),
                         [](const auto& info) {
                           std::string n = info.param.fp8;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(fp8_options, quantization_fp8_rounds_the_linear_weights_of_a_bf16_checkpoint) {
  for (const char* model : {"qwen3-hd128-bf16", "mixtral-bf16"}) {
    auto quantized = executor(model_dir(model), true);
    auto bf16 = executor(model_dir(model));
    ASSERT_TRUE(quantized && bf16);
    const comparison c = compare(*quantized, *bf16, model);
    EXPECT_GT(c.max_logprob_diff, 0.0) << model;
    EXPECT_LT(c.max_logprob_diff, 1.0) << model;
    std::printf("[ %s --quantization fp8 ] vs bf16: first token agrees on %zu/%zu prompts, greedy %zu/%zu steps "
                "agree, max first-step logprob diff %.4f\n",
                model, c.first_agree, c.prompts, c.greedy_matched, c.greedy_total, c.max_logprob_diff);
  }
  // An FP8 checkpoint loads as it is under the flag.
  auto checkpoint = executor(model_dir("qwen3-hd128-fp8-channel"));
  auto flagged = executor(model_dir("qwen3-hd128-fp8-channel"), true);
  ASSERT_TRUE(checkpoint && flagged);
  EXPECT_EQ(compare(*checkpoint, *flagged, "qwen3-hd128-bf16").max_logit_rel_err, 0.0);
}

TEST(fp8_options, kv_cache_fp8_rounds_k_and_v_with_the_checkpoint_scales_or_one) {
  // k/v_scale 0.5 / 0.25 (fp8); 0.375 / 0.1875 under a compressed-tensors kv_cache_scheme; none (1.0)
  for (const char* model : {"qwen3-hd128-fp8", "qwen3-hd128-fp8-channel", "qwen3-hd128-bf16"}) {
    auto fp8_kv = executor(model_dir(model), false, true);
    auto plain = executor(model_dir(model));
    ASSERT_TRUE(fp8_kv && plain);
    const comparison c = compare(*fp8_kv, *plain, "qwen3-hd128-bf16");
    EXPECT_GT(c.max_logprob_diff, 0.0) << model;
    EXPECT_LT(c.max_logprob_diff, 1.0) << model;
    std::printf("[ %s --kv-cache-dtype fp8 ] vs auto: greedy %zu/%zu steps agree, max first-step logprob diff %.4f\n",
                model, c.greedy_matched, c.greedy_total, c.max_logprob_diff);
  }
}

TEST(fp8_options, config_groups_split_by_module_load_what_one_group_loads) {
  // qwen3-hd128-fp8-channel's one group of Linear, written as two groups by pattern (attention with
  // dynamic activations, the MLP weight-only): the same weights, so the same logits.
  const scratch_dir dir = copy_model("qwen3-hd128-fp8-channel", "fp8_two_groups");
  const std::string cfg = read_file(dir / "config.json");
  const size_t at = cfg.find("\"quantization_config\": ");
  ASSERT_NE(at, std::string::npos);
  const std::string weights = R"({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true,
                                  "dynamic": false})";
  write_file(dir / "config.json",
             cfg.substr(0, at) + R"("quantization_config": {"quant_method": "compressed-tensors",
      "format": "float-quantized", "ignore": ["lm_head", "re:.*layers\\.1\\.mlp\\.down_proj$"],
      "config_groups": {
        "attention": {"targets": ["re:.*self_attn\\..*"], "weights": )" + weights + R"(,
                      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}},
        "mlp": {"targets": ["re:.*\\.mlp\\..*"], "weights": )" + weights + R"(}}}
})");
  auto split = executor(dir.path().string());
  auto one = executor(model_dir("qwen3-hd128-fp8-channel"));
  ASSERT_TRUE(split && one);
  EXPECT_EQ(compare(*split, *one, "qwen3-hd128-bf16").max_logit_rel_err, 0.0);
  // A module no group targets must be stored unquantized: drop the MLP's group.
  const std::string attention_only = replace_once(read_file(dir / "config.json"), R"(,
        "mlp": {"targets": ["re:.*\\.mlp\\..*"], "weights": )" + weights + "}", "");
  write_file(dir / "config.json", attention_only);
  expect_has(cpu_load_error(dir.path().string()),
             {".mlp.", "F8_E4M3", "no config group targets it"});
}

TEST(fp8_options, kv_cache_fp8_rounds_the_latent_rows_of_latent_attention) {
  // DeepSeek-V2's cache holds one latent row a token (c_kv and k_pe); under --kv-cache-dtype fp8
  // the CPU reference stores it rounded to E4M3 (scale 1.0: the fixtures carry no k_scale). The
  // CUDA executor refuses this still (cuda_model_support_test).
  for (const char* model : {"deepseek-v2-tiny", "deepseek-v2-qlora-yarn-bf16"}) {
    auto fp8_kv = executor(model_dir(model), false, true);
    auto plain = executor(model_dir(model));
    ASSERT_TRUE(fp8_kv && plain) << model;
    const comparison c = compare(*fp8_kv, *plain, model);
    EXPECT_GT(c.max_logprob_diff, 0.0) << model;
    EXPECT_LT(c.max_logprob_diff, 1.0) << model;
    std::printf("[ %s --kv-cache-dtype fp8 ] vs auto: greedy %zu/%zu steps agree, max first-step logprob diff %.4f\n",
                model, c.greedy_matched, c.greedy_total, c.max_logprob_diff);
  }
}

}  // namespace
}  // namespace actorserve::testing
