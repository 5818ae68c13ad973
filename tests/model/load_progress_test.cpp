// The weight-load progress: a throttled bar on a terminal, one line per tenth otherwise, and a
// closing line with bytes, time and rate.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gpu/model/load_progress.hpp"
#include "gpu/model/weight_store.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using gpu::load_progress;
using ms = std::chrono::milliseconds;

struct captured {
  std::vector<std::string> redraws, lines;
  load_progress::output output(bool terminal) {
    return {terminal, [this](std::string_view t) { redraws.emplace_back(t); },
            [this](std::string_view t) { lines.emplace_back(t); }};
  }
};

TEST(LoadProgress, PlainOutputLogsOneLinePerTenthWithBytesAndRate) {
  captured c;
  const auto t0 = load_progress::clock::time_point{};
  load_progress p(10'000'000'000, c.output(false), t0);   // 10 GB
  for (int i = 1; i <= 40; ++i) p.advance(250'000'000, t0 + ms(100 * i));   // 4 s at 2.5 GB/s
  ASSERT_EQ(c.lines.size(), 10u);
  EXPECT_TRUE(c.redraws.empty());
  EXPECT_EQ(c.lines[0], "loading weights: 10% (1.0 / 10.0 GB, 2.50 GB/s)");
  EXPECT_EQ(c.lines[9], "loading weights: 100% (10.0 / 10.0 GB, 2.50 GB/s)");
  p.finish("on the GPU", t0 + ms(5000));
  ASSERT_EQ(c.lines.size(), 11u);
  EXPECT_EQ(c.lines[10], "weights loaded: 10.00 GB on the GPU in 5.00 s (2.00 GB/s)");
}

TEST(LoadProgress, ATensorLargerThanATenthLogsOnceForTheTenthsItCrosses) {
  captured c;
  const auto t0 = load_progress::clock::time_point{};
  load_progress p(1000, c.output(false), t0);
  p.advance(50, t0 + ms(1));
  EXPECT_TRUE(c.lines.empty());
  p.advance(300, t0 + ms(2));   // 5 % -> 35 %: one line, at 30 %
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_NE(c.lines[0].find("30%"), std::string::npos) << c.lines[0];
}

TEST(LoadProgress, TerminalBarIsRedrawnAtMostEvery100MsAndClearedAtTheEnd) {
  captured c;
  const auto t0 = load_progress::clock::time_point{};
  load_progress p(4'000'000'000, c.output(true), t0);
  for (int i = 1; i <= 100; ++i) p.advance(10'000'000, t0 + ms(10 * i));   // 1 GB over 1 s
  EXPECT_EQ(c.redraws.size(), 10u);   // every 100 ms
  EXPECT_TRUE(c.lines.empty());       // no log lines while the bar runs
  EXPECT_EQ(c.redraws.back(), "loading weights [#######.......................] 1.0 / 4.0 GB, 1.00 GB/s");
  p.advance(3'000'000'000, t0 + ms(1010));   // complete: drawn at once
  EXPECT_EQ(c.redraws.back(), "loading weights [##############################] 4.0 / 4.0 GB, 3.96 GB/s");
  p.finish("in host memory", t0 + ms(2000));
  EXPECT_EQ(c.redraws.back(), "");   // the bar's line cleared
  ASSERT_EQ(c.lines.size(), 1u);
  EXPECT_EQ(c.lines[0], "weights loaded: 4.00 GB in host memory in 2.00 s (2.00 GB/s)");
}

TEST(LoadProgress, TotalBytesOfAStoreIsWhatAFullLoadReads) {
  auto store = gpu::weight_store::open_dir(model_dir("llama-tiny"));
  ASSERT_TRUE(store.ok()) << store.err().message;
  // llama-tiny is fp32: every parameter is 4 bytes, and the file is little more than its tensors.
  const uint64_t file_bytes = std::filesystem::file_size(model_dir("llama-tiny") + "/model.safetensors");
  EXPECT_GT(store->total_bytes(), file_bytes * 95 / 100);
  EXPECT_LE(store->total_bytes(), file_bytes);
  EXPECT_EQ(store->total_bytes() % 4, 0u);
}

}  // namespace
}  // namespace actorserve::testing
