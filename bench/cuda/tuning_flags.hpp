#pragma once
// Command-line flags of the CUDA benchmarks that set gpu::cuda_tuning fields (gpu/cuda/tuning.hpp)
// for A/B runs, each named for what it sets:
//   --prefill-kernel automatic|wgmma_tma_persistent|wgmma_cp_async|mma_sync
//   --decode-kernel tma|cp_async            --split-merge last_piece|separate_kernel
//   --prefill-q16 0|1   --fused-decode 0|1   --gate-up-16bit 0|1   --residual-gemm 0|1
//   --q32-decode-only 0|1   --qkv-16bit 0|1   --last-layer-all-rows 0|1
//   --bulk-gemv plain,qkv,gate_up,fp8|none   --bulk-blocks N   --bulk-stages N   --bulk-qkv-pairs 1|2
//   --bulk-fp8-rows 4|8   --bulk-fp8-mma-rows N   --bulk-evict-first 0|1   --cascade-overlap 0|1   --moe-cublas-min-rows N
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu/cuda/tuning.hpp"

namespace actorserve::bench_cuda {

inline const char* name_of(gpu::prefill_kernel k) {
  switch (k) {
    case gpu::prefill_kernel::automatic: return "automatic";
    case gpu::prefill_kernel::wgmma_tma_persistent: return "wgmma_tma_persistent";
    case gpu::prefill_kernel::wgmma_cp_async: return "wgmma_cp_async";
    case gpu::prefill_kernel::mma_sync: return "mma_sync";
  }
  return "?";
}

inline const char* name_of(gpu::decode_kernel k) { return k == gpu::decode_kernel::tma ? "tma" : "cp_async"; }

inline const char* name_of(gpu::split_merge m) {
  return m == gpu::split_merge::last_piece ? "last_piece" : "separate_kernel";
}

/// Exits with a message naming `flag` when `value` is none of `names`; else its index.
template <size_t N>
int pick(const char* flag, const std::string& value, const char* const (&names)[N]) {
  for (size_t i = 0; i < N; ++i)
    if (value == names[i]) return int(i);
  std::fprintf(stderr, "%s: '%s' is not one of", flag, value.c_str());
  for (const char* n : names) std::fprintf(stderr, " %s", n);
  std::fprintf(stderr, "\n");
  std::exit(2);
}

/// Reads the tuning flag at argv[i] (and its value, advancing i) into `t`; false when argv[i] is
/// not one.
inline bool parse_tuning_flag(int& i, int argc, char** argv, gpu::cuda_tuning& t) {
  const std::string flag = argv[i];
  if (flag.rfind("--", 0) != 0 || i + 1 >= argc) return false;
  const std::string v = argv[i + 1];
  const auto flag_is = [&](const char* name) { return flag == name; };
  const auto on = [&] { return pick(flag.c_str(), v, {"0", "1"}) == 1; };
  if (flag_is("--prefill-kernel")) {
    t.attention.prefill = gpu::prefill_kernel(
        pick(flag.c_str(), v, {"automatic", "wgmma_tma_persistent", "wgmma_cp_async", "mma_sync"}));
  } else if (flag_is("--decode-kernel")) {
    t.attention.decode = gpu::decode_kernel(pick(flag.c_str(), v, {"tma", "cp_async"}));
  } else if (flag_is("--split-merge")) {
    t.attention.merge = gpu::split_merge(pick(flag.c_str(), v, {"last_piece", "separate_kernel"}));
  } else if (flag_is("--prefill-q16")) {
    t.attention.prefill_q16 = on();
  } else if (flag_is("--cascade-overlap")) {
    t.attention.cascade_overlap = on();
  } else if (flag_is("--fused-decode")) {
    t.fused_decode = on();
  } else if (flag_is("--gate-up-16bit")) {
    t.gate_up_16bit = on();
  } else if (flag_is("--residual-gemm")) {
    t.residual_gemm = on();
  } else if (flag_is("--q32-decode-only")) {
    t.q32_decode_only = on();
  } else if (flag_is("--qkv-16bit")) {
    t.qkv_16bit = on();
  } else if (flag_is("--last-layer-all-rows")) {
    t.last_layer_all_rows = on();
  } else if (flag_is("--fp8-activations")) {
    t.fp8_activations = on();
  } else if (flag_is("--bulk-gemv")) {
    t.bulk.plain = v.find("plain") != std::string::npos;
    t.bulk.qkv = v.find("qkv") != std::string::npos;
    t.bulk.gate_up = v.find("gate_up") != std::string::npos;
    t.bulk.fp8 = v.find("fp8") != std::string::npos;
  } else if (flag_is("--bulk-blocks")) {
    t.bulk.blocks_per_sm = std::atoi(v.c_str());
  } else if (flag_is("--bulk-stages")) {
    t.bulk.stages = std::atoi(v.c_str());
  } else if (flag_is("--bulk-qkv-pairs")) {
    t.bulk.qkv_pairs = pick(flag.c_str(), v, {"1", "2"}) + 1;
  } else if (flag_is("--bulk-fp8-rows")) {
    t.bulk.fp8_rows = 4 * (pick(flag.c_str(), v, {"4", "8"}) + 1);
  } else if (flag_is("--bulk-fp8-mma-rows")) {
    t.bulk.fp8_mma_min_rows = std::atoi(v.c_str());
  } else if (flag_is("--bulk-evict-first")) {
    t.bulk.evict_first = on();
  } else if (flag_is("--moe-cublas-min-rows")) {
    char* end = nullptr;
    const long rows = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || rows < 0 || rows > 0x7fffffffL) {
      std::fprintf(stderr, "%s: '%s' is not a row count (0 or more)\n", flag.c_str(), v.c_str());
      std::exit(2);
    }
    t.moe_cublas_min_rows_per_expert = static_cast<int>(rows);
  } else {
    return false;
  }
  ++i;
  return true;
}

}  // namespace actorserve::bench_cuda
