// The tensor-parallel slice plan (shard_plan) and the weight slices cut by it (shard_weights_f32),
// with experts split by columns (tensor parallel) or whole (expert parallel).
#include <gtest/gtest.h>

#include <optional>

#include "gpu/model/model_weights.hpp"
#include "gpu/model/shard_plan.hpp"
#include "gpu/model/shard_weights.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using gpu::moe_parallelism;
using gpu::shard_plan;
using gpu::shard_slice;

model_config llama_like(int64_t heads, int64_t kv_heads) {
  model_config c;
  c.vocab_size = 1025;
  c.hidden_size = 64 * heads;
  c.intermediate_size = 1000;
  c.num_layers = 2;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 64;
  return c;
}

TEST(shard_plan, splits_heads_columns_and_vocabulary_into_contiguous_balanced_slices) {
  auto plan = shard_plan::make(llama_like(32, 8), 4);
  ASSERT_TRUE(plan.ok()) << plan.err().message;
  EXPECT_EQ(plan->size(), 4);
  EXPECT_EQ(plan->q_heads(1), (shard_slice{8, 16}));
  EXPECT_EQ(plan->kv_heads(1), (shard_slice{2, 4}));
  EXPECT_FALSE(plan->kv_heads_replicated());
  EXPECT_EQ(plan->intermediate(3), (shard_slice{750, 1000}));
  // 1025 token ids over 4: the slices cover the vocabulary once, sizes differing by at most one.
  int64_t next = 0;
  for (int64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(plan->vocab(s).begin, next);
    EXPECT_GE(plan->vocab(s).size(), 256);
    EXPECT_LE(plan->vocab(s).size(), 257);
    next = plan->vocab(s).end;
  }
  EXPECT_EQ(next, 1025);
  EXPECT_TRUE(plan->holds_row_bias(0));
  EXPECT_FALSE(plan->holds_row_bias(1));
  const model_config c = plan->shard_config(2);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.intermediate_size, 250);
  EXPECT_EQ(c.vocab_size, plan->vocab(2).size());
  EXPECT_EQ(c.hidden_size, 64 * 32);
}

TEST(shard_plan, replicates_kv_heads_when_there_are_fewer_than_shards) {
  auto plan = shard_plan::make(llama_like(32, 2), 8);
  ASSERT_TRUE(plan.ok()) << plan.err().message;
  EXPECT_TRUE(plan->kv_heads_replicated());
  for (int64_t s = 0; s < 8; ++s) {
    // Shard s holds query heads [4s, 4s + 4); with 16 query heads per KV head they attend to KV head s / 4.
    EXPECT_EQ(plan->q_heads(s), (shard_slice{4 * s, 4 * s + 4}));
    EXPECT_EQ(plan->kv_heads(s), (shard_slice{s / 4, s / 4 + 1}));
    EXPECT_EQ(plan->q_heads(s).begin / 16, plan->kv_heads(s).begin);
    EXPECT_EQ(plan->shard_config(s).num_kv_heads, 1);
  }
}

TEST(shard_plan, one_shard_is_the_whole_model) {
  const model_config full = llama_like(4, 2);
  auto plan = shard_plan::make(full, 1);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->q_heads(0), (shard_slice{0, 4}));
  EXPECT_EQ(plan->kv_heads(0), (shard_slice{0, 2}));
  EXPECT_EQ(plan->vocab(0), (shard_slice{0, 1025}));
  EXPECT_EQ(plan->shard_config(0).intermediate_size, full.intermediate_size);
}

TEST(shard_plan, splits_each_experts_intermediate) {
  model_config c = llama_like(4, 4);
  c.moe = moe_config{};
  c.moe->num_experts = 6;
  c.moe->top_k = 2;
  c.moe->expert_intermediate_size = 30;
  c.moe->num_shared_experts = 2;
  auto plan = shard_plan::make(c, 4);
  ASSERT_TRUE(plan.ok()) << plan.err().message;
  EXPECT_EQ(plan->expert_intermediate(1), (shard_slice{7, 15}));
  EXPECT_EQ(plan->shared_expert_intermediate(1), (shard_slice{15, 30}));
  EXPECT_EQ(plan->shard_config(1).moe->expert_intermediate_size, 8);
  EXPECT_EQ(plan->shard_config(1).moe->num_experts, 6);   // every shard holds a slice of every expert
}

model_config moe_like(int64_t experts, int64_t shared) {
  model_config c = llama_like(4, 4);
  c.architecture = "DeepseekV2ForCausalLM";
  c.moe = moe_config{};
  c.moe->num_experts = experts;
  c.moe->top_k = 2;
  c.moe->expert_intermediate_size = 30;
  c.moe->num_shared_experts = shared;
  return c;
}

TEST(shard_plan, expert_parallel_shards_hold_whole_experts_in_contiguous_ranges) {
  const model_config c = moe_like(6, 2);
  auto plan = shard_plan::make(c, 4, moe_parallelism::expert);
  ASSERT_TRUE(plan.ok()) << plan.err().message;
  EXPECT_EQ(plan->moe(), moe_parallelism::expert);
  // 6 experts over 4 shards: [s*6/4, (s+1)*6/4), every expert held by exactly one shard.
  const std::vector<shard_slice> want = {{0, 1}, {1, 3}, {3, 4}, {4, 6}};
  int64_t elements = 0;
  for (int64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(plan->experts(s), want[static_cast<size_t>(s)]) << "shard " << s;
    EXPECT_EQ(plan->expert_intermediate(s), (shard_slice{0, 30}));   // whole experts
    // The routed experts' weights on the shard: its experts x (gate + up + down) x hidden x 30.
    EXPECT_EQ(plan->expert_elements(s), want[static_cast<size_t>(s)].size() * 3 * c.hidden_size * 30);
    elements += plan->expert_elements(s);
    const model_config sc = plan->shard_config(s);
    EXPECT_EQ(sc.moe->expert_intermediate_size, 30);
    EXPECT_EQ(sc.moe->num_experts, 6);   // the router is replicated: it scores every expert
    EXPECT_EQ(sc.num_heads, 1);          // attention stays tensor parallel
    EXPECT_EQ(sc.intermediate_size, 250);
  }
  EXPECT_EQ(elements, 6 * 3 * c.hidden_size * 30);   // together exactly the model's experts
  // The shared experts (2 x 30 columns) stay tensor parallel.
  EXPECT_EQ(plan->shared_expert_intermediate(1), (shard_slice{15, 30}));
}

TEST(shard_plan, tensor_parallel_shards_hold_a_slice_of_every_expert) {
  const model_config c = moe_like(6, 0);
  auto plan = shard_plan::make(c, 4);
  ASSERT_TRUE(plan.ok()) << plan.err().message;
  EXPECT_EQ(plan->moe(), moe_parallelism::tensor);
  int64_t elements = 0;
  for (int64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(plan->experts(s), (shard_slice{0, 6}));
    elements += plan->expert_elements(s);
  }
  EXPECT_EQ(elements, 6 * 3 * c.hidden_size * 30);
  EXPECT_EQ(plan->expert_elements(1), 6 * 3 * c.hidden_size * 8);   // columns [7, 15)
}

TEST(shard_plan, expert_parallel_refusals_name_the_flag) {
  auto dense = shard_plan::make(llama_like(4, 4), 2, moe_parallelism::expert);
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.err().message.find("--enable-expert-parallel"), std::string::npos) << dense.err().message;
  EXPECT_NE(dense.err().message.find("no routed experts"), std::string::npos) << dense.err().message;
  model_config two = moe_like(2, 0);
  auto over = shard_plan::make(two, 4, moe_parallelism::expert);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.err().message.find("--enable-expert-parallel"), std::string::npos) << over.err().message;
  EXPECT_NE(over.err().message.find("--tensor-parallel-size 4 exceeds the model's 2 routed experts"),
            std::string::npos)
      << over.err().message;
  // Whole experts need no split of their columns: 3 columns over 4 shards is tensor parallel's
  // refusal only.
  model_config narrow = moe_like(8, 0);
  narrow.moe->expert_intermediate_size = 3;
  EXPECT_TRUE(shard_plan::make(narrow, 4, moe_parallelism::expert).ok());
  auto tp = shard_plan::make(narrow, 4);
  ASSERT_FALSE(tp.ok());
  EXPECT_NE(tp.err().message.find("experts' intermediate size 3"), std::string::npos) << tp.err().message;
  // The heads are checked first, as without the flag.
  auto heads = shard_plan::make(moe_like(8, 0), 3, moe_parallelism::expert);
  ASSERT_FALSE(heads.ok());
  EXPECT_NE(heads.err().message.find("--tensor-parallel-size 3"), std::string::npos) << heads.err().message;
}

TEST(shard_plan, refuses_sizes_that_do_not_split_the_heads_naming_the_flag) {
  struct bad {
    model_config cfg;
    int64_t size;
    const char* says;
  };
  model_config tiny_mlp = llama_like(4, 4);
  tiny_mlp.intermediate_size = 2;
  for (const auto& b : {bad{llama_like(32, 8), 0, "must be >= 1"}, bad{llama_like(32, 8), 3, "32 attention heads"},
                        bad{llama_like(12, 6), 4, "6 KV heads"}, bad{tiny_mlp, 4, "intermediate size 2"}}) {
    auto plan = shard_plan::make(b.cfg, b.size);
    ASSERT_FALSE(plan.ok()) << b.says;
    EXPECT_NE(plan.err().message.find("--tensor-parallel-size " + std::to_string(b.size)), std::string::npos)
        << plan.err().message;
    EXPECT_NE(plan.err().message.find(b.says), std::string::npos) << plan.err().message;
  }
}

/// Concatenation of the shards' row slices.
std::vector<float> concat(const std::vector<std::vector<float>>& parts) {
  std::vector<float> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

/// Interleaves the shards' column slices of a matrix of `rows` rows back into one.
std::vector<float> concat_columns(const std::vector<std::vector<float>>& parts, size_t rows) {
  std::vector<float> out;
  for (size_t r = 0; r < rows; ++r)
    for (const auto& p : parts) {
      const size_t w = p.size() / rows;
      out.insert(out.end(), p.begin() + static_cast<ptrdiff_t>(r * w), p.begin() + static_cast<ptrdiff_t>((r + 1) * w));
    }
  return out;
}

TEST(shard_weights, each_shard_holds_only_its_slices_and_together_they_are_the_model) {
  // qwen2-tiny: q/k/v biases, a tied lm_head; 4 heads, 2 KV heads.
  auto files = gpu::open_model_files(model_dir("qwen2-tiny"));
  ASSERT_TRUE(files.ok()) << files.err().message;
  const gpu::model_weights_f32 full = gpu::upcast_weights(files->views);
  const size_t h = static_cast<size_t>(files->config.hidden_size);
  for (int64_t n : {2, 4}) {
    auto plan = shard_plan::make(files->config, n);
    ASSERT_TRUE(plan.ok());
    std::vector<gpu::model_weights_f32> shards;
    for (int64_t s = 0; s < n; ++s) shards.push_back(gpu::shard_weights_f32(files->views, plan.value(), s));
    auto rows_of = [&](auto get) {
      std::vector<std::vector<float>> p;
      for (const auto& w : shards) p.push_back(get(w));
      return p;
    };
    const auto& L = full.layers[1];
    EXPECT_EQ(concat(rows_of([](const auto& w) { return w.layers[1].q_proj; })), L.q_proj);
    EXPECT_EQ(concat(rows_of([](const auto& w) { return w.layers[1].q_bias; })), L.q_bias);
    EXPECT_EQ(concat(rows_of([](const auto& w) { return w.layers[1].gate_proj; })), L.gate_proj);
    EXPECT_EQ(concat_columns(rows_of([](const auto& w) { return w.layers[1].o_proj; }), h), L.o_proj);
    EXPECT_EQ(concat_columns(rows_of([](const auto& w) { return w.layers[1].down_proj; }), h), L.down_proj);
    EXPECT_EQ(concat(rows_of([](const auto& w) { return w.embed_tokens; })), full.embed_tokens);
    for (const auto& w : shards) {
      EXPECT_EQ(w.layers[1].q_proj.size(), L.q_proj.size() / static_cast<size_t>(n));
      EXPECT_TRUE(w.lm_head.empty());   // tied: the shard's embedding rows are its lm_head rows
      EXPECT_EQ(w.layers[1].input_norm, L.input_norm);
    }
    if (n == 2) {
      EXPECT_EQ(concat(rows_of([](const auto& w) { return w.layers[1].k_proj; })), L.k_proj);
      EXPECT_EQ(concat(rows_of([](const auto& w) { return w.layers[1].v_bias; })), L.v_bias);
    } else {   // 2 KV heads over 4 shards: shards 0, 1 hold KV head 0 and shards 2, 3 KV head 1
      EXPECT_EQ(shards[0].layers[1].k_proj, shards[1].layers[1].k_proj);
      EXPECT_EQ(concat({shards[1].layers[1].k_proj, shards[2].layers[1].k_proj}), L.k_proj);
    }
  }
}

TEST(shard_plan, a_latent_attention_shard_keeps_one_kv_head_per_head) {
  // DeepSeek-V2's config has num_key_value_heads equal to the heads (one latent serves them all);
  // a shard's config keeps that, with its own heads.
  auto cfg = load_model_config(model_dir("deepseek-v2-tiny"));
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  ASSERT_TRUE(cfg->mla);
  for (int64_t n : {2, 4}) {
    auto plan = shard_plan::make(cfg.value(), n);
    ASSERT_TRUE(plan.ok()) << plan.err().message;
    for (int64_t s = 0; s < n; ++s) {
      const model_config sc = plan->shard_config(s);
      EXPECT_EQ(sc.num_heads, cfg->num_heads / n);
      EXPECT_EQ(sc.num_kv_heads, sc.num_heads) << n << " shards, shard " << s;
    }
  }
}

/// deepseek-v2-tiny (latent attention, a dense first layer, 4 routed experts and a shared one)
/// whole and cut over two shards.
struct two_shards {
  gpu::model_weights_f32 full, a, b;
  std::optional<shard_plan> plan;
};

two_shards cut_deepseek_v2_tiny(moe_parallelism moe) {
  two_shards out;
  auto files = gpu::open_model_files(model_dir("deepseek-v2-tiny"));
  EXPECT_TRUE(files.ok()) << files.err().message;
  if (!files.ok()) return out;
  auto plan = shard_plan::make(files->config, 2, moe);
  EXPECT_TRUE(plan.ok()) << plan.err().message;
  if (!plan.ok()) return out;
  out.full = gpu::upcast_weights(files->views);
  out.a = gpu::shard_weights_f32(files->views, plan.value(), 0);
  out.b = gpu::shard_weights_f32(files->views, plan.value(), 1);
  out.plan = plan.value();
  return out;
}

TEST(shard_weights, experts_and_latent_attention_are_cut_per_expert_column_and_per_head) {
  const auto [full, a, b, plan] = cut_deepseek_v2_tiny(moe_parallelism::tensor);
  ASSERT_TRUE(plan);
  size_t sparse = 0;
  for (size_t l = 0; l < full.layers.size(); ++l) {
    const auto& F = full.layers[l];
    ASSERT_TRUE(F.mla);
    EXPECT_EQ(concat({a.layers[l].mla->kv_b_proj, b.layers[l].mla->kv_b_proj}), F.mla->kv_b_proj);
    EXPECT_EQ(a.layers[l].mla->kv_a_proj, F.mla->kv_a_proj);   // the latent is every head's: replicated
    if (!F.moe) continue;
    ++sparse;
    EXPECT_EQ(a.layers[l].moe->router, F.moe->router);
    for (size_t e = 0; e < F.moe->experts.size(); ++e) {
      EXPECT_EQ(concat({a.layers[l].moe->experts[e].up_proj, b.layers[l].moe->experts[e].up_proj}),
                F.moe->experts[e].up_proj);
      EXPECT_EQ(a.layers[l].moe->experts[e].up_proj.size() * 2, F.moe->experts[e].up_proj.size());
    }
    EXPECT_EQ(concat({a.layers[l].moe->shared.gate_proj, b.layers[l].moe->shared.gate_proj}),
              F.moe->shared.gate_proj);
  }
  EXPECT_GT(sparse, 0u);
}

TEST(shard_weights, expert_parallel_shards_hold_their_experts_whole_and_nothing_else) {
  // 2 shards hold experts [0, 2) and [2, 4).
  const auto [full, a, b, plan] = cut_deepseek_v2_tiny(moe_parallelism::expert);
  ASSERT_TRUE(plan);
  size_t sparse = 0;
  for (size_t l = 0; l < full.layers.size(); ++l) {
    const auto& F = full.layers[l];
    if (!F.moe) {   // a dense layer stays tensor parallel
      EXPECT_EQ(concat({a.layers[l].gate_proj, b.layers[l].gate_proj}), F.gate_proj);
      continue;
    }
    ++sparse;
    int64_t s = 0;
    for (const auto* w : {&a, &b}) {
      const auto& M = *w->layers[l].moe;
      EXPECT_EQ(M.router, F.moe->router);   // replicated
      EXPECT_EQ(M.first_expert, plan->experts(s).begin);
      ASSERT_EQ(static_cast<int64_t>(M.experts.size()), plan->experts(s).size());
      size_t floats = 0;
      for (size_t e = 0; e < M.experts.size(); ++e) {
        const auto& want = F.moe->experts[static_cast<size_t>(M.first_expert) + e];
        EXPECT_EQ(M.experts[e].gate_proj, want.gate_proj);
        EXPECT_EQ(M.experts[e].up_proj, want.up_proj);
        EXPECT_EQ(M.experts[e].down_proj, want.down_proj);
        floats += M.experts[e].gate_proj.size() + M.experts[e].up_proj.size() + M.experts[e].down_proj.size();
      }
      EXPECT_EQ(static_cast<int64_t>(floats), plan->expert_elements(s));
      ++s;
    }
    EXPECT_EQ(concat({a.layers[l].moe->shared.gate_proj, b.layers[l].moe->shared.gate_proj}),
              F.moe->shared.gate_proj);   // the shared expert stays tensor parallel
  }
  EXPECT_GT(sparse, 0u);
}

}  // namespace
}  // namespace actorserve::testing
