// The same random prompts through the CPU (fp32 reference) and CUDA executors: batched chunked
// prefill over shuffled block tables, each prompt decoding once its own chunks are done (steps that
// mix chunks and decode tokens, then decode only), logits compared at every sampled row.
// A mixture-of-experts row may route a token differently where two experts' router scores nearly
// tie (bf16 activations against fp32): its logits then differ beyond the dense bound, so a few
// such rows (at most one in 20) are allowed a looser bound; greedy tokens must agree wherever the
// CPU's top-2 margin is clear, on every model. FP8 checkpoints run on both (the CPU dequantizes
// them to fp32), and so does --quantization fp8 of the dense bf16 models (both round each output
// row to E4M3 with the same scale): the same bounds hold with the FP8 activations switched off
// (cuda_tuning::fp8_activations), since the CUDA executor's FP8 GEMV uses the exact E4M3 values and
// its batched path then rounds the dequantized weights to bf16 once. With them on (the default),
// batched steps also round every FP8 layer's input to E4M3 per token, which the CPU does not:
// those runs have their own bound (fp8_activation_bound below, with its reasoning). With
// --kv-cache-dtype fp8 both store K and V as E4M3 codes with the checkpoint's per-layer scales
// (flash-decoding layout, 64-token blocks on both); fp8_kv_bound says why that bound is looser.
// The mixture-of-experts fixtures also run with every eager batched chunk's experts on the
// per-expert cuBLAS path (cuda_tuning::moe_cublas_min_rows_per_expert 0; the fixtures' steps are
// far below the default threshold), under the same bounds. Their steps' routed-token counts
// (step_result::expert_tokens, /metrics' moe_expert_tokens_total) agree too: every sparse layer
// sums to top_k times its tokens on both, and the two differ per expert by no more than a rerouted
// token in 20 allows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "config/model_config.hpp"
#include "gpu/cpu/cpu_executor.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

class CudaVsCpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::abs(x)));
  return m;
}

/// Logit bound (max abs error / max abs reference) for runs whose batched steps quantize the FP8
/// layers' activations per token. E4M3 keeps 3 mantissa bits: rounding to nearest moves an
/// element by at most 2^-4 of itself (bf16, 7 bits: 2^-8), so each projection input carries 16x
/// the relative rounding error of the bf16 activations that dense_bound admits. Rounding errors
/// of different elements are independent, so a projection's output error is about 2^-4 / sqrt(3)
/// (the rms of a uniform relative error), about 4%, of the root-sum-square of its terms, which for
/// these random-weight fixtures is the output's own size; the residual stream carries each layer's
/// input past its projections unrounded, so the logits' relative error stays of that order. 0.1 is
/// that estimate with 2.5x headroom, 5x dense_bound.
constexpr double fp8_activation_bound = 0.1;

/// Logit bound for --kv-cache-dtype fp8 runs. Both executors store K and V rounded to E4M3 with the
/// same scales, but from values that differ at bf16 level (relative d ~ 2^-9): where the two sit
/// on either side of a rounding boundary (probability about d / 2^-3 per element) the codes differ
/// by one E4M3 step (2^-3 relative), so the stored values' rms difference grows to about
/// sqrt(d x 2^-3) ~ 2^-6 of their size, 8x the bf16 rounding that dense_bound admits; the scores
/// and outputs average many such elements. fp8_activation_bound's 0.1 covers that with headroom.
constexpr double fp8_kv_bound = fp8_activation_bound;

/// What a comparison runs besides the defaults.
struct agreement_run {
  bool quantize_fp8 = false;     ///< --quantization fp8 on both
  bool fp8_activations = false;  ///< the CUDA executor's batched FP8 layers quantize their inputs per token
  bool kv_fp8 = false;           ///< --kv-cache-dtype fp8 on both, with flash-decoding's 64-token blocks
  /// cuda_tuning::moe_cublas_min_rows_per_expert (0: every eager batched MoE chunk on cuBLAS).
  int moe_cublas_min_rows = gpu::cuda::moe_cublas_rows_by_expert_size;
};

/// Runs `model` through both executors and compares.
/// The routed-token counts of the whole run (step_result::expert_tokens summed over its steps):
/// laid out alike ([sparse layer][expert]), each layer's sum equal and at most two counts a
/// rerouted token apart (one token in 20 of the layer's). A last decoder layer that is sparse
/// computes only the sampled rows of the CUDA executor's prefill-carrying steps
/// (sampled_only_steps), so there its sum is at most the CPU's.
void expect_expert_counts_agree(const std::vector<int64_t>& cpu, const std::vector<int64_t>& gpu,
                                const gpu::executor_info& cpu_info, const gpu::executor_info& gpu_info, int64_t top_k,
                                int num_layers, bool sampled_only, const std::string& name) {
  ASSERT_EQ(gpu_info.moe_layers, cpu_info.moe_layers) << name;
  ASSERT_EQ(gpu_info.num_experts, cpu_info.num_experts) << name;
  const size_t E = size_t(cpu_info.num_experts);
  ASSERT_EQ(cpu.size(), cpu_info.moe_layers.size() * E) << name;
  ASSERT_EQ(gpu.size(), cpu.size()) << name << ": the CUDA executor's steps report no expert counts";
  for (size_t l = 0; l < cpu_info.moe_layers.size(); ++l) {
    int64_t cs = 0, gs = 0, diff = 0;
    for (size_t e = 0; e < E; ++e) {
      cs += cpu[l * E + e];
      gs += gpu[l * E + e];
      diff += std::abs(cpu[l * E + e] - gpu[l * E + e]);
    }
    const int layer = cpu_info.moe_layers[l];
    EXPECT_EQ(cs % top_k, 0) << name << " layer " << layer;
    if (sampled_only && layer == num_layers - 1) {
      EXPECT_LE(gs, cs) << name << " layer " << layer;
      EXPECT_GT(gs, 0) << name << " layer " << layer;
      continue;
    }
    EXPECT_EQ(gs, cs) << name << " layer " << layer;
    EXPECT_LE(diff, 2 * std::max<int64_t>(1, cs / top_k / 20)) << name << " layer " << layer;
  }
}

void expect_cuda_agrees_with_cpu(const std::string& model, const agreement_run& run) {
  const bool quantize_fp8 = run.quantize_fp8, fp8_activations = run.fp8_activations, kv_fp8 = run.kv_fp8;
  const bool moe_cublas = run.moe_cublas_min_rows != gpu::cuda::moe_cublas_rows_by_expert_size;
  const std::string dir = model_dir(model);
  const std::string name = model + (quantize_fp8 ? " --quantization fp8" : "") +
                           (kv_fp8 ? " --kv-cache-dtype fp8" : "") + (moe_cublas ? ", experts on cuBLAS" : "");
  const int bs = kv_fp8 ? 64 : 16;
  gpu::cpu_executor_options co;
  co.num_blocks = 512;
  co.block_size = bs;
  co.quantize_weights_fp8 = quantize_fp8;
  co.kv_cache_fp8 = kv_fp8;
  auto cpu = gpu::cpu_executor::create(dir, co);
  ASSERT_TRUE(cpu.ok()) << cpu.err().message;
  gpu::cuda_executor_options go = test_options();
  go.quantize_fp8 = quantize_fp8;
  go.tuning.fp8_activations = fp8_activations;
  go.tuning.moe_cublas_min_rows_per_expert = run.moe_cublas_min_rows;
  if (kv_fp8) {
    go.kv_cache_fp8 = true;
    go.kv_layout = kv_cache_layout::flash_decoding;
    go.block_size = bs;
  }
  auto made = gpu::make_cuda_executor(dir, go);
  ASSERT_TRUE(made.ok()) << made.err().message;
  gpu::executor& cu = *made.value();
  auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(&cu);
  const int vocab = cu.info().vocab_size;
  auto cfg = load_model_config(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  const bool routed = cfg->moe.has_value();
  const double bound = fp8_activations ? fp8_activation_bound : kv_fp8 ? fp8_kv_bound : logits_bound;
  std::mt19937 rng(21);
  // From the second step on, decode rows come before, between and after the longer prompts' chunks.
  const std::vector<int> lens = {5, 130, 17, 40, 300};
  const int chunk = 48, decode_steps = 10;
  std::vector<int32_t> perm(512);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::vector<int32_t>> prompts, blocks;
  size_t next = 0;
  for (int len : lens) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (auto& t : p) t = int32_t(rng() % uint32_t(vocab));
    prompts.push_back(p);
    const size_t nb = size_t(len + decode_steps + bs - 1) / size_t(bs);
    blocks.emplace_back(perm.begin() + long(next), perm.begin() + long(next + nb));
    next += nb;
  }
  std::vector<int32_t> done_len(lens.size(), 0), last_token(lens.size(), 0);
  std::vector<int64_t> cpu_counts, gpu_counts;  // routed tokens, summed over the steps
  const auto add_counts = [](std::vector<int64_t>& sum, const std::vector<int64_t>& step) {
    if (sum.empty()) sum.assign(step.size(), 0);
    if (sum.size() != step.size()) return;  // expect_expert_counts_agree reports the shape
    for (size_t i = 0; i < step.size(); ++i) sum[i] += step[i];
  };
  double worst = 0;
  int compared = 0, agreed = 0, rows = 0, over = 0;
  auto compare = [&](const gpu::step_batch& b, const char* phase) {
    std::vector<std::vector<float>> cpu_logits;
    auto rc = cpu.value()->run_step_sync(b, &cpu_logits);
    ASSERT_TRUE(rc.outcome.ok()) << rc.outcome.err().message;
    auto rg = run_step(cu, b);
    ASSERT_TRUE(rg.outcome.ok()) << rg.outcome.err().message;
    add_counts(cpu_counts, rc.expert_tokens);
    add_counts(gpu_counts, rg.expert_tokens);
    const auto gl = probe->last_logits();
    size_t row = 0;
    for (size_t i = 0; i < b.seqs.size(); ++i) {
      if (!b.seqs[i].sample) continue;
      ASSERT_LT(row, gl.size());
      const double err = rel_max_err(gl[row], cpu_logits[i]);
      worst = std::max(worst, err);
      ++rows;
      over += err >= bound;
      EXPECT_LT(err, routed ? rerouted_logits_bound : bound) << name << " " << phase << " seq " << b.seqs[i].seq_id;
      const size_t s = b.seqs[i].seq_id;
      // Greedy tokens must agree where the top-2 margin exceeds what two logits within the bound
      // can close (2 x bound x max |logit|), and at least 5e-2.
      if (top2_margin(cpu_logits[i]) >=
          std::max(5e-2, fp8_activations || kv_fp8 ? 2 * bound * max_abs(cpu_logits[i]) : 0.0)) {
        ++compared;
        agreed += rg.tokens[row].token_id == rc.tokens[row].token_id;
        EXPECT_EQ(rg.tokens[row].token_id, rc.tokens[row].token_id) << name << " " << phase << " seq " << s;
      }
      last_token[s] = rc.tokens[row].token_id;  // both continue from the reference's token
      ++row;
    }
  };
  // Chunked prefill: every unfinished prompt contributes its next chunk to each step, and a prompt
  // done decodes in the same steps (mixed steps: DeepSeek-V2's chunks up-projected beside absorbed
  // decode rows), until every sequence has decoded decode_steps tokens.
  std::vector<int> decoded(lens.size(), 0);
  for (;;) {
    gpu::step_batch b;
    bool chunks = false;
    for (size_t s = 0; s < lens.size(); ++s) {
      if (done_len[s] < lens[s]) {
        const int take = std::min(chunk, lens[s] - done_len[s]);
        std::vector<int32_t> toks(prompts[s].begin() + done_len[s], prompts[s].begin() + done_len[s] + take);
        const bool last = done_len[s] + take == lens[s];
        b.seqs.push_back(greedy(s, done_len[s], toks, blocks[s], last));
        done_len[s] += take;
        chunks = true;
      } else if (decoded[s] < decode_steps) {
        b.seqs.push_back(greedy(s, lens[s] + decoded[s], {last_token[s]}, blocks[s]));
        ++decoded[s];
      }
    }
    if (b.seqs.empty()) break;
    compare(b, chunks ? "prefill" : "decode");
  }
  EXPECT_LE(over, routed ? rerouted_rows_allowed(rows) : 0) << name << ": rows beyond " << bound;
  if (routed)
    expect_expert_counts_agree(cpu_counts, gpu_counts, cpu.value()->info(), cu.info(), cfg->moe->top_k,
                               int(cfg->num_layers), probe->sampled_only_steps() > 0, name);
  if (routed && run.moe_cublas_min_rows == 0) {
    EXPECT_GT(probe->moe_cublas_chunks(), 0) << name << ": no chunk took the cuBLAS path";
  }
  std::printf("%s CPU vs CUDA: logits max abs err / max abs ref %.3g (worst over all rows; %d of %d rows beyond %g); "
              "tokens agreed %d/%d where the CPU margin >= 5e-2\n",
              name.c_str(), worst, over, rows, bound, agreed, compared);
}

TEST_P(CudaVsCpu, ChunkedPrefillAndDecodeAgree) { expect_cuda_agrees_with_cpu(GetParam(), {}); }

class CudaVsCpuQuantizedFp8 : public CudaVsCpu {};
class CudaVsCpuFp8Activations : public CudaVsCpu {};
class CudaVsCpuQuantizedFp8Activations : public CudaVsCpu {};
TEST_P(CudaVsCpuQuantizedFp8, ChunkedPrefillAndDecodeAgree) {
  expect_cuda_agrees_with_cpu(GetParam(), {.quantize_fp8 = true});
}
TEST_P(CudaVsCpuFp8Activations, ChunkedPrefillAndDecodeAgree) {
  expect_cuda_agrees_with_cpu(GetParam(), {.fp8_activations = true});
}
TEST_P(CudaVsCpuQuantizedFp8Activations, ChunkedPrefillAndDecodeAgree) {
  expect_cuda_agrees_with_cpu(GetParam(), {.quantize_fp8 = true, .fp8_activations = true});
}
class CudaVsCpuFp8KvCache : public CudaVsCpu {};
TEST_P(CudaVsCpuFp8KvCache, ChunkedPrefillAndDecodeAgree) { expect_cuda_agrees_with_cpu(GetParam(), {.kv_fp8 = true}); }
class CudaVsCpuMoeCublas : public CudaVsCpu {};
TEST_P(CudaVsCpuMoeCublas, ChunkedPrefillAndDecodeAgree) {
  expect_cuda_agrees_with_cpu(GetParam(), {.moe_cublas_min_rows = 0});
}

/// Every executor fixture and the FP8 checkpoints (per-tensor, per-channel, block-scaled experts).
const std::vector<std::string>& agreement_fixtures() {
  static const std::vector<std::string> models = [] {
    std::vector<std::string> m = executor_fixtures();
    for (const char* fp8 : {"qwen3-hd128-fp8", "qwen3-hd128-fp8-channel", "mixtral-fp8-block"}) m.push_back(fp8);
    return m;
  }();
  return models;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaVsCpu, ::testing::ValuesIn(agreement_fixtures()), model_param_name);

// The mixture-of-experts fixtures: dense layers in E4M3, experts (and DeepSeek-V2's latent
// projections) rounded through E4M3 and kept in bf16.
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaVsCpuQuantizedFp8,
                         ::testing::Values("llama-hd128-bf16", "qwen3-hd128-bf16", "qwen2-tiny", "mixtral-bf16",
                                           "qwen3-moe-bf16", "deepseek-v2-qlora-yarn-bf16"),
                         model_param_name);

// The checkpoints whose dense layers stay E4M3 on the device (mixtral-fp8-block's are dequantized).
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaVsCpuFp8Activations,
                         ::testing::Values("qwen3-hd128-fp8", "qwen3-hd128-fp8-channel"), model_param_name);

// --kv-cache-dtype fp8 on the head-dim-128 fixtures (the FP8 cache's kernels take 64 and 128):
// qwen3-hd128-fp8 carries per-layer k_scale / v_scale, the others run with scale 1.
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaVsCpuFp8KvCache,
                         ::testing::Values("llama-hd128-bf16", "qwen3-hd128-bf16", "qwen3-hd128-fp8"), model_param_name);

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaVsCpuQuantizedFp8Activations,
                         ::testing::Values("llama-hd128-bf16", "qwen3-hd128-bf16", "qwen2-tiny"), model_param_name);

// The mixture-of-experts fixtures (greedy and group-limited routing, shared experts, FP8 experts
// dequantized at load) with every eager batched chunk's experts on cuBLAS.
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaVsCpuMoeCublas,
                         ::testing::Values("mixtral-tiny", "mixtral-bf16", "qwen3-moe-tiny", "qwen3-moe-bf16",
                                           "deepseek-v2-tiny", "deepseek-v2-qlora-yarn-bf16", "mixtral-fp8-block"),
                         model_param_name);

}  // namespace
}  // namespace actorserve::testing
