#pragma once
/// The only data tensor-parallel shards exchange, in memory: the all-reduce after each
/// row-parallel stage and the gather of the vocabulary-parallel logits (the collectives NCCL
/// carries between GPUs).
#include <cstddef>
#include <span>

#include "gpu/model/shard_plan.hpp"

namespace actorserve::gpu::cpu {

/// Every buffer of `bufs` (each n floats) becomes their element-wise sum, added in shard order
/// (b0 + b1 + ...), so the result does not depend on timing.
void all_reduce_sum(std::span<float* const> bufs, size_t n);

/// out [rows][sum of widths]: row r is the concatenation of each shard's row r; part s is
/// [rows][slices[s].size()] and lands at columns slices[s].
void gather_columns(std::span<const float* const> parts, std::span<const shard_slice> slices, size_t rows,
                    float* out);

}  // namespace actorserve::gpu::cpu
