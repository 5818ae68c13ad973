// The CPU shards' collectives: an all-reduce that adds in rank order and gives every rank the
// same bits, a gather of column slices, and an abort that wakes a rank waiting for the others.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "gpu/parallel/host_collective.hpp"

namespace actorserve::gpu {
namespace {

/// Runs fn(rank) on `size` threads at once and joins them.
template <class Fn>
void on_ranks(int size, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&fn, r] { fn(r); });
  for (auto& t : threads) t.join();
}

TEST(host_collective, all_reduce_adds_in_rank_order_with_the_same_bits_on_every_rank) {
  // 1e8 + 1 rounds back to 1e8 in fp32, so the order of the additions shows in the sum:
  // ((1e8 + 1) - 1e8) + 1 = 1 in rank order; another order gives 0 or 2.
  for (int size : {2, 3, 4}) {
    host_collective c(size);
    const std::vector<float> firsts = {1e8f, 1.0f, -1e8f, 1.0f};
    std::vector<std::vector<float>> bufs(static_cast<size_t>(size), std::vector<float>(5));
    for (int r = 0; r < size; ++r) bufs[r].assign(5, firsts[static_cast<size_t>(r)]);
    on_ranks(size, [&](int r) { c.all_reduce_sum(r, bufs[r].data(), bufs[r].size()); });
    float want = firsts[0];
    for (int r = 1; r < size; ++r) want += firsts[static_cast<size_t>(r)];
    for (int r = 0; r < size; ++r)
      for (float v : bufs[r]) EXPECT_EQ(v, want) << "size " << size << " rank " << r;
    if (size == 4) {
      EXPECT_EQ(want, 1.0f);
    }
  }
}

TEST(host_collective, back_to_back_collectives_of_every_size_agree_with_a_sequential_sum) {
  // Ranks re-enter the next collective while others still leave the last one; sizes below the
  // rank count leave some ranks with no elements of their own to add.
  constexpr int size = 4, rounds = 300;
  host_collective c(size);
  std::vector<std::vector<std::vector<float>>> bufs(size, std::vector<std::vector<float>>(rounds));
  std::vector<std::vector<float>> want(rounds);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-1000.0f, 1000.0f);
  for (int k = 0; k < rounds; ++k) {
    const size_t n = static_cast<size_t>(k % 9);   // 0 .. 8 floats
    for (int r = 0; r < size; ++r) {
      bufs[r][k].resize(n);
      for (auto& x : bufs[r][k]) x = value(rng);
    }
    want[k] = bufs[0][k];
    for (int r = 1; r < size; ++r)
      for (size_t i = 0; i < n; ++i) want[k][i] += bufs[r][k][i];
  }
  on_ranks(size, [&](int r) {
    for (int k = 0; k < rounds; ++k) c.all_reduce_sum(r, bufs[r][k].data(), bufs[r][k].size());
  });
  for (int k = 0; k < rounds; ++k)
    for (int r = 0; r < size; ++r)
      // An empty round (n = 0) has no bytes to compare (and memcmp takes no null pointers).
      ASSERT_TRUE(want[k].empty() ||
                  std::memcmp(bufs[r][k].data(), want[k].data(), want[k].size() * sizeof(float)) == 0)
          << "round " << k << " rank " << r;
}

TEST(host_collective, gather_gives_every_rank_the_whole_rows) {
  // 10 columns over 3 ranks, unevenly: [0, 3), [3, 6), [6, 10); 2 rows.
  constexpr int size = 3;
  constexpr size_t rows = 2, width = 10;
  const shard_slice slices[size] = {{0, 3}, {3, 6}, {6, 10}};
  host_collective c(size);
  std::vector<std::vector<float>> parts(size), outs(size, std::vector<float>(rows * width, -1.0f));
  for (int r = 0; r < size; ++r)
    for (size_t row = 0; row < rows; ++row)
      for (int64_t col = slices[r].begin; col < slices[r].end; ++col)
        parts[r].push_back(static_cast<float>(100 * row + static_cast<size_t>(col)));
  on_ranks(size, [&](int r) { c.gather_columns(r, parts[r].data(), slices[r], rows, width, outs[r].data()); });
  for (int r = 0; r < size; ++r)
    for (size_t row = 0; row < rows; ++row)
      for (size_t col = 0; col < width; ++col)
        EXPECT_EQ(outs[r][row * width + col], static_cast<float>(100 * row + col)) << "rank " << r;
}

TEST(host_collective, abort_wakes_a_rank_waiting_for_the_others_and_fails_later_calls) {
  host_collective c(2);
  std::vector<float> buf(4, 1.0f);
  auto waiting = std::async(std::launch::async, [&] {
    try {
      c.all_reduce_sum(0, buf.data(), buf.size());   // rank 1 never comes
    } catch (const collective_aborted&) {
      return true;
    }
    return false;
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout) << "returned alone";
  c.abort();
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "abort did not wake it";
  EXPECT_TRUE(waiting.get());
  EXPECT_TRUE(c.aborted());
  EXPECT_THROW(c.all_reduce_sum(1, buf.data(), buf.size()), collective_aborted);
  float part = 0, out[2] = {};
  EXPECT_THROW(c.gather_columns(0, &part, {0, 1}, 1, 2, out), collective_aborted);
}

TEST(host_collective, ranks_that_disagree_on_the_size_fail_instead_of_mixing_buffers) {
  host_collective c(2);
  std::vector<float> a(4, 1.0f), b(5, 1.0f);
  std::vector<int> threw(2, 0);
  on_ranks(2, [&](int r) {
    try {
      c.all_reduce_sum(r, r == 0 ? a.data() : b.data(), r == 0 ? a.size() : b.size());
    } catch (const std::logic_error&) {
      threw[r] = 1;
    }
  });
  EXPECT_EQ(threw, (std::vector<int>{1, 1}));
  EXPECT_TRUE(c.aborted());
}

}  // namespace
}  // namespace actorserve::gpu
