// A shard's views as stored (cut_shard_views), what the CUDA loader uploads: upcast, they equal
// the shard's slices of the whole model's fp32 weights, cut here independently by shard_plan's
// slices, for every fixture (bf16, f32, FP8 per tensor, per channel and per block, dummy) at 2 and
// 4 shards, tensor and expert parallel. Row slices point into the mapped file; a slice that cuts
// an FP8 scale block is refused naming the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "gpu/model/model_weights.hpp"
#include "gpu/model/shard_plan.hpp"
#include "gpu/model/shard_views.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

namespace fs = std::filesystem;
using gpu::model_weights_f32;
using gpu::moe_parallelism;
using gpu::shard_plan;
using gpu::shard_slice;

/// Rows [s.begin * unit, s.end * unit) of a tensor of `units` x `unit` rows.
std::vector<float> rows(const std::vector<float>& v, shard_slice s, int64_t unit, int64_t units) {
  if (v.empty()) return {};
  const size_t row_len = v.size() / static_cast<size_t>(units * unit);
  return {v.begin() + static_cast<ptrdiff_t>(s.begin * unit * row_len),
          v.begin() + static_cast<ptrdiff_t>(s.end * unit * row_len)};
}

/// Columns [s.begin * unit, s.end * unit) of a tensor of `out` rows.
std::vector<float> columns(const std::vector<float>& v, int64_t out, shard_slice s, int64_t unit) {
  if (v.empty()) return {};
  const size_t in = v.size() / static_cast<size_t>(out);
  std::vector<float> y;
  for (size_t r = 0; r < static_cast<size_t>(out); ++r)
    y.insert(y.end(), v.begin() + static_cast<ptrdiff_t>(r * in + s.begin * unit),
             v.begin() + static_cast<ptrdiff_t>(r * in + s.end * unit));
  return y;
}

gpu::mlp_weights_f32 mlp_slice(const gpu::mlp_weights_f32& m, int64_t hidden, shard_slice s, int64_t width) {
  return {rows(m.gate_proj, s, 1, width), rows(m.up_proj, s, 1, width), columns(m.down_proj, hidden, s, 1)};
}

/// Shard `s`'s weights cut from the whole model in fp32: the reference the stored slices must equal.
model_weights_f32 reference_slice(const model_weights_f32& full, const shard_plan& plan, int64_t s) {
  const model_config& cfg = plan.config();
  const int64_t hd = cfg.head_dim, h = cfg.hidden_size, heads = cfg.num_heads, kvh = cfg.num_kv_heads;
  const shard_slice q = plan.q_heads(s), kv = plan.kv_heads(s), vocab = plan.vocab(s);
  model_weights_f32 w = full;
  w.embed_tokens = rows(full.embed_tokens, vocab, 1, cfg.vocab_size);
  w.lm_head = rows(full.lm_head, vocab, 1, cfg.vocab_size);
  for (size_t l = 0; l < full.layers.size(); ++l) {
    const auto& F = full.layers[l];
    auto& o = w.layers[l];
    if (F.mla) {
      const auto& m = *cfg.mla;
      const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim, kvd = m.qk_nope_head_dim + m.v_head_dim;
      o.mla->q_proj = rows(F.mla->q_proj, q, qk, heads);
      o.mla->q_b_proj = rows(F.mla->q_b_proj, q, qk, heads);
      o.mla->kv_b_proj = rows(F.mla->kv_b_proj, q, kvd, heads);
      o.o_proj = columns(F.o_proj, h, q, m.v_head_dim);
    } else {
      o.q_proj = rows(F.q_proj, q, hd, heads);
      o.k_proj = rows(F.k_proj, kv, hd, kvh);
      o.v_proj = rows(F.v_proj, kv, hd, kvh);
      o.q_bias = rows(F.q_bias, q, hd, heads);
      o.k_bias = rows(F.k_bias, kv, hd, kvh);
      o.v_bias = rows(F.v_bias, kv, hd, kvh);
      o.o_proj = columns(F.o_proj, h, q, hd);
    }
    if (!plan.holds_row_bias(s)) o.o_bias.clear();
    if (F.moe) {
      const int64_t width = cfg.moe->expert_intermediate_size;
      const shard_slice held = plan.experts(s);
      o.moe->first_expert = held.begin;
      o.moe->experts.clear();
      for (int64_t e = held.begin; e < held.end; ++e)
        o.moe->experts.push_back(
            mlp_slice(F.moe->experts[static_cast<size_t>(e)], h, plan.expert_intermediate(s), width));
      o.moe->shared = mlp_slice(F.moe->shared, h, plan.shared_expert_intermediate(s),
                                width * cfg.moe->num_shared_experts);
    } else {
      const gpu::mlp_weights_f32 m =
          mlp_slice({F.gate_proj, F.up_proj, F.down_proj}, h, plan.intermediate(s), cfg.intermediate_size);
      o.gate_proj = m.gate_proj;
      o.up_proj = m.up_proj;
      o.down_proj = m.down_proj;
    }
  }
  return w;
}

/// Every tensor of `w` with its name, in a fixed order.
void for_each_tensor(const model_weights_f32& w, const std::function<void(const std::string&, const std::vector<float>&)>& f) {
  f("embed_tokens", w.embed_tokens);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const auto& L = w.layers[l];
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const auto& [name, t] : {std::pair{"input_norm", &L.input_norm}, {"q_proj", &L.q_proj}, {"k_proj", &L.k_proj},
                                  {"v_proj", &L.v_proj}, {"o_proj", &L.o_proj}, {"q_bias", &L.q_bias},
                                  {"k_bias", &L.k_bias}, {"v_bias", &L.v_bias}, {"o_bias", &L.o_bias},
                                  {"q_norm", &L.q_norm}, {"k_norm", &L.k_norm}, {"post_norm", &L.post_norm},
                                  {"gate_proj", &L.gate_proj}, {"up_proj", &L.up_proj}, {"down_proj", &L.down_proj}})
      f(p + name, *t);
    if (L.mla)
      for (const auto& [name, t] :
           {std::pair{"q_proj", &L.mla->q_proj}, {"q_a_proj", &L.mla->q_a_proj}, {"q_a_bias", &L.mla->q_a_bias},
            {"q_a_norm", &L.mla->q_a_norm}, {"q_b_proj", &L.mla->q_b_proj}, {"kv_a_proj", &L.mla->kv_a_proj},
            {"kv_a_bias", &L.mla->kv_a_bias}, {"kv_a_norm", &L.mla->kv_a_norm}, {"kv_b_proj", &L.mla->kv_b_proj}})
        f(p + "mla." + name, *t);
    if (L.moe) {
      f(p + "router", L.moe->router);
      f(p + "first_expert", {static_cast<float>(L.moe->first_expert)});
      for (size_t e = 0; e < L.moe->experts.size(); ++e) {
        const auto& m = L.moe->experts[e];
        const std::string x = p + "experts." + std::to_string(e) + ".";
        f(x + "gate_proj", m.gate_proj);
        f(x + "up_proj", m.up_proj);
        f(x + "down_proj", m.down_proj);
      }
      f(p + "shared.gate_proj", L.moe->shared.gate_proj);
      f(p + "shared.up_proj", L.moe->shared.up_proj);
      f(p + "shared.down_proj", L.moe->shared.down_proj);
    }
  }
  f("final_norm", w.final_norm);
  f("lm_head", w.lm_head);
}

/// Fails the current test for each tensor of `got` that differs from `want` (compared bit for bit).
void expect_same_weights(const model_weights_f32& got, const model_weights_f32& want, const std::string& what) {
  std::vector<std::pair<std::string, std::vector<float>>> a, b;
  for_each_tensor(got, [&](const std::string& n, const std::vector<float>& t) { a.emplace_back(n, t); });
  for_each_tensor(want, [&](const std::string& n, const std::vector<float>& t) { b.emplace_back(n, t); });
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first) << what;
    EXPECT_EQ(a[i].second.size(), b[i].second.size()) << what << ": " << a[i].first;
    EXPECT_TRUE(a[i].second == b[i].second) << what << ": " << a[i].first << " differs";
  }
}

struct shard_case {
  std::string model;
  int64_t size;
  moe_parallelism moe;
  bool dummy;
};

std::string describe(const shard_case& c) {
  return c.model + "_tp" + std::to_string(c.size) + (c.moe == moe_parallelism::expert ? "_ep" : "") +
         (c.dummy ? "_dummy" : "");
}
void PrintTo(const shard_case& c, std::ostream* os) { *os << describe(c); }

std::string case_name(const ::testing::TestParamInfo<shard_case>& info) {
  std::string n = describe(info.param);
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

std::vector<shard_case> every_fixture() {
  std::vector<std::string> models;
  for (const auto& d : fs::directory_iterator(test_data_dir() + "/models"))
    if (fs::exists(d.path() / "config.json")) models.push_back(d.path().filename().string());
  std::sort(models.begin(), models.end());
  std::vector<shard_case> cases;
  for (const auto& m : models)
    for (int64_t n : {2, 4}) {
      cases.push_back({m, n, moe_parallelism::tensor, false});
      if (m.find("moe") != std::string::npos || m.find("mixtral") != std::string::npos ||
          m.find("deepseek") != std::string::npos)
        cases.push_back({m, n, moe_parallelism::expert, false});
    }
  for (const char* m : {"llama-tiny", "qwen2-tiny", "deepseek-v2-tiny", "qwen3-moe-tiny"})
    cases.push_back({m, 2, moe_parallelism::tensor, true});
  return cases;
}

/// Whether `p` lies inside [begin, begin + bytes).
bool inside(const std::byte* p, const std::byte* begin, size_t bytes) { return p >= begin && p < begin + bytes; }

class shard_views_test : public ::testing::TestWithParam<shard_case> {};

TEST_P(shard_views_test, upcast_slices_equal_the_whole_models_fp32_slices) {
  const shard_case& c = GetParam();
  auto files = gpu::open_model_files(model_dir(c.model), gpu::weight_source{c.dummy, 7});
  ASSERT_TRUE(files.ok()) << files.err().message;
  auto plan = shard_plan::make(files->config, c.size, c.moe);
  if (!plan) GTEST_SKIP() << plan.err().message;   // e.g. 2 routed experts over 4 shards
  const model_weights_f32 full = gpu::upcast_weights(files->views);
  // mixtral-fp8-block's 128 x 128 blocks: 4 heads of 32 rows each cannot split over 2 or 4 shards.
  const bool cuts_blocks = c.model == "mixtral-fp8-block";
  for (int64_t s = 0; s < c.size; ++s) {
    const std::string what = c.model + " shard " + std::to_string(s);
    auto refused = gpu::cut_shard_views(files->views, plan.value(), s);
    ASSERT_EQ(refused.ok(), !cuts_blocks) << what;
    if (cuts_blocks) {
      const std::string& msg = refused.err().message;
      EXPECT_NE(msg.find("--tensor-parallel-size " + std::to_string(c.size)), std::string::npos) << msg;
      EXPECT_NE(msg.find("self_attn.q_proj.weight"), std::string::npos) << msg;
      EXPECT_NE(msg.find("scale blocks of 128 rows"), std::string::npos) << msg;
    }
    auto cut = gpu::cut_shard_views(files->views, plan.value(), s, gpu::block_cut::dequantize);
    ASSERT_TRUE(cut.ok()) << cut.err().message;
    expect_same_weights(gpu::upcast_weights(cut->views), reference_slice(full, plan.value(), s), what);
    // The shard's bytes shrink with its slices; norms and routers stay whole.
    EXPECT_LT(cut->total_bytes(), files->store.total_bytes()) << what;
    if (c.dummy || cuts_blocks) continue;
    // Row slices are views into the mapped file; only column slices are copied.
    const gpu::tensor_view& whole_q = files->views.layers[0].mla ? files->views.layers[0].mla->kv_b_proj
                                                                 : files->views.layers[0].q_proj;
    const gpu::tensor_view& q = cut->views.layers[0].mla ? cut->views.layers[0].mla->kv_b_proj : cut->views.layers[0].q_proj;
    EXPECT_TRUE(inside(q.data, whole_q.data, whole_q.num_bytes())) << what;
    const gpu::tensor_view& o = cut->views.layers[0].o_proj;
    EXPECT_FALSE(inside(o.data, files->views.layers[0].o_proj.data, files->views.layers[0].o_proj.num_bytes())) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(every_fixture, shard_views_test, ::testing::ValuesIn(every_fixture()), case_name);

TEST(shard_views, one_shard_is_the_whole_model_uncopied) {
  auto files = gpu::open_model_files(model_dir("qwen3-hd128-fp8-channel"));
  ASSERT_TRUE(files.ok()) << files.err().message;
  auto plan = shard_plan::make(files->config, 1);
  ASSERT_TRUE(plan.ok());
  auto cut = gpu::cut_shard_views(files->views, plan.value(), 0);
  ASSERT_TRUE(cut.ok()) << cut.err().message;
  EXPECT_TRUE(cut->owned.empty());
  EXPECT_EQ(cut->views.layers[1].o_proj.data, files->views.layers[1].o_proj.data);
  EXPECT_EQ(cut->views.layers[1].o_proj.scale->data, files->views.layers[1].o_proj.scale->data);
}

}  // namespace
}  // namespace actorserve::testing
