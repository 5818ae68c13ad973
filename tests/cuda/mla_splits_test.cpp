// Host-side tests of latent_attention's split rule (gpu/cuda/mla/mla_splits.hpp): no GPU needed.
// Expected splits are worked out by hand in the comments, on an H100's or H200's 132 SMs of
// mla_ctas_per_sm = 2 resident CTAs (264 slots).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>

#include "gpu/cuda/mla/mla_splits.hpp"

namespace actorserve::testing {
namespace {

using gpu::cuda::mla_max_splits;
using gpu::cuda::mla_num_splits;
using gpu::cuda::mla_partial_rows;

constexpr int kSms = 132;
static_assert(gpu::cuda::mla_ctas_per_sm == 2, "the hand-worked cases below assume 264 slots");

TEST(MlaSplits, FewRowsTakeTheMostSplits) {
  // 1 CTA a split: no split count up to 16 fills 80 % of a wave; the most allowed.
  EXPECT_EQ(mla_num_splits(1, 16, kSms, INT_MAX), mla_max_splits);
  // V2's 128 heads: 8 CTAs a split; 16 x 8 = 128 of 264 is under 80 %, still the most.
  EXPECT_EQ(mla_num_splits(1, 128, kSms, INT_MAX), mla_max_splits);
}

TEST(MlaSplits, MidBatchesFillTheirWaves) {
  // 32 rows: 7 x 32 = 224 of 264 = 84 % (6 x 32 = 192: 72 %).
  EXPECT_EQ(mla_num_splits(32, 16, kSms, INT_MAX), 7);
  // 64 rows: 4 x 64 = 256 of 264 = 96 % (3 x 64 = 192: 72 %).
  EXPECT_EQ(mla_num_splits(64, 16, kSms, INT_MAX), 4);
  // 132 rows: 2 x 132 = 264, one full wave.
  EXPECT_EQ(mla_num_splits(132, 16, kSms, INT_MAX), 2);
  // 196 rows: 196 / 264, 392 / 528 and 588 / 792 are all 74 %; 784 / 792 = 98 %.
  EXPECT_EQ(mla_num_splits(196, 16, kSms, INT_MAX), 4);
  // V2's 128 heads at 8 rows: 64 CTAs a split, 4 x 64 = 256 of 264.
  EXPECT_EQ(mla_num_splits(8, 128, kSms, INT_MAX), 4);
}

TEST(MlaSplits, NoSplitOnceTwoWavesAreFullOrOneWaveFillsWell) {
  // 500 rows: 500 of 528 slots in two waves = 94 %.
  EXPECT_EQ(mla_num_splits(500, 16, kSms, INT_MAX), 1);
  // 528 rows and more: two waves without splitting.
  EXPECT_EQ(mla_num_splits(528, 16, kSms, INT_MAX), 1);
  EXPECT_EQ(mla_num_splits(4096, 16, kSms, INT_MAX), 1);
  // 240 rows: 240 of 264 = 90 %, one wave.
  EXPECT_EQ(mla_num_splits(240, 16, kSms, INT_MAX), 1);
  // 128 heads at 66 rows: 528 CTAs.
  EXPECT_EQ(mla_num_splits(66, 128, kSms, INT_MAX), 1);
}

TEST(MlaSplits, PartialBuffersCapTheSplits) {
  EXPECT_EQ(mla_num_splits(32, 16, kSms, 128), 4);   // 128 / 32 rows of partials a piece
  EXPECT_EQ(mla_num_splits(196, 16, kSms, 256), 1);  // 256 / 196
  EXPECT_EQ(mla_num_splits(1, 16, kSms, 0), 1);      // no partial buffers: one piece
  EXPECT_EQ(mla_num_splits(0, 16, kSms, 256), 1);
}

TEST(MlaSplits, PartialRowsCoverEveryChoiceUpToTheBatch) {
  for (int heads : {16, 20, 128}) {
    const int rows = mla_partial_rows(4096, heads, kSms);
    int most = 0;
    for (int n = 1; n <= 4096; ++n) {
      const int s = mla_num_splits(n, heads, kSms, INT_MAX);
      if (s > 1) most = std::max(most, n * s);
      // Sized by mla_partial_rows, the buffers never change the choice.
      ASSERT_EQ(mla_num_splits(n, heads, kSms, rows), s) << n << " rows, " << heads << " heads";
    }
    EXPECT_EQ(rows, most) << heads << " heads";
    EXPECT_GT(rows, 0);
  }
  // A smaller batch bound needs no more rows than its own steps ask for.
  EXPECT_EQ(mla_partial_rows(1, 16, kSms), mla_max_splits);
  EXPECT_LE(mla_partial_rows(32, 16, kSms), mla_partial_rows(4096, 16, kSms));
}

// The cluster merge takes the many short pieces of small batches (16 splits at batch 1, 7 at 32
// on 132 SMs), not the 4 long ones of batches 64 and 196; never where the GPU lacks it.
TEST(MlaSplits, ClusterMergeFromSevenSplits) {
  using gpu::cuda::mla_merges_in_cluster;
  EXPECT_TRUE(mla_merges_in_cluster(true, mla_num_splits(1, 16, kSms, INT_MAX)));
  EXPECT_TRUE(mla_merges_in_cluster(true, mla_num_splits(32, 16, kSms, INT_MAX)));
  EXPECT_FALSE(mla_merges_in_cluster(true, mla_num_splits(64, 16, kSms, INT_MAX)));
  EXPECT_FALSE(mla_merges_in_cluster(true, mla_num_splits(196, 16, kSms, INT_MAX)));
  EXPECT_FALSE(mla_merges_in_cluster(true, 1));
  EXPECT_FALSE(mla_merges_in_cluster(false, mla_max_splits));
}

}  // namespace
}  // namespace actorserve::testing
