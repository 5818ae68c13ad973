#pragma once
/// The grouped expert GEMM's tile shapes and the choice among them, and the choice between the
/// grouped GEMM and one cuBLAS GEMM per expert (plain C++: no CUDA header, so the choices are
/// tested on any machine). A tile is named by its rows: permuted (token, slot) rows routed to one
/// expert, which each expert's rows are cut into.

namespace actorserve::gpu::cuda {

/// m32: 32 rows x 128 weight rows a CTA, for decode-sized batches (a few hundred tokens x top-8
/// over 128 experts give ~30 rows an expert, so a small tile wastes little). m64 and m128: 64 and
/// 128 rows x 256 weight rows, for prefill, where an expert has hundreds of rows and a larger
/// tile reads each operand byte into shared memory for more products.
enum class moe_gemm_tile { m32, m64, m128 };

/// Rows of one tile of shape `t`.
constexpr int moe_tile_rows(moe_gemm_tile t) {
  return t == moe_gemm_tile::m32 ? 32 : t == moe_gemm_tile::m64 ? 64 : 128;
}

/// Average routed rows per expert from which a grouped GEMM takes m64, and from which it takes
/// m128. Measured (`bench_cuda_kernels --only moe`, H100, bench/results/moe.md): from 64 rows an
/// expert m128 is the fastest tile on Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V2-Lite (or within
/// 6 % of m64), and m32 below; so m64 runs only where the device's shared memory caps the tile at
/// m64 (largest_moe_gemm_tile).
inline constexpr int moe_m64_min_rows_per_expert = 64;
inline constexpr int moe_m128_min_rows_per_expert = 64;

static_assert(moe_m64_min_rows_per_expert <= moe_m128_min_rows_per_expert, "larger tiles for more rows");

/// The tile of a grouped GEMM over `num_pairs` routed rows of `num_experts` experts, at most
/// `largest` (the largest whose shared memory the device gives a block: largest_moe_gemm_tile).
/// The rows per expert are known on the device only (the routing); the host knows their average.
constexpr moe_gemm_tile choose_moe_gemm_tile(int num_pairs, int num_experts,
                                             moe_gemm_tile largest = moe_gemm_tile::m128) {
  const long long pairs = num_pairs, experts = num_experts > 0 ? num_experts : 1;
  const moe_gemm_tile by_rows = pairs >= moe_m128_min_rows_per_expert * experts ? moe_gemm_tile::m128
                                : pairs >= moe_m64_min_rows_per_expert * experts ? moe_gemm_tile::m64
                                                                                 : moe_gemm_tile::m32;
  return moe_tile_rows(by_rows) <= moe_tile_rows(largest) ? by_rows : largest;
}

/// Average routed rows per expert of a chunk from which moe_ffn runs the experts' products as one
/// cuBLAS GEMM per expert (gate/up, then down) instead of the grouped GEMM, outside CUDA graph
/// capture: there cuBLAS's kernels run the large products faster, for the price of a host round
/// trip a layer (the experts' row offsets) and a launch per expert. Measured (`bench_cuda_kernels
/// --only moe`, H100, bench/results/moe.md), cuBLAS over grouped for a whole routed FFN: Mixtral-8x7B
/// 0.54x at 256 rows, 0.43x at 1,024; DeepSeek-V2-Lite 1.06x at 384, 0.88x at 576; Qwen3-30B-A3B
/// (128 small experts) 1.15x at 512, its most in a chunk of 8,192 tokens. 576 is the smallest
/// measured count at which every model gains; cuda_tuning::moe_cublas_min_rows_per_expert
/// overrides it.
inline constexpr int moe_cublas_min_rows_per_expert = 576;

/// Whether a chunk of `num_pairs` routed rows over `num_experts` experts reaches `min_rows` rows an
/// expert on average (0: every chunk does; the quantity choose_moe_gemm_tile reads).
constexpr bool reaches_moe_cublas_rows(int num_pairs, int num_experts, int min_rows) {
  const long long experts = num_experts > 0 ? num_experts : 1;
  return static_cast<long long>(num_pairs) >= static_cast<long long>(min_rows) * experts;
}

}  // namespace actorserve::gpu::cuda
