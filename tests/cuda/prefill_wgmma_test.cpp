// The tensor-core prefill kernels (gpu/cuda/attention/: prefill_kernel::wgmma_tma_persistent,
// wgmma_cp_async and mma_sync, and automatic, which runs the persistent kernel for bf16, head
// dim 128 and blocks of 8, 16, 32 or a multiple of 64 tokens) against the double-precision
// reference over prefill-heavy steps: whole prompts, chunks over a cached prefix, tiles cut short
// (q_len not a multiple of the tile's tokens), key ranges of 1-33 tiles (the K/V ring wraps many
// times), GQA groups 1-8, head dims 64 and 128, bf16 and fp16, both backends' block sizes;
// outputs poisoned before each run. Their timings are bench_cuda_attention's (`--kernels`).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>

#include "cuda_test_util.hpp"
#include "paged_attention_case.hpp"
#include "gpu/cuda/attention/backend.hpp"
#include "gpu/cuda/attention/prefill_wgmma.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

using gpu::prefill_kernel;

/// Every prefill kernel, the automatic choice first.
const prefill_kernel kAllKernels[] = {prefill_kernel::automatic, prefill_kernel::wgmma_tma_persistent,
                                      prefill_kernel::wgmma_cp_async, prefill_kernel::mma_sync};

const char* kernel_name(prefill_kernel k) {
  switch (k) {
    case prefill_kernel::automatic: return "automatic";
    case prefill_kernel::wgmma_tma_persistent: return "wgmma_tma_persistent";
    case prefill_kernel::wgmma_cp_async: return "wgmma_cp_async";
    case prefill_kernel::mma_sync: return "mma_sync";
  }
  return "?";
}

/// A step's inputs in device memory, uploaded once for every kernel run over them.
struct device_inputs {
  explicit device_inputs(const paged_inputs& in)
      : in(in), q(in.q), k(in.k_cache), v(in.v_cache), bt(in.block_tables), seqs(in.seqs),
        out(size_t(in.n_tokens) * in.num_heads * in.head_dim) {}
  const paged_inputs& in;
  dev_vec<float> q;
  dev_vec<uint16_t> k, v;
  dev_vec<int32_t> bt;
  dev_vec<cuda::attn_seq> seqs;
  dev_vec<uint16_t> out;
};

/// One step through a backend built for prefill kernel `kernel`: plan and launch arguments over
/// `d`.
class prefill_step {
 public:
  prefill_step(act_dtype dt, kv_cache_layout layout, device_inputs& d, prefill_kernel kernel) : d_(d) {
    const paged_inputs& in = d.in;
    cuda::attention_shape shape;
    shape.dt = dt;
    shape.num_heads = in.num_heads;
    shape.num_kv_heads = in.num_kv_heads;
    shape.head_dim = in.head_dim;
    shape.block_size = in.block_size;
    gpu::attention_tuning tuning;
    tuning.prefill = kernel;
    auto made = cuda::make_attention_backend(layout, shape, tuning);
    EXPECT_TRUE(made) << (made ? "" : made.err().message);
    if (made) backend_ = std::move(*made);
    if (!backend_) return;
    const cuda::attention_plan plan = backend_->plan(in.seqs);
    const cuda::attention_grids g = backend_->grids(plan);
    prefill_items_ = int32_t(plan.items.size()) - plan.num_decode_items;
    items_.upload(plan.items.empty() ? std::vector<cuda::attn_item>(1) : plan.items);
    comb_.upload(plan.combines.empty() ? std::vector<cuda::attn_combine>(1) : plan.combines);
    counts_.upload({prefill_items_, int32_t(plan.combines.size()), plan.num_decode_items, 0});
    const size_t slots = size_t(std::max(1, plan.num_partials));
    po_.resize(slots * cuda::attn_tile_rows * in.head_dim);
    pl_.resize(slots * cuda::attn_tile_rows * 2);
    a_.q = d.q.get();
    a_.q_stride = in.q_stride;
    a_.k_cache = d.k.get();
    a_.v_cache = d.v.get();
    a_.block_tables = d.bt.get();
    a_.seqs = d.seqs.get();
    a_.items = items_.get();
    a_.combines = comb_.get();
    a_.counts = counts_.get();
    a_.prefill_grid = g.prefill + 3;  // extra CTAs must exit
    a_.decode_grid = g.decode;
    a_.combine_grid = g.combine;
    a_.partial_o = po_.get();
    a_.partial_lse = pl_.get();
    a_.out = d.out.get();
    a_.num_heads = in.num_heads;
    a_.num_kv_heads = in.num_kv_heads;
    a_.head_dim = in.head_dim;
    a_.block_size = in.block_size;
    a_.scale = 1.0f / std::sqrt(float(in.head_dim));
  }

  bool ok() const { return backend_ != nullptr; }
  /// Points the launch at a 16-bit scaled copy of the queries (attn_launch::q16), or back at none.
  void set_q16(const void* q16) { a_.q16 = q16; }
  int prefill_items() const { return prefill_items_; }
  void poison() {
    d_.out.poison();
    po_.poison();
    pl_.poison();
  }
  int run(cudaStream_t s = nullptr) const { return backend_->run(a_, s); }
  std::vector<float> output(act_dtype dt) const {
    const auto bits = d_.out.download();
    std::vector<float> got(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) got[i] = from_act_bits(dt, bits[i]);
    return got;
  }

 private:
  device_inputs& d_;
  std::unique_ptr<cuda::attention_backend> backend_;
  int32_t prefill_items_ = 0;
  dev_vec<float> po_, pl_;
  dev_vec<int32_t> counts_;
  dev_vec<cuda::attn_item> items_;
  dev_vec<cuda::attn_combine> comb_;
  cuda::attn_launch a_;
};

struct param {
  act_dtype dt;
  kv_cache_layout layout;
};

class PrefillWgmma : public ::testing::TestWithParam<param> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_P(PrefillWgmma, KernelsMatchReference) {
  const auto [dt, layout] = GetParam();
  const bool vllm = layout == kv_cache_layout::vllm;
  // Whole prompts (2 .. 2100 keys), chunks over a cached prefix, short tiles, one decode token.
  const std::vector<seq_spec> seqs = {{2, 2}, {17, 17}, {300, 300}, {1000, 40}, {97, 30}, {2100, 71}, {64, 64},
                                      {129, 1}, {200, 3}};
  struct config { int D, G, bs; };
  const config configs[] = {{128, 4, vllm ? 16 : 64}, {128, 1, vllm ? 16 : 80}, {128, 8, vllm ? 32 : 64},
                            {128, 2, vllm ? 8 : 96},  {64, 4, vllm ? 16 : 64},  {64, 8, vllm ? 16 : 128}};
  for (const config& k : configs) {
    std::mt19937 rng(uint32_t(31 + k.D + k.G + k.bs));
    const paged_inputs in = make_paged_inputs(dt, 2 * k.G, 2, k.D, k.bs, seqs, rng);
    const std::vector<float> ref = reference_attention(dt, in);
    device_inputs d(in);
    for (prefill_kernel kernel : kAllKernels) {
      prefill_step step(dt, layout, d, kernel);
      ASSERT_TRUE(step.ok());
      ASSERT_GT(step.prefill_items(), 0);
      step.poison();
      ASSERT_EQ(step.run(), 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const double err = rel_max_err(step.output(dt), ref);
      std::printf("prefill %s %s D=%d G=%d bs=%d: max abs err / max abs ref %.3g\n", kernel_name(kernel),
                  to_string(layout), k.D, k.G, k.bs, err);
      EXPECT_LT(err, 1e-2) << kernel_name(kernel) << " D=" << k.D << " G=" << k.G << " bs=" << k.bs;
    }
  }
}

/// The persistent kernel copying the queries in from rope's 16-bit scaled copy gives the
/// bits it gives when its idle warps convert the fp32 queries themselves: the copy holds what
/// the staging computes (rope_kv_write's test checks that copy bit for bit).
TEST_P(PrefillWgmma, PersistentPrefillFromQ16EqualsItsOwnStaging) {
  const auto [dt, layout] = GetParam();
  if (dt != act_dtype::bf16) GTEST_SKIP() << "the persistent kernel is built for bf16 only";
  const bool vllm = layout == kv_cache_layout::vllm;
  const std::vector<seq_spec> seqs = {{2, 2}, {17, 17}, {1000, 1000}, {1000, 40}, {97, 30}, {2100, 71}, {64, 64},
                                      {200, 3}, {700, 129}};
  struct config { int G, bs; };
  for (const config& k : {config{4, vllm ? 16 : 64}, config{1, vllm ? 8 : 128}, config{8, vllm ? 32 : 64}}) {
    std::mt19937 rng(uint32_t(91 + k.G + k.bs));
    const paged_inputs in = make_paged_inputs(dt, 2 * k.G, 2, 128, k.bs, seqs, rng);
    const float sc = 1.4426950408889634f / std::sqrt(128.0f);
    std::vector<uint16_t> q16(size_t(in.n_tokens) * in.num_heads * in.head_dim);
    for (int t = 0; t < in.n_tokens; ++t)
      for (int c = 0; c < in.num_heads * in.head_dim; ++c)
        q16[size_t(t) * in.num_heads * in.head_dim + c] = to_act_bits(dt, in.q[size_t(t) * in.q_stride + c] * sc);
    dev_vec<uint16_t> d_q16(q16);
    device_inputs d(in);
    prefill_step step(dt, layout, d, prefill_kernel::wgmma_tma_persistent);
    ASSERT_TRUE(step.ok());
    std::vector<uint16_t> staged, copied;
    for (const void* q : {static_cast<const void*>(nullptr), static_cast<const void*>(d_q16.get())}) {
      step.set_q16(q);
      step.poison();
      ASSERT_EQ(step.run(), 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      (q ? copied : staged) = d.out.download();
    }
    EXPECT_EQ(count_unequal(copied, staged), 0) << "G=" << k.G << " bs=" << k.bs;
    EXPECT_LT(rel_max_err(step.output(dt), reference_attention(dt, in)), 1e-2) << "G=" << k.G << " bs=" << k.bs;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PrefillWgmma,
                         ::testing::Values(param{act_dtype::bf16, kv_cache_layout::flash_decoding},
                                           param{act_dtype::fp16, kv_cache_layout::flash_decoding},
                                           param{act_dtype::bf16, kv_cache_layout::vllm},
                                           param{act_dtype::fp16, kv_cache_layout::vllm}),
                         [](const auto& info) {
                           const bool vllm = info.param.layout == kv_cache_layout::vllm;
                           return std::string(vllm ? "vllm_" : "flash_decoding_") +
                                  (info.param.dt == act_dtype::bf16 ? "bf16" : "fp16");
                         });

}  // namespace
}  // namespace actorserve::testing
