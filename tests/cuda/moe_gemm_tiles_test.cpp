// The grouped GEMM's tile shapes: the choice by the average rows per expert (host code, no
// device needed), and every tile at the experts' shapes of Mixtral-8x7B, Qwen3-30B-A3B,
// DeepSeek-V2-Lite and the fixtures, with experts of rows around and between the tiles' sizes
// and experts of none: the bits of the 32-row tile, and the products of the rounded operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "gpu/cuda/model/dummy_fill.hpp"
#include "gpu/cuda/moe/moe_kernels.hpp"
#include "gpu/model/expert_permutation.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;
using cuda::moe_gemm_tile;

std::string tile_name(moe_gemm_tile t) { return "m" + std::to_string(cuda::moe_tile_rows(t)); }

TEST(MoeGemmTile, TheChoiceFollowsTheAverageRowsPerExpert) {
  std::vector<int> rows;
  for (moe_gemm_tile t : cuda::moe_gemm_tiles) rows.push_back(cuda::moe_tile_rows(t));
  EXPECT_EQ(rows, (std::vector<int>{16, 32, 48, 64, 128}));
  const int m16 = cuda::moe_m16_max_rows_per_expert, m48 = cuda::moe_m48_min_rows_per_expert;
  const int m64 = cuda::moe_m64_min_rows_per_expert, m128 = cuda::moe_m128_min_rows_per_expert;
  // m64 just past m48's rows (one tile where m48 cuts an expert in two), m128 from 64 (moe_tile.hpp).
  ASSERT_EQ(m64, cuda::moe_tile_rows(moe_gemm_tile::m48) + 1);
  ASSERT_EQ(m128, 64);
  ASSERT_LT(m16, m48);
  ASSERT_LT(m48, m64);
  for (int E : {1, 4, 8, 60, 64, 128, 160, 1024}) {
    EXPECT_EQ(cuda::choose_moe_gemm_tile(0, E), moe_gemm_tile::m16) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m16 * E, E), moe_gemm_tile::m16) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m16 * E + 1, E), moe_gemm_tile::m32) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m48 * E - 1, E), moe_gemm_tile::m32) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m48 * E, E), moe_gemm_tile::m48) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m64 * E - 1, E), moe_gemm_tile::m48) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m64 * E, E), moe_gemm_tile::m64) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m128 * E - 1, E), moe_gemm_tile::m64) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m128 * E, E), moe_gemm_tile::m128) << E << " experts";
    EXPECT_EQ(cuda::choose_moe_gemm_tile(m64 * E, E, moe_gemm_tile::m64), moe_gemm_tile::m64) << E << " experts";
  }
  // Decode batches of Qwen3-30B-A3B (top-8 of 128 experts): 128 tokens (8 rows an expert) take the
  // 16-row tile, 192 tokens the 32-row tile, 256 and 512 tokens the 48-row tile.
  EXPECT_EQ(cuda::choose_moe_gemm_tile(128 * 8, 128), moe_gemm_tile::m16);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(192 * 8, 128), moe_gemm_tile::m32);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(256 * 8, 128), moe_gemm_tile::m48);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(512 * 8, 128), moe_gemm_tile::m48);
  // Mixtral-8x7B (top-2 of 8) decoding 196 sequences, 49 rows an expert: one m64 tile an expert;
  // where m64 cannot run, m48 (a decode tile runs on every device).
  EXPECT_EQ(cuda::choose_moe_gemm_tile(196 * 2, 8), moe_gemm_tile::m64);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(196 * 2, 8, moe_gemm_tile::m32), moe_gemm_tile::m48);
  // A prefill chunk of 8,192 tokens takes the 128-row tile on each model: Mixtral-8x7B (top-2 of
  // 8), Qwen3-30B-A3B (top-8 of 128), DeepSeek-V2-Lite (top-6 of 64).
  EXPECT_EQ(cuda::choose_moe_gemm_tile(8192 * 2, 8), moe_gemm_tile::m128);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(8192 * 8, 128), moe_gemm_tile::m128);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(8192 * 6, 64), moe_gemm_tile::m128);
  // No overflow at the most pairs a step has (65,536 tokens x top-32) and the most experts.
  EXPECT_EQ(cuda::choose_moe_gemm_tile(65536 * 32, 1024), moe_gemm_tile::m128);
  // Never past the largest prefill tile the device runs (8.0: m64, 8.6 / 8.9: m32).
  EXPECT_EQ(cuda::choose_moe_gemm_tile(8192 * 2, 8, moe_gemm_tile::m64), moe_gemm_tile::m64);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(8192 * 2, 8, moe_gemm_tile::m32), moe_gemm_tile::m32);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(m64 * 8, 8, moe_gemm_tile::m64), moe_gemm_tile::m64);
  EXPECT_EQ(cuda::choose_moe_gemm_tile(m64 * 8 - 1, 8, moe_gemm_tile::m64), moe_gemm_tile::m48);
  // The decode tiles run on every device; the prefill tiles up to the largest.
  for (moe_gemm_tile t : {moe_gemm_tile::m16, moe_gemm_tile::m32, moe_gemm_tile::m48}) {
    EXPECT_TRUE(cuda::is_decode_moe_tile(t)) << tile_name(t);
    EXPECT_TRUE(cuda::moe_gemm_tile_runs(t, moe_gemm_tile::m32)) << tile_name(t);
  }
  EXPECT_FALSE(cuda::moe_gemm_tile_runs(moe_gemm_tile::m64, moe_gemm_tile::m32));
  EXPECT_TRUE(cuda::moe_gemm_tile_runs(moe_gemm_tile::m64, moe_gemm_tile::m64));
  EXPECT_FALSE(cuda::moe_gemm_tile_runs(moe_gemm_tile::m128, moe_gemm_tile::m64));
  EXPECT_TRUE(cuda::moe_gemm_tile_runs(moe_gemm_tile::m128, moe_gemm_tile::m128));
}

TEST(MoeGemmTile, ThresholdsFromABenchmarkPlaceTheDecodeTiles) {
  // The m48 range switched on, as a decode table would set it: m16 up to 12 rows an expert, m32
  // to 23, m48 from 24 to the prefill tiles, whatever prefill tile the device caps at.
  const cuda::moe_tile_thresholds at{.m16_max = 12, .m48_min = 24, .m64_min = 64, .m128_min = 64};
  for (int E : {8, 64, 128}) {
    EXPECT_EQ(cuda::choose_moe_gemm_tile(12 * E, E, moe_gemm_tile::m128, at), moe_gemm_tile::m16) << E;
    EXPECT_EQ(cuda::choose_moe_gemm_tile(12 * E + 1, E, moe_gemm_tile::m128, at), moe_gemm_tile::m32) << E;
    EXPECT_EQ(cuda::choose_moe_gemm_tile(24 * E - 1, E, moe_gemm_tile::m128, at), moe_gemm_tile::m32) << E;
    EXPECT_EQ(cuda::choose_moe_gemm_tile(24 * E, E, moe_gemm_tile::m128, at), moe_gemm_tile::m48) << E;
    EXPECT_EQ(cuda::choose_moe_gemm_tile(64 * E - 1, E, moe_gemm_tile::m32, at), moe_gemm_tile::m48) << E;
    EXPECT_EQ(cuda::choose_moe_gemm_tile(64 * E, E, moe_gemm_tile::m128, at), moe_gemm_tile::m128) << E;
    EXPECT_EQ(cuda::choose_moe_gemm_tile(64 * E, E, moe_gemm_tile::m32, at), moe_gemm_tile::m32) << E;
  }
  // Qwen3-30B-A3B at batch 500 (31.25 rows an expert) would take m48.
  EXPECT_EQ(cuda::choose_moe_gemm_tile(500 * 8, 128, moe_gemm_tile::m128, at), moe_gemm_tile::m48);
}

/// Rows routed to each expert: around and between the tiles' sizes, experts of none among them.
const std::vector<int> rows_per_expert = {1,  7,  0,  15, 16, 17, 31, 32,  33,  47,  48,
                                          49, 63, 64, 65, 127, 0, 128, 129, 300, 1000};
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

/// Each tile shape the device runs (the others skipped, naming why).
class CudaMoeTile : public ::testing::TestWithParam<moe_gemm_tile> {
 protected:
  void SetUp() override {
    AS_REQUIRE_CUDA();
    if (!cuda::moe_gemm_tile_runs(GetParam(), cuda::largest_moe_gemm_tile()))
      GTEST_SKIP() << tile_name(GetParam()) << ": more shared memory than this device gives a block";
  }

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

/// Every pair of the rows_per_expert routing: expert e's pairs, shuffled over the tokens.
std::vector<int32_t> awkward_routes(std::mt19937& rng) {
  std::vector<int32_t> experts;
  for (size_t e = 0; e < rows_per_expert.size(); ++e) experts.insert(experts.end(), size_t(rows_per_expert[e]), int32_t(e));
  std::shuffle(experts.begin(), experts.end(), rng);  // experts' pairs interleaved over the tokens
  return experts;
}

std::string dtype_name(act_dtype dt) { return dt == act_dtype::bf16 ? "bf16" : "fp16"; }

// Every tile gives the 32-row tile's bits: an output is the same chain of m16n8k16 mma
// instructions whatever the tile (K in 64-wide slices, each in ascending 16-wide steps, one fp32
// accumulator per output), and an mma's result for one output depends on its row of A, its column
// of B and its accumulator only; the epilogues round the same fp32 values the same way.
TEST_P(CudaMoeTile, GivesTheBitsOfThe32RowTile) {
  const moe_gemm_tile tile = GetParam();
  if (tile == moe_gemm_tile::m32) GTEST_SKIP() << "m32 is the reference";
  std::mt19937 rng(41);
  const int E = int(rows_per_expert.size());
  const std::vector<int32_t> experts = awkward_routes(rng);
  const int P = int(experts.size()), tokens = (P + kTopK - 1) / kTopK;
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16}) {
    for (const expert_shape& sh : expert_shapes) {
      const std::string what = dtype_name(dt) + ", " + sh.name + ", " + tile_name(tile);
      SCOPED_TRACE(what);
      const dev_vec<uint16_t> x(random_act_bits(dt, size_t(tokens) * sh.hidden, rng()));
      const dev_vec<uint16_t> act(random_act_bits(dt, size_t(P) * sh.inter, rng()));
      // gate/up's [E][2 * inter][hidden]; down reads the first E * hidden * inter of them as its
      // [E][hidden][inter]. Generated on the device: Mixtral's take 4.9 GB.
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
      const tile_outputs got = run(dt, tile, experts, E, sh, x, act, w);
      expect_same_bits(got.silu, want.silu, sh.inter, what + ", gate/up with SiLU");
      expect_same_bits(got.down, want.down, sh.hidden, what + ", down into fp32");
      expect_same_bits(got.down_act, want.down_act, sh.hidden, what + ", down into the activation dtype");
    }
  }
}

/// Row r's products x_r . W_e[c] over the rounded operands in double, for c < N, where row r
/// reads x row row_of(r) and expert e = expert_of[r]; W_e is [N][K] at w + e * w_stride.
std::vector<double> host_products(act_dtype dt, const std::vector<uint16_t>& x, const std::vector<int32_t>& row_of,
                                  const std::vector<uint16_t>& w, size_t w_stride,
                                  const std::vector<int32_t>& expert_of, int N, int K) {
  const auto to_double = [&](const std::vector<uint16_t>& bits) {
    std::vector<double> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) v[i] = from_act_bits(dt, bits[i]);
    return v;
  };
  const std::vector<double> xd = to_double(x), wd = to_double(w);
  std::vector<double> out(row_of.size() * size_t(N));
  for (size_t r = 0; r < row_of.size(); ++r)
    for (int c = 0; c < N; ++c) {
      const double* xr = &xd[size_t(row_of[r]) * K];
      const double* wr = &wd[size_t(expert_of[r]) * w_stride + size_t(c) * K];
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += xr[k] * wr[k];
      out[r * N + c] = acc;
    }
  return out;
}

// Each tile against the products of its rounded operands, on the fixtures' expert sizes (small
// enough for the host) with experts of 0, 1, 15, 16, 17, 31, 33, 47, 49 ... rows: gate/up with
// SiLU into the activation dtype, down into fp32 and into the activation dtype, both dtypes.
TEST_P(CudaMoeTile, MatchesTheProductsOfItsRoundedOperands) {
  const moe_gemm_tile tile = GetParam();
  std::mt19937 rng(47);
  const int E = int(rows_per_expert.size());
  const std::vector<int32_t> experts = awkward_routes(rng);
  const int P = int(experts.size()), tokens = P / kTopK;
  gpu::expert_permutation host;
  gpu::permute_by_expert(experts, size_t(kTopK), size_t(E), host);
  std::vector<int32_t> expert_of(static_cast<size_t>(P)), identity(static_cast<size_t>(P));
  for (int e = 0; e < E; ++e) std::fill(expert_of.begin() + host.offsets[e], expert_of.begin() + host.offsets[e + 1], e);
  std::iota(identity.begin(), identity.end(), 0);
  for (act_dtype dt : {act_dtype::bf16, act_dtype::fp16}) {
    for (const expert_shape& sh : expert_shapes) {
      if (sh.hidden > 256) continue;  // the models' sizes: GivesTheBitsOfThe32RowTile
      const std::string what = dtype_name(dt) + ", " + sh.name + ", " + tile_name(tile);
      SCOPED_TRACE(what);
      const auto xb = random_act_bits(dt, size_t(tokens) * sh.hidden, rng());
      const auto ab = random_act_bits(dt, size_t(P) * sh.inter, rng());
      const auto wb = random_act_bits(dt, size_t(E) * 2 * sh.inter * sh.hidden, rng(), 0.25f);
      const dev_vec<uint16_t> x(xb), act(ab), w(wb);
      const tile_outputs got = run(dt, tile, experts, E, sh, x, act, w);
      // gate/up: rows [0, inter) of expert e's [2 * inter][hidden] are gate, the rest up.
      const auto gate_up = host_products(dt, xb, host.source_token, wb, size_t(2) * sh.inter * sh.hidden, expert_of,
                                         2 * sh.inter, sh.hidden);
      std::vector<float> want_silu(size_t(P) * sh.inter);
      for (size_t r = 0; r < size_t(P); ++r)
        for (int c = 0; c < sh.inter; ++c) {
          const float g = round_act(dt, float(gate_up[r * 2 * sh.inter + c]));
          const float u = round_act(dt, float(gate_up[r * 2 * sh.inter + sh.inter + c]));
          want_silu[r * sh.inter + c] = round_act(dt, g / (1.0f + std::exp(-g)) * u);
        }
      const auto down = host_products(dt, ab, identity, wb, size_t(sh.hidden) * sh.inter, expert_of, sh.hidden,
                                      sh.inter);
      const std::vector<float> want_down(down.begin(), down.end());
      std::vector<float> silu(got.silu.size()), down_act(got.down_act.size());
      for (size_t i = 0; i < silu.size(); ++i) silu[i] = from_act_bits(dt, got.silu[i]);
      for (size_t i = 0; i < down_act.size(); ++i) down_act[i] = from_act_bits(dt, got.down_act[i]);
      // fp32 sums in another order than the host's; a 16-bit output one rounding off (down), or
      // three (gate, up and the SiLU product) where a sum lies near a rounding boundary.
      const bool bf16 = dt == act_dtype::bf16;
      EXPECT_LT(rel_max_err(got.down, want_down), 1e-4) << "down into fp32";
      EXPECT_LT(rel_max_err(down_act, want_down), bf16 ? 8e-3 : 1e-3) << "down into the activation dtype";
      EXPECT_LT(rel_max_err(silu, want_silu), bf16 ? 1.6e-2 : 2e-3) << "gate/up with SiLU";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryTile, CudaMoeTile, ::testing::ValuesIn(cuda::moe_gemm_tiles),
                         [](const ::testing::TestParamInfo<moe_gemm_tile>& info) { return tile_name(info.param); });

}  // namespace
}  // namespace actorserve::testing
