#pragma once
/// Host-only planning of the per-expert cuBLAS path's concurrency (moe_ffn::run_experts_cublas,
/// docs/moe.md): a chunk's GEMMs, one a piece of an expert's permuted rows, cut into lanes that
/// run side by side on streams of their own, so that one GEMM's last partial wave of tiles, a
/// small piece's few tiles and the gaps between GEMMs leave fewer SMs idle. Plain host code:
/// unit-tested without a GPU.
#include <cstdint>
#include <span>
#include <vector>

namespace actorserve::gpu::cuda {

/// One cuBLAS GEMM of the path: expert `expert`'s permuted rows [first, first + rows).
struct moe_cublas_piece {
  int expert = 0, first = 0, rows = 0;
  bool operator==(const moe_cublas_piece&) const = default;
};

/// The pieces of a chunk whose experts' rows are [offsets[e], offsets[e + 1]) (offsets ascending
/// from 0, one more than the experts), each expert's rows in pieces of at most piece_rows (> 0),
/// cut into at most `lanes` lanes of about equal rows; each lane's pieces in ascending rows.
///
/// A GEMM runs its piece's rows rounded up to `row_multiple` and so writes up to row_multiple - 1
/// rows past the piece: rows of the next pieces, which their own GEMMs write later on the same
/// lane. So a lane's last pieces whose rounded rows would pass the lane's last row go to the
/// front of the next lane (before that lane's own rows: overwritten after), and a lane ends only
/// after at least row_multiple rows, so that what moves to it ends inside it; the last lane's
/// rounding reaches the buffers' spare rows. Lanes left empty are dropped: a small chunk takes
/// fewer lanes than asked, and one lane gives every piece in ascending order.
std::vector<std::vector<moe_cublas_piece>> plan_moe_cublas_lanes(std::span<const int32_t> offsets, int piece_rows,
                                                                 int row_multiple, int lanes);

}  // namespace actorserve::gpu::cuda
