#pragma once
/// The one-shot kernel of custom_all_reduce: its shared memory layout and launch parameters.
/// Every rank's kernel copies its part into its registered buffer, meets the other ranks at a
/// barrier, reads all N buffers and writes the rank-order sum (or the gathered rows), and meets
/// them again before the buffers are reused.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace actorserve::gpu::cuda::one_shot {

inline constexpr int max_ranks = 8;
/// Blocks per rank at most; the barriers pair block b of every rank.
inline constexpr int max_blocks = 64;
inline constexpr int block_threads = 512;

/// One rank's barrier flags, in its device memory, written by every rank's blocks (peer access).
/// Flags carry the launch's epoch (per block, counted on the device), never a reset, so a CUDA
/// graph that replays the kernel needs no host step between replays.
struct signal_block {
  uint32_t start[max_blocks][max_ranks];  ///< [block][writer rank]: the writer's part is in its buffer
  uint32_t end[max_blocks][max_ranks];    ///< [block][writer rank]: the writer read every buffer
  uint32_t epoch[max_blocks];             ///< launches of this block completed, this rank's only
};

/// Host-mapped words of the whole group (pinned, portable, mapped into every device).
struct control_block {
  uint32_t abort;      ///< set by abort() (host) or by a timed-out wait: every spin ends
  uint32_t timed_out;  ///< set by a wait that exceeded timeout_ns
};

enum class op : int { reduce_sum, gather };

struct params {
  const float* in;                     ///< [n] this rank's part
  float* out;                          ///< reduce_sum: [n] (may be `in`); gather: [num_ranks][n]
  size_t n;
  float* buffers[max_ranks];           ///< [num_ranks]: each rank's registered buffer, [>= round4(n)]
  signal_block* signals[max_ranks];    ///< [num_ranks]: each rank's flags
  control_block* control;              ///< the group's (device pointer of the mapped block)
  uint64_t timeout_ns;                 ///< a barrier wait longer than this fails the group
  int rank, num_ranks;
  op kind;
};

/// Enqueues the kernel on `stream` with `blocks` blocks (the same on every rank for one call);
/// returns the launch's cudaError_t.
int launch(const params& p, int blocks, cudaStream_t stream);

}  // namespace actorserve::gpu::cuda::one_shot
