// The fused one-token GEMVs over FP8 weights with row scales (gpu/cuda/linear/fp8_gemv_fused.hpp,
// in registers and on the bulk-copy ring of fp8_gemv_bulk.hpp), and the fused QKV + rope GEMVs
// writing the FP8 KV cache (rope_kv_args::kv_fp8) over FP8 and 16-bit weights, against the
// unfused launches they replace on the same random operands (fp8_gemv or gemv into fp32, then
// rope_kv_write or silu_and_mul): q, k and v in qkv, both caches whole (the slot written, nothing
// else) and SiLU-and-mul's output, all bit for bit. Then the executor's FP8 one-token steps on the
// ring against the register kernels.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "executor_test_util.hpp"
#include "fp8_operands.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/linear/fp8_gemv_bulk.hpp"
#include "gpu/cuda/linear/fp8_gemv_fused.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/tuning.hpp"
#include "qkv_rope_case.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

/// Heads, KV heads, head dim, k (a multiple of 16, as the FP8 GEMV needs), bias, slot: with and
/// without a bias, a written slot and none (-1), one and several pairs per group's last group.
const qkv_rope_shape kShapes[] = {{4, 2, 16, 64, true, 37},
                                  {32, 8, 128, 4096, false, 1000},
                                  {4, 1, 32, 208, true, -1},
                                  {6, 3, 64, 528, false, -1},
                                  {3, 1, 8, 1040, true, 5}};

/// Where a fused GEMV runs: in registers (every bulk-copy flag off) or on the ring: groups of
/// fp8_rows FP8 weight rows (8, the default: 4 rotary pairs or 4 gate/up pairs; 4: 2 and 2) and,
/// for the 16-bit GEMVs, of qkv_pairs rotary pairs (2, the default, and 1).
struct where {
  const char* name;
  bool ring;
  gpu::bulk_gemv_tuning bulk;
};
gpu::bulk_gemv_tuning registers() {
  gpu::bulk_gemv_tuning t;
  t.plain = t.qkv = t.gate_up = t.fp8 = false;
  return t;
}
gpu::bulk_gemv_tuning ring_of(int fp8_rows, int qkv_pairs) {
  gpu::bulk_gemv_tuning t;
  t.fp8_rows = fp8_rows;
  t.qkv_pairs = qkv_pairs;
  t.fp8_mma_min_rows = 0;  // the CUDA-core ring (fp8_gemv_mma_test.cpp has the tensor-core one)
  return t;
}
const where kWheres[] = {{"registers", false, registers()},
                         {"ring, 8 FP8 rows, 2 pairs", true, ring_of(8, 2)},
                         {"ring, 4 FP8 rows, 1 pair", true, ring_of(4, 1)}};

bool runs_ring() { return gpu::runs_tma(cuda::loaded_gpu_target()); }

std::string describe(act_dtype dt, const qkv_rope_shape& sh, bool kv_fp8, const where& w) {
  return std::string(dt == act_dtype::bf16 ? "bf16" : "fp16") + " H=" + std::to_string(sh.H) +
         " KVH=" + std::to_string(sh.KVH) + " D=" + std::to_string(sh.D) + " k=" + std::to_string(sh.k) +
         (sh.bias ? " bias" : "") + " slot=" + std::to_string(sh.slot) + (kv_fp8 ? " fp8 cache" : " 16-bit cache") +
         ", " + w.name;
}

/// The K and V caches of one run: bytes, poisoned (0xff is no E4M3 code rope_kv_write writes).
struct caches {
  dev_vec<uint8_t> k, v;
  caches(size_t elements, bool fp8) : k(elements * (fp8 ? 1 : 2)), v(elements * (fp8 ? 1 : 2)) {
    k.poison();
    v.poison();
  }
};

/// rope_kv_args for `qc` into `qkv` and `c`, the cache 16-bit or E4M3 with scales that are no
/// powers of two (the division rounds).
cuda::rope_kv_args args_for(const qkv_rope_case& qc, float* qkv, const caches& c, bool kv_fp8) {
  cuda::rope_kv_args a = qc.args(qkv, c.k.get(), c.v.get());
  a.kv_fp8 = kv_fp8;
  a.k_scale = 0.037f;
  a.v_scale = 0.0213f;
  return a;
}

/// qkv and both caches of the fused run equal the unfused run's bit for bit.
void expect_same_bits(const dev_vec<float>& fused_qkv, const caches& fused, const dev_vec<float>& qkv,
                      const caches& unfused, const std::string& what) {
  EXPECT_EQ(count_unequal(fused_qkv.download(), qkv.download()), 0) << what << ": qkv";
  EXPECT_EQ(count_unequal(fused.k.download(), unfused.k.download()), 0) << what << ": k cache";
  EXPECT_EQ(count_unequal(fused.v.download(), unfused.v.download()), 0) << what << ": v cache";
}

class CudaFp8FusedGemv : public ::testing::TestWithParam<act_dtype> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_P(CudaFp8FusedGemv, QkvRopeEqualsFp8GemvThenRopeKvWrite) {
  const act_dtype dt = GetParam();
  uint32_t seed = 900;
  for (const qkv_rope_shape& sh : kShapes) {
    const qkv_rope_case qc(sh);
    const fp8_operands o = make_fp8_operands(fp8_case{dt, 1, sh.k, qc.width, 0.0f}, 0, seed++);
    dev_vec<uint16_t> dx(o.x);
    dev_vec<uint8_t> dq(o.q);
    dev_vec<float> dscale(o.scale);
    for (bool kv_fp8 : {false, true}) {
      // The unfused pair: the FP8 GEMV into fp32 qkv, then rope_kv_write.
      dev_vec<float> qkv_u(static_cast<size_t>(qc.width));
      caches unfused(qc.cache, kv_fp8);
      const cuda::rope_kv_args au = args_for(qc, qkv_u.get(), unfused, kv_fp8);
      ASSERT_EQ(cuda::fp8_gemv(dt, dx.get(), 1, sh.k, dq.get(), dscale.get(), qc.width, qkv_u.get(), 0.0f, nullptr),
                0);
      ASSERT_EQ(cuda::rope_kv_write(dt, au, nullptr), 0);
      for (const where& w : kWheres) {
        if (w.ring && !runs_ring()) continue;
        const std::string what = describe(dt, sh, kv_fp8, w);
        dev_vec<float> qkv_f(static_cast<size_t>(qc.width));
        qkv_f.poison();
        caches fused(qc.cache, kv_fp8);
        const cuda::rope_kv_args af = args_for(qc, qkv_f.get(), fused, kv_fp8);
        if (w.ring)  // the ring kernel itself, and the launcher that routes to it
          ASSERT_EQ(cuda::fp8_gemv_bulk_qkv_rope(dt, dx.get(), sh.k, dq.get(), dscale.get(), af, nullptr, w.bulk), 0)
              << what;
        else
          ASSERT_EQ(cuda::fp8_gemv_qkv_rope(dt, dx.get(), sh.k, dq.get(), dscale.get(), af, nullptr, w.bulk), 0)
              << what;
        expect_same_bits(qkv_f, fused, qkv_u, unfused, what);
        if (!w.ring) continue;
        qkv_f.poison();
        caches routed(qc.cache, kv_fp8);
        const cuda::rope_kv_args ar = args_for(qc, qkv_f.get(), routed, kv_fp8);
        ASSERT_EQ(cuda::fp8_gemv_qkv_rope(dt, dx.get(), sh.k, dq.get(), dscale.get(), ar, nullptr, w.bulk), 0) << what;
        expect_same_bits(qkv_f, routed, qkv_u, unfused, what + " (through fp8_gemv_qkv_rope)");
      }
    }
  }
}

TEST_P(CudaFp8FusedGemv, SixteenBitQkvRopeWritesTheFp8CacheAsRopeKvWrite) {
  const act_dtype dt = GetParam();
  uint32_t seed = 950;
  for (const qkv_rope_shape& sh : kShapes) {
    const qkv_rope_case qc(sh);
    const auto x = random_act_bits(dt, size_t(sh.k), seed++);
    const auto w = random_act_bits(dt, size_t(qc.width) * sh.k, seed++, 0.2f);
    dev_vec<uint16_t> dx(x), dw(w);
    dev_vec<float> qkv_u(static_cast<size_t>(qc.width));
    caches unfused(qc.cache, true);
    ASSERT_EQ(cuda::gemv(dt, dx.get(), 1, sh.k, dw.get(), qc.width, qkv_u.get(), 0.0f, nullptr, 2, registers()), 0);
    ASSERT_EQ(cuda::rope_kv_write(dt, args_for(qc, qkv_u.get(), unfused, true), nullptr), 0);
    for (const where& wh : kWheres) {
      if (wh.ring && !runs_ring()) continue;
      const std::string what = describe(dt, sh, true, wh) + ", 16-bit weights";
      dev_vec<float> qkv_f(static_cast<size_t>(qc.width));
      qkv_f.poison();
      caches fused(qc.cache, true);
      ASSERT_EQ(cuda::gemv_qkv_rope(dt, dx.get(), sh.k, dw.get(), args_for(qc, qkv_f.get(), fused, true), nullptr,
                                    wh.bulk),
                0)
          << what;
      expect_same_bits(qkv_f, fused, qkv_u, unfused, what);
    }
  }
}

TEST_P(CudaFp8FusedGemv, GateUpSiluEqualsFp8GemvThenSiluMul) {
  const act_dtype dt = GetParam();
  uint32_t seed = 1000;
  for (int inter : {1, 7, 130, 1000})
    for (int k : {16, 272, 4096}) {
      const fp8_operands o = make_fp8_operands(fp8_case{dt, 1, k, 2 * inter, 0.0f}, 0, seed++);
      dev_vec<uint16_t> dx(o.x), act_u(static_cast<size_t>(inter));
      dev_vec<uint8_t> dq(o.q);
      dev_vec<float> dscale(o.scale), gate_up(static_cast<size_t>(2 * inter));
      ASSERT_EQ(cuda::fp8_gemv(dt, dx.get(), 1, k, dq.get(), dscale.get(), 2 * inter, gate_up.get(), 0.0f, nullptr), 0);
      ASSERT_EQ(cuda::silu_and_mul(dt, gate_up.get(), 1, inter, act_u.get(), nullptr), 0);
      const auto want = act_u.download();
      for (const where& w : kWheres) {
        if (w.ring && !runs_ring()) continue;
        for (int rows : {2, 4}) {  // the register kernel's rows a block (the ring's: w.bulk.fp8_rows)
          const std::string what = std::string(dt == act_dtype::bf16 ? "bf16" : "fp16") + " inter=" +
                                   std::to_string(inter) + " k=" + std::to_string(k) + " rows=" +
                                   std::to_string(rows) + ", " + w.name;
          dev_vec<uint16_t> act_f(static_cast<size_t>(inter));
          act_f.poison();
          ASSERT_EQ(cuda::fp8_gemv_gate_up_silu(dt, dx.get(), k, dq.get(), dscale.get(), inter, act_f.get(), rows,
                                                nullptr, w.bulk),
                    0)
              << what;
          EXPECT_EQ(count_unequal(act_f.download(), want), 0) << what;
          if (!w.ring || rows != 2) continue;
          act_f.poison();
          ASSERT_EQ(cuda::fp8_gemv_bulk_gate_up_silu(dt, dx.get(), k, dq.get(), dscale.get(), inter, act_f.get(),
                                                     nullptr, w.bulk),
                    0)
              << what;
          EXPECT_EQ(count_unequal(act_f.download(), want), 0) << what << " (the ring kernel itself)";
        }
      }
    }
}

TEST_P(CudaFp8FusedGemv, RefusesWhatTheFp8GemvCannotTake) {
  const act_dtype dt = GetParam();
  const qkv_rope_shape sh{4, 2, 16, 24, false, 3};  // k = 24: not a multiple of 16
  const qkv_rope_case qc(sh);
  dev_vec<uint16_t> dx(random_act_bits(dt, 32, 1)), act(4);
  dev_vec<uint8_t> dq(size_t(qc.width) * 32);
  dev_vec<float> dscale(static_cast<size_t>(qc.width)), qkv(static_cast<size_t>(qc.width));
  caches c(qc.cache, true);
  qkv.poison();
  act.poison();
  const cuda::rope_kv_args a = args_for(qc, qkv.get(), c, true);
  for (const where& w : kWheres) {
    EXPECT_EQ(cuda::fp8_gemv_qkv_rope(dt, dx.get(), sh.k, dq.get(), dscale.get(), a, nullptr, w.bulk),
              cudaErrorInvalidValue)
        << w.name;
    EXPECT_EQ(cuda::fp8_gemv_gate_up_silu(dt, dx.get(), 24, dq.get(), dscale.get(), 4, act.get(), 2, nullptr, w.bulk),
              cudaErrorInvalidValue)
        << w.name;
  }
  EXPECT_EQ(cuda::fp8_gemv_bulk_qkv_rope(dt, dx.get(), sh.k, dq.get(), dscale.get(), a, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::fp8_gemv_bulk_gate_up_silu(dt, dx.get(), 24, dq.get(), dscale.get(), 4, act.get(), nullptr),
            cudaErrorInvalidValue);
  // Operands the ring takes (k = 32), but groups of 6 rows: refused as fp8_gemv_bulk refuses them.
  gpu::bulk_gemv_tuning six_rows;
  six_rows.fp8_rows = 6;
  EXPECT_EQ(cuda::fp8_gemv_bulk_qkv_rope(dt, dx.get(), 32, dq.get(), dscale.get(), a, nullptr, six_rows),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::fp8_gemv_bulk_gate_up_silu(dt, dx.get(), 32, dq.get(), dscale.get(), 4, act.get(), nullptr, six_rows),
            cudaErrorInvalidValue);
  // Misaligned activations (x one element past a 16-byte boundary) are refused too.
  EXPECT_EQ(cuda::fp8_gemv_qkv_rope(dt, dx.get() + 1, 16, dq.get(), dscale.get(), a, nullptr), cudaErrorInvalidValue);
  for (uint8_t b : c.k.download()) ASSERT_EQ(b, 0xff) << "a refused call wrote the k cache";
  for (uint8_t b : c.v.download()) ASSERT_EQ(b, 0xff) << "a refused call wrote the v cache";
  for (float v : qkv.download()) ASSERT_TRUE(std::isnan(v)) << "a refused call wrote qkv";
  for (uint16_t b : act.download()) ASSERT_EQ(b, 0xffff) << "a refused call wrote act";
}

/// The executor's one-token steps under --quantization fp8 and --kv-cache-dtype fp8: with the
/// bulk-copy kernels (the default tuning, groups of 8 FP8 rows, and of 4) the logits are those of
/// the register kernels bit for bit, and both took the fused FP8 GEMVs.
TEST(CudaFp8FusedExecutor, RingStepsEqualTheRegisterKernels) {
  AS_REQUIRE_CUDA();
  if (!runs_ring()) GTEST_SKIP() << "the bulk-copy engine needs compute capability 9.x";
  const std::string dir = model_dir("llama-hd128-bf16");
  const int steps = 16;
  const auto options = [](bool eager, const gpu::bulk_gemv_tuning& bulk) {
    gpu::cuda_executor_options o = test_options(eager);
    o.quantize_fp8 = true;
    o.kv_cache_fp8 = true;
    o.kv_layout = kv_cache_layout::flash_decoding;  // the FP8 cache's kernels, in 64-token blocks
    o.block_size = 64;
    o.tuning.bulk = bulk;
    return o;
  };
  const auto fused_both = [](gpu::executor& ex) {
    const auto* probe = dynamic_cast<gpu::cuda_executor_probe*>(&ex);
    return probe->fused_qkv_gemvs() > 0 && probe->fused_gate_up_gemvs() > 0;
  };
  auto plain = gpu::make_cuda_executor(dir, options(false, registers()));
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  auto [tp, lp] = one_sequence(*plain.value(), steps, {});
  EXPECT_TRUE(fused_both(*plain.value()));
  plain.value().reset();
  for (int rows : {8, 4})
    for (bool eager : {false, true}) {
      gpu::bulk_gemv_tuning ring;
      ring.fp8_rows = rows;
      ring.fp8_mma_min_rows = 0;
      const std::string what = std::string(eager ? "eager" : "graphs") + ", " + std::to_string(rows) + " FP8 rows";
      auto ex = gpu::make_cuda_executor(dir, options(eager, ring));
      ASSERT_TRUE(ex.ok()) << ex.err().message;
      auto [tb, lb] = one_sequence(*ex.value(), steps, tp);
      EXPECT_TRUE(fused_both(*ex.value())) << what;
      EXPECT_EQ(tb, tp) << what;
      ASSERT_EQ(lb.size(), lp.size());
      int unequal = 0;
      for (size_t k = 0; k < lb.size(); ++k) unequal += count_unequal(lb[k], lp[k]);
      EXPECT_EQ(unequal, 0) << what << ": logits differing from the register kernels";
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFp8FusedGemv, ::testing::Values(act_dtype::bf16, act_dtype::fp16),
                         [](const auto& info) { return info.param == act_dtype::bf16 ? "bf16" : "fp16"; });

}  // namespace
}  // namespace actorserve::testing
