// Host-side tests of the per-expert cuBLAS path's lanes (gpu/cuda/moe/cublas_lanes.hpp): every
// permuted row in exactly one piece of its own expert, lanes of about equal rows, and no GEMM's
// rounded rows reaching rows that another lane writes. No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gpu/cuda/moe/cublas_lanes.hpp"

namespace actorserve::testing {
namespace {

using gpu::cuda::moe_cublas_piece;
using gpu::cuda::plan_moe_cublas_lanes;
using lanes_t = std::vector<std::vector<moe_cublas_piece>>;

/// Offsets from each expert's row count.
std::vector<int32_t> offsets_of(const std::vector<int>& counts) {
  std::vector<int32_t> off(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), off.begin() + 1);
  return off;
}

/// Checks the plan as the GPU runs it: the lanes run side by side, each its pieces in order, each
/// GEMM writing its rows rounded up to `multiple`. Every row below the chunk's end is written by
/// one lane only, last by the piece that owns it; the pieces tile the rows, each within its
/// expert and at most piece_rows long.
void expect_safe(const lanes_t& lanes, const std::vector<int32_t>& off, int piece_rows, int multiple) {
  const int total = off.back();
  std::vector<int> owner_lane(size_t(total), -1), last_writer(size_t(total), -1), covered(size_t(total), 0);
  int id = 0;
  std::vector<moe_cublas_piece> by_id;
  for (size_t l = 0; l < lanes.size(); ++l) {
    ASSERT_FALSE(lanes[l].empty()) << "lane " << l << " is empty";
    for (const moe_cublas_piece& p : lanes[l]) {
      ASSERT_GT(p.rows, 0);
      ASSERT_LE(p.rows, piece_rows);
      ASSERT_GE(p.first, off[size_t(p.expert)]);
      ASSERT_LE(p.first + p.rows, off[size_t(p.expert) + 1]) << "a piece past its expert's rows";
      for (int r = p.first; r < p.first + p.rows; ++r) ++covered[size_t(r)];
      const int written = (p.rows + multiple - 1) / multiple * multiple;
      for (int r = p.first; r < std::min(total, p.first + written); ++r) {
        if (owner_lane[size_t(r)] >= 0) {
          ASSERT_EQ(owner_lane[size_t(r)], int(l)) << "row " << r << " written by two lanes";
        }
        owner_lane[size_t(r)] = int(l);
        last_writer[size_t(r)] = id;
      }
      by_id.push_back(p);
      ++id;
    }
  }
  for (int r = 0; r < total; ++r) {
    ASSERT_EQ(covered[size_t(r)], 1) << "row " << r;
    const moe_cublas_piece& p = by_id[size_t(last_writer[size_t(r)])];
    ASSERT_TRUE(r >= p.first && r < p.first + p.rows) << "row " << r << " last written by another piece's rounding";
  }
}

int rows_of(const std::vector<moe_cublas_piece>& lane) {
  int n = 0;
  for (const moe_cublas_piece& p : lane) n += p.rows;
  return n;
}

TEST(MoeCublasLanes, DeepSeekV2LiteChunkTakesFourLanesOfAboutEqualRows) {
  // 22,528 tokens x top-6 over 64 experts: 2,112 rows an expert, pieces of 2,048 and 64.
  const std::vector<int32_t> off = offsets_of(std::vector<int>(64, 2112));
  const lanes_t lanes = plan_moe_cublas_lanes(off, 2048, 64, 4);
  ASSERT_EQ(lanes.size(), 4u);
  expect_safe(lanes, off, 2048, 64);
  for (const auto& lane : lanes) {
    EXPECT_NEAR(rows_of(lane), off.back() / 4, 2048);
  }
}

TEST(MoeCublasLanes, UnevenRowsMoveTheRoundingTailToTheNextLane) {
  // Rows not multiples of 64 everywhere: each lane's last piece rounds past its end.
  const std::vector<int32_t> off = offsets_of({700, 13, 1, 999, 0, 0, 301, 45, 2500, 77, 640, 5});
  for (int lanes : {2, 3, 4, 8}) {
    SCOPED_TRACE(lanes);
    const lanes_t plan = plan_moe_cublas_lanes(off, 512, 64, lanes);
    EXPECT_GE(plan.size(), 2u);
    EXPECT_LE(plan.size(), size_t(lanes));
    expect_safe(plan, off, 512, 64);
  }
}

TEST(MoeCublasLanes, OneExpertHoldingMostRowsStillSpreadsByPieces) {
  const std::vector<int32_t> off = offsets_of({10, 16000, 30, 0, 90});
  const lanes_t lanes = plan_moe_cublas_lanes(off, 2048, 64, 4);
  EXPECT_EQ(lanes.size(), 4u);
  expect_safe(lanes, off, 2048, 64);
}

TEST(MoeCublasLanes, SmallChunksAndOneLaneKeepAscendingOrder) {
  // Fewer rows than one rounding: one lane. One lane asked: every piece, in ascending rows.
  const std::vector<int32_t> small = offsets_of({20, 0, 30});
  const lanes_t one = plan_moe_cublas_lanes(small, 2048, 64, 4);
  ASSERT_EQ(one.size(), 1u);
  expect_safe(one, small, 2048, 64);
  const std::vector<int32_t> off = offsets_of({3000, 0, 130, 4097});
  const lanes_t serial = plan_moe_cublas_lanes(off, 2048, 64, 1);
  ASSERT_EQ(serial.size(), 1u);
  const std::vector<moe_cublas_piece> want = {{0, 0, 2048},    {0, 2048, 952},  {2, 3000, 130},
                                              {3, 3130, 2048}, {3, 5178, 2048}, {3, 7226, 1}};
  EXPECT_EQ(serial[0], want);
  EXPECT_TRUE(plan_moe_cublas_lanes(offsets_of({0, 0}), 2048, 64, 4).empty());
}

TEST(MoeCublasLanes, RandomRoutingIsAlwaysSafe) {
  std::mt19937 rng(61);
  for (int trial = 0; trial < 2000; ++trial) {
    const int experts = 1 + int(rng() % 70), piece = 64 * (1 + int(rng() % 8)) + int(rng() % 2) * 7;
    const int multiple = std::vector<int>{1, 16, 64}[rng() % 3], lanes = 1 + int(rng() % 6);
    std::vector<int> counts(static_cast<size_t>(experts));
    for (int& c : counts) c = rng() % 4 == 0 ? 0 : int(rng() % (rng() % 2 ? 90 : 1500));
    const std::vector<int32_t> off = offsets_of(counts);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ", " << experts << " experts, piece " << piece
                                      << ", multiple " << multiple << ", lanes " << lanes);
    const lanes_t plan = plan_moe_cublas_lanes(off, piece, multiple, lanes);
    EXPECT_LE(plan.size(), size_t(lanes));
    if (off.back() == 0) {
      EXPECT_TRUE(plan.empty());
      continue;
    }
    ASSERT_NO_FATAL_FAILURE(expect_safe(plan, off, piece, multiple));
  }
}

}  // namespace
}  // namespace actorserve::testing
