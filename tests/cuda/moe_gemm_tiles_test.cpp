// The grouped GEMM's tile shapes: the choice by the average rows per expert (host code, no
// device needed), and the 64- and 128-row tiles against the 32-row tile at the experts' shapes
// of Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V2-Lite and the fixtures, with experts of rows
// around and between the tiles' sizes and experts of none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "gpu/cuda/model/dummy_fill.hpp"
#include "gpu/cuda/moe/moe_kernels.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;
using cuda::moe_gemm_tile;

TEST(MoeGemmTile, TheChoiceFollowsTheAverageRowsPerExpert) {
  EXPECT_EQ(cuda::moe_tile_rows(moe_gemm_tile::m32), 32);
  EXPECT_EQ(cuda::moe_tile_rows(moe_gemm_tile::m64), 64);
  EXPECT_EQ(cuda::moe_tile_rows(moe_gemm_tile::m128), 128);
  const int m64 = cuda::moe_m64_min_rows_per_expert, m128 = cuda::moe_m128_min_rows_per_expert;
  // Measured: m128 from as few rows an expert as m64 (moe_tile.hpp), so m64 only where m128 cannot run.
  ASSERT_EQ(m64, m128);
  for (int E : {1, 4, 8, 60, 64, 128, 160, 1024}) {
    EXPECT_EQ(cuda::choose_moe_gemm_tile(0, E), moe_gemm_tile::m32) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m128 * E - 1, E), moe_gemm_tile::m32) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m128 * E, E), moe_gemm_tile::m128) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m64 * E, E, moe_gemm_tile::m64), moe_gemm_tile::m64) << E << " experts";
  }
  // Decode batches keep the 32-row tile: 256 tokens x top-8 over 128 experts (Qwen3-30B-A3B).
  EXPECT_EQ(cuda::choose_moe_gemm_tile(256 * 8, 128), moe_gemm_tile::m32);
  // A prefill chunk of 8,192 tokens takes the 128-row tile on each model: Mixtral-8x7B (top-2 of
  // 8), Qwen3-30B-A3B (top-8 of 128), DeepSeek-V2-Lite (top-6 of 64).
  EXPECT_EQ(cuda::choose_moe_gemm_tile(8192 * 2, 8), moe_gemm_tile::m128);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(8192 * 8, 128), moe_gemm_tile::m128);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(8192 * 6, 64), moe_gemm_tile::m128);
  // No overflow at the most pairs a step has (65,536 tokens x top-32) and the most experts.
  EXPECT_EQ(cuda::choose_moe_gemm_tile(65536 * 32, 1024), moe_gemm_tile::m128);
  // Never past the largest tile the device runs (8.0: m64, 8.6 / 8.9: m32).
  EXPECT_EQ(cuda::choose_moe_gemm_tile(8192 * 2, 8, moe_gemm_tile::m64), moe_gemm_tile::m64);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(8192 * 2, 8, moe_gemm_tile::m32), moe_gemm_tile::m32);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(m64 * 8, 8, moe_gemm_tile::m64), moe_gemm_tile::m64);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(m64 * 8 - 1, 8, moe_gemm_tile::m64), moe_gemm_tile::m32);
}

/// Rows routed to each expert: around and between the tiles' sizes, experts of none among them.
const std::vector<int> rows_per_expert = {1, 7, 0, 63, 64, 65, 127, 0, 128, 129, 300, 1000};
constexpr int kTopK = 2;  ///< pair p reads token p / kTopK

/// An expert's sizes: gate/up is [2 * inter][hidden], down [hidden][inter].
struct expert_shape {
  const char* name;
  int inter, hidden;
};
const expert_shape expert_shapes[] = {
    {"Mixtral-8x7B", 14336, 4096},          {"Qwen3-30B-A3B", 768, 2048},
    {"DeepSeek-V2-Lite", 1408, 2048},       {"mixtral-tiny", 128, 64},
    {"mixtral-bf16", 256, 128},             {"qwen3-moe-tiny and deepseek-v2-tiny", 32, 64},
    {"qwen3-moe-bf16", 64, 128},            {"deepseek-v2-qlora-yarn-bf16", 48, 128},
    {"no multiple of a tile's columns or of a K slice", 200, 136}};

/// Fails naming how many elements differ in bits and where the first one is.
template <class T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want, int cols, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": " << count_unequal(got, want) << " of " << got.size()
                    << " elements differ, the first at row " << i / cols << ", column " << i % cols;
      return;
    }
}

/// What one tile computes: the fused gate/up with SiLU (dt), and down into fp32 and into dt.
struct tile_outputs {
  std::vector<uint16_t> silu;
  std::vector<float> down;
  std::vector<uint16_t> down_act;
};

class CudaMoeTiles : public ::testing::Test {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }

  /// The three products with `tile`: gate/up of the tokens x gathered through the permutation,
  /// down of `act` (already in permuted order); every output poisoned before.
  tile_outputs run(act_dtype dt, moe_gemm_tile tile, const std::vector<int32_t>& experts, int E, const expert_shape& sh,
                   const dev_vec<uint16_t>& x, const dev_vec<uint16_t>& act, const dev_vec<uint16_t>& w) {
    const int P = int(experts.size());
    dev_vec<int32_t> d_experts(experts), offsets(size_t(E) + 1), tiles(size_t(E) + 1), sorted(static_cast<size_t>(P)),
        pair_rows(static_cast<size_t>(P));
    const cuda::moe_permute_args pa{.experts = d_experts.get(), .num_pairs = P, .num_experts = E,
                                    .offsets = offsets.get(), .tile = tile, .tile_offsets = tiles.get(),
                                    .sorted_pairs = sorted.get(), .pair_rows = pair_rows.get()};
    EXPECT_EQ(cuda::moe_permute(pa, nullptr), 0);
    dev_vec<uint16_t> silu(size_t(P) * sh.inter), down_act(size_t(P) * sh.hidden);
    dev_vec<float> down(size_t(P) * sh.hidden);
    silu.poison();
    down.poison();
    down_act.poison();
    cuda::grouped_gemm_args g{.a = x.get(), .a_rows = sorted.get(), .a_rows_div = kTopK, .w = w.get(),
                              .offsets = offsets.get(), .tile_offsets = tiles.get(), .tile = tile, .num_pairs = P,
                              .num_experts = E, .n = sh.inter, .k = sh.hidden, .y = silu.get(),
                              .silu_and_mul = true};
    EXPECT_EQ(cuda::grouped_gemm(dt, g, nullptr), 0);
    g = cuda::grouped_gemm_args{.a = act.get(), .w = w.get(), .offsets = offsets.get(), .tile_offsets = tiles.get(), .tile = tile,
                                .num_pairs = P, .num_experts = E, .n = sh.hidden, .k = sh.inter, .y = down.get()};
    EXPECT_EQ(cuda::grouped_gemm(dt, g, nullptr), 0);
    g.y = down_act.get();
    g.y_act = true;
    EXPECT_EQ(cuda::grouped_gemm(dt, g, nullptr), 0);
    return {silu.download(), down.download(), down_act.download()};
  }
};

// Every tile gives the 32-row tile's bits: an output is the same chain of m16n8k16 mma
// instructions whatever the tile (K in 64-wide slices, each in ascending 16-wide steps, one fp32
// accumulator per output), and an mma's result for one output depends on its row of A, its column
// of B and its accumulator only; the epilogues round the same fp32 values the same way.
TEST_F(CudaMoeTiles, LargerTilesGiveTheBitsOfThe32RowTile) {
  std::mt19937 rng(41);
  const int E = int(rows_per_expert.size());
  std::vector<int32_t> experts;
  for (int e = 0; e < E; ++e) experts.insert(experts.end(), size_t(rows_per_expert[size_t(e)]), e);
  std::shuffle(experts.begin(), experts.end(), rng);  // experts' pairs interleaved over the tokens
  const int P = int(experts.size()), tokens = (P + kTopK - 1) / kTopK;
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16}) {
    for (const expert_shape& sh : expert_shapes) {
      const std::string what = std::string(dt == act_dtype::bf16 ? "bf16, " : "fp16, ") + sh.name;
      SCOPED_TRACE(what);
      const dev_vec<uint16_t> x(random_act_bits(dt, size_t(tokens) * sh.hidden, rng()));
      const dev_vec<uint16_t> act(random_act_bits(dt, size_t(P) * sh.inter, rng()));
      // gate/up's [E][2 * inter][hidden]; down reads the first E * hidden * inter of them as its
      // [E][hidden][inter]. Generated on the device: Mixtral's take 2.8 GB.
      const size_t w_elems = size_t(E) * 2 * sh.inter * sh.hidden;
      dev_vec<uint16_t> w(w_elems);
      ASSERT_EQ(cuda::fill_dummy_act(gpu::dummy_fill{.seed = rng(), .tensor_id = 1}, dt, w.get(), w_elems, nullptr),
                0);
      const tile_outputs want = run(dt, moe_gemm_tile::m32, experts, E, sh, x, act, w);
      // Every output of the 32-row tile written and finite, so a row or column another tile
      // leaves unwritten (poisoned: NaN) shows as a difference.
      for (uint16_t v : want.silu) ASSERT_TRUE(std::isfinite(from_act_bits(dt, v)));
      for (float v : want.down) ASSERT_TRUE(std::isfinite(v));
      for (uint16_t v : want.down_act) ASSERT_TRUE(std::isfinite(from_act_bits(dt, v)));
      for (moe_gemm_tile tile : {moe_gemm_tile::m64, moe_gemm_tile::m128}) {
        if (cuda::moe_tile_rows(tile) > cuda::moe_tile_rows(cuda::largest_moe_gemm_tile())) {
          std::printf("m%d: more shared memory than this device gives a block, not run\n", cuda::moe_tile_rows(tile));
          continue;
        }
        const std::string t = ", m" + std::to_string(cuda::moe_tile_rows(tile));
        const tile_outputs got = run(dt, tile, experts, E, sh, x, act, w);
        expect_same_bits(got.silu, want.silu, sh.inter, what + t + ", gate/up with SiLU");
        expect_same_bits(got.down, want.down, sh.hidden, what + t + ", down into fp32");
        expect_same_bits(got.down_act, want.down_act, sh.hidden, what + t + ", down into the activation dtype");
      }
    }
  }
}

}  // namespace
}  // namespace actorserve::testing
