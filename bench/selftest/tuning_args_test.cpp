// Tests of the engine benchmarks' CUDA kernel choices (bench/common/tuning_args.hpp): the tuning
// flags and their values leave the command line the engine parser sees, set exactly their
// fields, and are refused by name where the CPU executor would run.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/common/tuning_args.hpp"

namespace actorserve {
namespace {

/// argv of `args` (the strings outlive the pointers).
std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> v;
  for (std::string& a : args) v.push_back(a.data());
  return v;
}

TEST(TuningArgs, FlagsLeaveTheCommandLineAndSetTheirFields) {
  std::vector<std::string> args{"bench_throughput", "--model", "/tmp/m", "--prefill-kernel", "mma_sync",
                                "--num-prompts", "4", "--cascade-overlap", "1", "--device", "cuda"};
  auto argv = argv_of(args);
  const bench::tuning_args t = bench::split_tuning_flags(int(argv.size()), argv.data());
  std::vector<std::string> rest(t.rest.begin(), t.rest.end());
  EXPECT_EQ(rest, (std::vector<std::string>{"bench_throughput", "--model", "/tmp/m", "--num-prompts", "4", "--device",
                                            "cuda"}));
  EXPECT_EQ(t.flags, (std::vector<std::string>{"--prefill-kernel", "--cascade-overlap"}));
  EXPECT_EQ(bench::tuning_flags_text(t), "--prefill-kernel --cascade-overlap");
  EXPECT_EQ(t.tuning.attention.prefill, gpu::prefill_kernel::mma_sync);
  EXPECT_TRUE(t.tuning.attention.cascade_overlap);
  // Fields no flag named keep cuda_tuning's defaults.
  const gpu::cuda_tuning defaults;
  EXPECT_EQ(t.tuning.fused_decode, defaults.fused_decode);
  EXPECT_EQ(t.tuning.attention.decode, defaults.attention.decode);
  EXPECT_EQ(t.tuning.bulk.fp8_mma_min_rows, defaults.bulk.fp8_mma_min_rows);
}

TEST(TuningArgs, NoFlagsLeaveArgvAsItIs) {
  std::vector<std::string> args{"bench_latency", "--model", "/tmp/m", "--input-len", "8"};
  auto argv = argv_of(args);
  const bench::tuning_args t = bench::split_tuning_flags(int(argv.size()), argv.data());
  EXPECT_EQ(t.rest, argv);
  EXPECT_TRUE(t.flags.empty());
}

TEST(TuningArgs, RefusedByNameOnTheCpuExecutor) {
  std::vector<std::string> args{"bench_latency", "--fused-decode", "0", "--bulk-fp8-mma-rows", "1"};
  auto argv = argv_of(args);
  const bench::tuning_args t = bench::split_tuning_flags(int(argv.size()), argv.data());
  engine_config cfg;
  cfg.executor.device = device_kind::cpu;
  const status st = bench::check_tuning_device(t, cfg);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code, error_code::invalid_argument);
  EXPECT_NE(st.err().message.find("--fused-decode --bulk-fp8-mma-rows"), std::string::npos) << st.err().message;
  EXPECT_NE(st.err().message.find("--device cuda"), std::string::npos) << st.err().message;
  // Without tuning flags the CPU executor is fine.
  const bench::tuning_args none = bench::split_tuning_flags(1, argv.data());
  EXPECT_TRUE(bench::check_tuning_device(none, cfg));
}

}  // namespace
}  // namespace actorserve
