#include "gpu/cuda/moe/cublas_lanes.hpp"

#include <algorithm>

namespace actorserve::gpu::cuda {

std::vector<std::vector<moe_cublas_piece>> plan_moe_cublas_lanes(std::span<const int32_t> offsets, int piece_rows,
                                                                 int row_multiple, int lanes) {
  std::vector<std::vector<moe_cublas_piece>> out;
  if (offsets.size() < 2 || piece_rows <= 0) return out;
  const int experts = static_cast<int>(offsets.size()) - 1;
  const long long total = offsets.back();
  const int want = std::max(1, lanes);
  const int multiple = std::max(1, row_multiple);
  const auto rounded_end = [&](const moe_cublas_piece& p) {
    return p.first + (p.rows + multiple - 1) / multiple * multiple;
  };
  // Lane l closes once its rows reach (l + 1) / want of the chunk's and at least row_multiple.
  std::vector<moe_cublas_piece> lane;
  long long done = 0, lane_rows = 0;
  for (int e = 0; e < experts; ++e) {
    for (int r0 = offsets[e]; r0 < offsets[e + 1]; r0 += piece_rows) {
      const moe_cublas_piece p{.expert = e, .first = r0, .rows = std::min(piece_rows, offsets[e + 1] - r0)};
      lane.push_back(p);
      done += p.rows;
      lane_rows += p.rows;
      const bool last_lane = static_cast<int>(out.size()) + 1 >= want;
      if (!last_lane && lane_rows >= multiple && done * want >= total * static_cast<long long>(out.size() + 1)) {
        out.push_back(std::move(lane));
        lane.clear();
        lane_rows = 0;
      }
    }
  }
  if (!lane.empty()) out.push_back(std::move(lane));
  // Each lane's tail from its first piece whose rounding passes the lane's last row moves to the
  // front of the next lane (the pieces after such a piece too: its rounding writes their rows),
  // until none passes the lane's new last row.
  for (size_t l = 0; l + 1 < out.size(); ++l) {
    std::vector<moe_cublas_piece>& here = out[l];
    std::vector<moe_cublas_piece>& next = out[l + 1];
    while (!here.empty()) {
      const int end = here.back().first + here.back().rows;
      const auto over = std::find_if(here.begin(), here.end(),
                                     [&](const moe_cublas_piece& p) { return rounded_end(p) > end; });
      if (over == here.end()) break;
      next.insert(next.begin(), over, here.end());
      here.erase(over, here.end());
    }
  }
  std::erase_if(out, [](const std::vector<moe_cublas_piece>& l) { return l.empty(); });
  return out;
}

}  // namespace actorserve::gpu::cuda
