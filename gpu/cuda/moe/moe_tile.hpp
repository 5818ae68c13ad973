#pragma once
/// The grouped expert GEMM's tile shapes and the choice among them, and the choice between the
/// grouped GEMM and one cuBLAS GEMM per expert (plain C++: no CUDA header, so the choices are
/// tested on any machine). A tile is named by its rows: permuted (token, slot) rows routed to one
/// expert, which each expert's rows are cut into.

namespace actorserve::gpu::cuda {

/// Decode tiles, for batches of a few dozen rows an expert at most, where the GEMM streams the
/// selected experts' weights once and its products are few: m16 (16 rows x 128 weight rows) for
/// experts of up to ~12 rows, which m32 would leave at least half empty; m32 (32 rows x 128
/// weight rows); m48 (48 rows x 128 weight rows) for ~20-40 rows an expert, which m32 cuts into
/// two tiles whenever an expert has more than 32 (the second one re-reading all of its weights
/// for a few rows). Prefill tiles: m64 and m128, 64 and 128 rows x 256 weight rows, where an
/// expert has hundreds of rows and a larger tile reads each operand byte into shared memory for
/// more products; m64 also takes the decode batches of 49 to 63 rows an expert, one tile where
/// m48 would give two.
enum class moe_gemm_tile { m16, m32, m48, m64, m128 };

/// Every tile shape, by ascending rows.
inline constexpr moe_gemm_tile moe_gemm_tiles[] = {moe_gemm_tile::m16, moe_gemm_tile::m32, moe_gemm_tile::m48,
                                                   moe_gemm_tile::m64, moe_gemm_tile::m128};

/// Rows of one tile of shape `t`.
constexpr int moe_tile_rows(moe_gemm_tile t) {
  switch (t) {
    case moe_gemm_tile::m16: return 16;
    case moe_gemm_tile::m32: return 32;
    case moe_gemm_tile::m48: return 48;
    case moe_gemm_tile::m64: return 64;
    case moe_gemm_tile::m128: return 128;
  }
  return 32;
}

/// Whether `t` is a decode tile (m16, m32, m48): no more shared memory than any supported device
/// gives a block (99 KB on compute capability 8.6 / 8.9), so it runs wherever the GEMM runs.
constexpr bool is_decode_moe_tile(moe_gemm_tile t) { return moe_tile_rows(t) <= 48; }

/// Whether a device whose largest prefill-capable tile is `largest` (largest_moe_gemm_tile) runs
/// tile `t`: every decode tile, and the prefill tiles of at most `largest`'s rows.
constexpr bool moe_gemm_tile_runs(moe_gemm_tile t, moe_gemm_tile largest) {
  return is_decode_moe_tile(t) || moe_tile_rows(t) <= moe_tile_rows(largest);
}

/// Average routed rows per expert from which a grouped GEMM takes m64, and from which it takes
/// m128. Measured (`bench_cuda_kernels --only moe`, H100, bench/results/moe.md): from 64 rows an
/// expert m128 is the fastest tile on Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V2-Lite (or within
/// 6 % of m64). Between m48's rows and 64, m48 cuts nearly every expert into two tiles, the second
/// re-reading the expert's weights and doubling the products for a few rows; one m64 tile is
/// faster there: at 49 rows an expert (Mixtral-8x7B's decode batch of 196, gate_up + down)
/// 1,015 against 1,040 µs on Mixtral-8x7B and 481 against 508 on Qwen3-30B-A3B.
inline constexpr int moe_m64_min_rows_per_expert = 49;
inline constexpr int moe_m128_min_rows_per_expert = 64;

/// Average routed rows per expert up to which a grouped GEMM takes m16 instead of m32: there an
/// expert's rows fit one 16-row tile but for the tail of the routing, and m32 spends half of its
/// products and A loads on empty rows for the same weight bytes. Measured (`bench_cuda_kernels
/// --only moe`'s decode table, H100, bench/results/moe.md): at 8 rows an expert m16 is 3 %
/// faster than m32 on Qwen3-30B-A3B (264.6 against 272.9 µs for gate_up), at 16 tied.
inline constexpr int moe_m16_max_rows_per_expert = 8;

/// Average routed rows per expert from which a grouped GEMM takes m48 instead of m32, below the
/// prefill tiles. Measured as above: from 16 rows an expert m48 is as fast as m32 or up to 3.5 %
/// faster on every model (Qwen3-30B-A3B gate_up at 32 rows 281.3 against 291.3 µs, Mixtral-8x7B
/// at 16 rows 604.9 against 624.0; DeepSeek-V2-Lite at 24 rows tied).
inline constexpr int moe_m48_min_rows_per_expert = 16;

static_assert(moe_m64_min_rows_per_expert <= moe_m128_min_rows_per_expert, "larger tiles for more rows");
static_assert(moe_m16_max_rows_per_expert < moe_m48_min_rows_per_expert &&
                  moe_m48_min_rows_per_expert <= moe_m64_min_rows_per_expert,
              "m16 below m32, m48 above it and below the prefill tiles");

/// The average rows per expert at which the grouped GEMM changes tile (the constants above, or
/// a benchmark's or test's own).
struct moe_tile_thresholds {
  int m16_max = moe_m16_max_rows_per_expert;   ///< m16 up to this many (inclusive)
  int m48_min = moe_m48_min_rows_per_expert;   ///< m48 from this many, below the prefill tiles
  int m64_min = moe_m64_min_rows_per_expert;
  int m128_min = moe_m128_min_rows_per_expert;
};

/// The tile of a grouped GEMM over `num_pairs` routed rows of `num_experts` experts. The prefill
/// tiles are at most `largest` (the largest whose shared memory the device gives a block:
/// largest_moe_gemm_tile), a decode tile runs on every device. The rows per expert are known on
/// the device only (the routing); the host knows their average.
constexpr moe_gemm_tile choose_moe_gemm_tile(int num_pairs, int num_experts,
                                             moe_gemm_tile largest = moe_gemm_tile::m128,
                                             const moe_tile_thresholds& at = {}) {
  const long long pairs = num_pairs, experts = num_experts > 0 ? num_experts : 1;
  const auto reaches = [&](int rows) { return pairs >= static_cast<long long>(rows) * experts; };
  if (reaches(at.m128_min))
    return moe_tile_rows(moe_gemm_tile::m128) <= moe_tile_rows(largest) ? moe_gemm_tile::m128 : largest;
  if (reaches(at.m64_min))  // one tile for an expert of a few more rows than m48's, where m64 runs
    return moe_tile_rows(moe_gemm_tile::m64) <= moe_tile_rows(largest) ? moe_gemm_tile::m64 : moe_gemm_tile::m48;
  if (pairs <= static_cast<long long>(at.m16_max) * experts) return moe_gemm_tile::m16;
  return reaches(at.m48_min) ? moe_gemm_tile::m48 : moe_gemm_tile::m32;
}

/// When moe_ffn runs a chunk's experts as one cuBLAS GEMM per expert (gate/up, then down) instead
/// of the grouped GEMM, outside CUDA graph capture: there cuBLAS's kernels run the large products
/// faster, for the price of a host round trip a layer (the experts' row offsets) and a launch per
/// expert, so it pays where each expert's GEMMs are large. Measured (`bench_cuda_kernels --only
/// moe`, H100, bench/results/moe.md), cuBLAS over grouped for a whole routed FFN, against rows an
/// expert x inter x hidden: Mixtral-8x7B (14,336 x 4,096) 0.53x at 256 rows (15 G), 0.48x at 512;
/// DeepSeek-V2-Lite (1,408 x 2,048) 1.04x at 384 (1.1 G), 0.87x at 576 (1.7 G); Qwen3-30B-A3B
/// (768 x 2,048) 1.15x at 512 (0.8 G). So cuBLAS from moe_cublas_min_expert_macs multiply-adds
/// an expert's row block x its matrix, and never below moe_cublas_min_rows_floor rows an expert
/// (the fewest measured).
inline constexpr long long moe_cublas_min_expert_macs = 1'400'000'000;
inline constexpr int moe_cublas_min_rows_floor = 256;

/// The rows an expert from which a model's chunk takes the cuBLAS path by default: Mixtral-8x7B
/// 256, DeepSeek-V2-Lite 486, Qwen3-30B-A3B 891.
constexpr int moe_cublas_min_rows_for(int inter, int hidden) {
  const long long per_row = static_cast<long long>(inter > 0 ? inter : 1) * (hidden > 0 ? hidden : 1);
  const long long rows = (moe_cublas_min_expert_macs + per_row - 1) / per_row;
  return static_cast<int>(rows > moe_cublas_min_rows_floor ? (rows < (1 << 30) ? rows : 1 << 30) : moe_cublas_min_rows_floor);
}

/// cuda_tuning::moe_cublas_min_rows_per_expert's default: moe_cublas_min_rows_for the model's
/// experts (a count of 0 or more overrides it).
inline constexpr int moe_cublas_rows_by_expert_size = -1;

/// Whether a chunk of `num_pairs` routed rows over `num_experts` experts reaches `min_rows` (0 or
/// more) rows an expert on average (0: every chunk does; the quantity choose_moe_gemm_tile reads).
constexpr bool reaches_moe_cublas_rows(int num_pairs, int num_experts, int min_rows) {
  const long long experts = num_experts > 0 ? num_experts : 1;
  return static_cast<long long>(num_pairs) >= static_cast<long long>(min_rows) * experts;
}

}  // namespace actorserve::gpu::cuda
