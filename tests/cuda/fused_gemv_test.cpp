// The fused one-token GEMVs (gpu/cuda/linear/gemv_kernel.hpp) against the unfused pair of launches they
// replace (gemv, then rope_kv_write / silu_and_mul) on the same random operands, and
// against fp64 CPU references; then the executor's one-token steps with and without them, with
// 16-bit and FP8 weights (fp8_gemv_fused.hpp) and the 16-bit and FP8 KV cache
// (fp8_fused_gemv_test.cpp has the FP8 kernels' own comparisons).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "config/model_config.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "qkv_rope_case.hpp"
#include "test_data.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

std::vector<float> to_f32(act_dtype dt, const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = from_act_bits(dt, bits[i]);
  return v;
}

/// Elements of `got` further from `want` than `ulps` units of the act dtype at the value's magnitude
/// plus `floor` times the largest |want| (for values that cancel to near zero).
int count_off(act_dtype dt, const std::vector<float>& got, const std::vector<float>& want, double ulps,
              double floor = 0.0) {
  const double unit = dt == act_dtype::bf16 ? 1.0 / 128 : 1.0 / 1024;
  double top = 0;
  for (float v : want) top = std::max(top, std::abs(double(v)));
  int off = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!std::isfinite(got[i]) ||
        std::abs(double(got[i]) - want[i]) > ulps * unit * std::abs(double(want[i])) + floor * top + 1e-30)
      ++off;
  return off;
}

/// fp64 x . w_row over act-dtype operands.
double dot(act_dtype dt, const std::vector<uint16_t>& x, const std::vector<uint16_t>& w, size_t row, int k) {
  double s = 0;
  for (int q = 0; q < k; ++q) s += double(from_act_bits(dt, x[q])) * from_act_bits(dt, w[row * k + q]);
  return s;
}

class CudaFusedGemv : public ::testing::TestWithParam<act_dtype> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_P(CudaFusedGemv, GateUpSiluMatchesGemvThenSiluMul) {
  const act_dtype dt = GetParam();
  for (int inter : {1, 7, 130, 1000}) {
    for (int k : {8, 264, 4096}) {
      for (int rows : {2, 4}) {
        auto x = random_act_bits(dt, size_t(k), 1), w = random_act_bits(dt, size_t(2) * inter * k, 2, 0.1f);
        dev_vec<uint16_t> d_x(x), d_w(w), d_fused(static_cast<size_t>(inter)), d_act(static_cast<size_t>(inter));
        dev_vec<float> d_gu(static_cast<size_t>(2 * inter));
        d_fused.poison();
        ASSERT_EQ(cuda::gemv_gate_up_silu(dt, d_x.get(), k, d_w.get(), inter, d_fused.get(), rows, nullptr), 0);
        ASSERT_EQ(cuda::gemv(dt, d_x.get(), 1, k, d_w.get(), 2 * inter, d_gu.get(), 0.0f, nullptr), 0);
        ASSERT_EQ(cuda::silu_and_mul(dt, d_gu.get(), 1, inter, d_act.get(), nullptr), 0);
        const auto fused = to_f32(dt, d_fused.download()), unfused = to_f32(dt, d_act.download());
        std::vector<float> ref(static_cast<size_t>(inter));
        for (int j = 0; j < inter; ++j) {
          const double g = dot(dt, x, w, size_t(j), k), u = dot(dt, x, w, size_t(inter + j), k);
          ref[j] = float(g / (1 + std::exp(-g)) * u);
        }
        EXPECT_EQ(count_off(dt, fused, unfused, 0.0), 0) << "inter " << inter << " k " << k << " rows " << rows;
        EXPECT_EQ(count_off(dt, fused, ref, 2.0, 1e-3), 0) << "inter " << inter << " k " << k << " rows " << rows;
      }
    }
  }
}

TEST_P(CudaFusedGemv, QkvRopeMatchesGemvThenRopeKvWrite) {
  const act_dtype dt = GetParam();
  for (const qkv_rope_shape& sh : kQkvRopeShapes) {
    const qkv_rope_case qc(sh);
    const int width = qc.width;
    const size_t cache = qc.cache;
    const std::vector<float>& bias = qc.bias_h;
    const std::vector<float>& inv_freq = qc.inv_freq;
    auto x = random_act_bits(dt, size_t(sh.k), 3), w = random_act_bits(dt, size_t(width) * sh.k, 4, 0.2f);
    dev_vec<uint16_t> d_x(x), d_w(w);
    dev_vec<float> d_qkv_f(static_cast<size_t>(width)), d_qkv_u(static_cast<size_t>(width));
    dev_vec<uint16_t> kf(cache), vf(cache), ku(cache), vu(cache);
    for (auto* d : {&kf, &vf, &ku, &vu}) d->poison();
    d_qkv_f.poison();
    cuda::rope_kv_args a = qc.args(d_qkv_f.get(), kf.get(), vf.get());
    ASSERT_EQ(cuda::gemv_qkv_rope(dt, d_x.get(), sh.k, d_w.get(), a, nullptr), 0);
    a.qkv = d_qkv_u.get();
    a.k_cache = ku.get();
    a.v_cache = vu.get();
    ASSERT_EQ(cuda::gemv(dt, d_x.get(), 1, sh.k, d_w.get(), width, d_qkv_u.get(), 0.0f, nullptr, 2), 0);
    ASSERT_EQ(cuda::rope_kv_write(dt, a, nullptr), 0);
    const auto qf = d_qkv_f.download(), qu = d_qkv_u.download();
    EXPECT_LT(rel_max_err(qf, qu), 1e-6) << "D " << sh.D;
    // q rotated, against fp64.
    std::vector<float> q_ref(size_t(sh.H) * sh.D), q_got(q_ref.size());
    for (int h = 0; h < sh.H; ++h)
      for (int i = 0; i < sh.D / 2; ++i) {
        const int c0 = h * sh.D + i, c1 = c0 + sh.D / 2;
        const double x1 = dot(dt, x, w, size_t(c0), sh.k) + (sh.bias ? bias[c0] : 0.0);
        const double x2 = dot(dt, x, w, size_t(c1), sh.k) + (sh.bias ? bias[c1] : 0.0);
        const double ang = 777.0 * inv_freq[i];
        q_ref[c0] = float(x1 * std::cos(ang) - x2 * std::sin(ang));
        q_ref[c1] = float(x2 * std::cos(ang) + x1 * std::sin(ang));
        q_got[c0] = qf[c0];
        q_got[c1] = qf[c1];
      }
    EXPECT_LT(rel_max_err(q_got, q_ref), 1e-4) << "D " << sh.D;
    // The same values land in the same slot (and nowhere else): within one rounding step.
    const size_t kvd = size_t(sh.KVH) * sh.D, at = sh.slot >= 0 ? size_t(sh.slot) * kvd : cache;
    for (auto [f, u] : {std::pair{kf.download(), ku.download()}, std::pair{vf.download(), vu.download()}}) {
      for (size_t i = 0; i < cache; ++i) {
        if (i < at || i >= at + kvd) {
          ASSERT_EQ(f[i], 0xffff) << "written outside the slot at " << i;
        }
      }
      if (sh.slot < 0) continue;
      const std::vector<uint16_t> fs(f.begin() + at, f.begin() + at + kvd), us(u.begin() + at, u.begin() + at + kvd);
      EXPECT_EQ(count_off(dt, to_f32(dt, fs), to_f32(dt, us), 1.0), 0) << "D " << sh.D;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFusedGemv, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return info.param == act_dtype::bf16 ? "bf16" : "fp16"; });

/// A model and its precision for the executor comparison: FP8 weights (--quantization fp8, one
/// scale per row), the FP8 KV cache (--kv-cache-dtype fp8; its kernels take head dims 64 and 128
/// only, so not qwen2-tiny's 32), and whether its QKV projection fuses (not with Qwen3's q/k norm).
struct fused_run {
  std::string model;
  bool quantize_fp8 = false;
  bool kv_fp8 = false;
  bool fused_qkv = true;
};

std::string run_name(const ::testing::TestParamInfo<fused_run>& info) {
  std::string s = info.param.model + (info.param.quantize_fp8 ? "_fp8_weights" : "") +
                  (info.param.kv_fp8 ? "_fp8_cache" : "");
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}

void PrintTo(const fused_run& run, std::ostream* os) { *os << run_name({run, 0}); }

class CudaFusedExecutor : public ::testing::TestWithParam<fused_run> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_P(CudaFusedExecutor, OneTokenStepsMatchTheUnfusedPath) {
  const fused_run& run = GetParam();
  const std::string dir = model_dir(run.model);
  const int steps = 16;
  const auto options = [&](bool eager) {
    gpu::cuda_executor_options o = test_options(eager);
    o.quantize_fp8 = run.quantize_fp8;
    if (run.kv_fp8) {  // the FP8 cache is read by flash-decoding's kernels, in 64-token blocks
      o.kv_cache_fp8 = true;
      o.kv_layout = kv_cache_layout::flash_decoding;
      o.block_size = 64;
    }
    return o;
  };
  const auto probe = [](const std::unique_ptr<gpu::executor>& ex) {
    return dynamic_cast<gpu::cuda_executor_probe*>(ex.get());
  };
  gpu::cuda_executor_options unfused_options = options(false);
  unfused_options.tuning.fused_decode = false;
  auto unfused = gpu::make_cuda_executor(dir, unfused_options);
  ASSERT_TRUE(unfused.ok()) << unfused.err().message;
  auto [tu, lu] = one_sequence(*unfused.value(), steps, {});
  EXPECT_EQ(probe(unfused.value())->fused_qkv_gemvs(), 0);
  EXPECT_EQ(probe(unfused.value())->fused_gate_up_gemvs(), 0);
  unfused.value().reset();
  auto graphs = gpu::make_cuda_executor(dir, options(false));
  auto eager = gpu::make_cuda_executor(dir, options(true));
  ASSERT_TRUE(graphs.ok() && eager.ok());
  auto [tg, lg] = one_sequence(*graphs.value(), steps, tu);
  auto [te, le] = one_sequence(*eager.value(), steps, tu);
  EXPECT_EQ(tg, te);
  ASSERT_EQ(lu.size(), size_t(steps));
  ASSERT_EQ(lg.size(), size_t(steps));
  // The one-token steps took the fused GEMVs: each eager step once a layer.
  auto cfg = load_model_config(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.err().message;
  const int64_t layer_steps = int64_t(steps) * cfg.value().num_layers;
  EXPECT_GE(probe(eager.value())->fused_gate_up_gemvs(), layer_steps);
  if (run.fused_qkv)
    EXPECT_GE(probe(eager.value())->fused_qkv_gemvs(), layer_steps);
  else
    EXPECT_EQ(probe(eager.value())->fused_qkv_gemvs(), 0);
  EXPECT_GT(probe(graphs.value())->fused_gate_up_gemvs(), 0);
  EXPECT_EQ(probe(graphs.value())->fused_qkv_gemvs() > 0, run.fused_qkv);
  double fused_vs_unfused = 0, graph_vs_eager = 0;
  for (int k = 0; k < steps; ++k) {
    fused_vs_unfused = std::max(fused_vs_unfused, rel_max_err(lg[k], lu[k]));
    graph_vs_eager = std::max(graph_vs_eager, rel_max_err(lg[k], le[k]));
  }
  std::printf("%s, %d one-token steps: fused vs unfused logits max abs err / max abs ref %.3g; fused graphs vs "
              "fused eager %.3g\n", run_name({run, 0}).c_str(), steps, fused_vs_unfused, graph_vs_eager);
  EXPECT_LT(fused_vs_unfused, 1e-2);
  EXPECT_LT(graph_vs_eager, 1e-5);
  EXPECT_GE(probe(graphs.value())->graph_replays(), steps);
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaFusedExecutor,
    ::testing::Values(fused_run{"llama-hd128-bf16"}, fused_run{"qwen2-tiny"},
                      fused_run{"llama-hd128-bf16", true}, fused_run{"qwen2-tiny", true},
                      fused_run{"llama-hd128-bf16", false, true}, fused_run{"llama-hd128-bf16", true, true},
                      fused_run{"qwen3-hd128-fp8-channel", false, false, false}),
    run_name);

}  // namespace
}  // namespace actorserve::testing
