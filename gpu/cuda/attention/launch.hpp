#pragma once
/// Device-side arguments and launchers of the attention backends' kernels (plain C++17: included
/// by .cu files). Work lists are built on the host (backend.hpp) and read on the device, so a
/// captured CUDA graph replays with new lists at the same addresses.
///
/// The KV cache of one layer is [num_blocks, block_size, num_kv_heads, head_dim] of the
/// activation dtype for K and for V (what rope_kv_write fills); every kernel here reads it
/// through the block table, one 16-byte row chunk per copy.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::gpu::cuda {

/// What attn_launch::q16 holds: the queries times the softmax scale and log2(e) (the kernels
/// keep scores in log2 units, as their own staging of fp32 q does).
inline float prefill_q_scale(float scale) { return scale * 1.4426950408889634f; }


/// KV tokens per pipeline stage of the flash-decoding decode kernel (split chunks are multiples).
inline constexpr int fd_kv_tile = 64;
/// Pipeline stages of the flash-decoding decode kernel.
inline constexpr int fd_stages = 3;
/// Most split-K pieces one decode step may have (the H200 has 528 resident decode slots) and
/// most query rows (query tokens x heads of one KV group) a split merge weighs: the merge keeps
/// rows x pieces weights in shared memory (the decode kernels' stages, the separate merge's).
inline constexpr int max_split_pieces = 2048;
inline constexpr int max_merge_rows = 8;
/// Rows of one partial slot of the tensor-core kernels (a decode piece or a cascade member: the
/// query heads of one KV group, at most max_merge_rows).
inline constexpr int tc_partial_rows = max_merge_rows;
/// Query rows (group members x heads of one KV group) of one cascade prefix item: the mma.sync
/// pass's four warps of 16, the wgmma pass's two warpgroups of 64.
inline constexpr int cascade_prefix_rows = 64;
inline constexpr int cascade_prefix_wgmma_rows = 128;
/// Tokens one warp of the vLLM-style kernel takes per step (a 16-token block).
inline constexpr int vllm_warp_tokens = 16;

/// Query rows (tokens x heads of one KV group) of one tensor-core prefill tile.
inline constexpr int tc_prefill_rows = 64;
/// Keys per K/V tile of every tensor-core prefill kernel (a windowed item starts at a multiple).
inline constexpr int tc_prefill_key_tile = 64;

/// Head dims the tensor-core kernels are built for; others go through paged_attention.
inline constexpr bool tc_head_dim_supported(int d) { return d == 64 || d == 128; }

/// Flash-decoding decode kernel `k` over items [counts[0], counts[0] + counts[2]), the MMAs taking
/// the keys as M (warp_keys.cuh): a KV group of more than 8 query heads is cudaErrorInvalidValue.
int launch_fd_decode(act_dtype dt, const attn_launch& a, decode_kernel k, cudaStream_t s);
/// vLLM-style (warp per block) decode kernel over the same decode items.
int launch_vllm_decode(act_dtype dt, const attn_launch& a, cudaStream_t s);
/// Tensor-core causal prefill over items [0, counts[0]) with the kernel `k` resolves to
/// (effective_prefill_kernel, prefill_wgmma.hpp).
int launch_tc_prefill(act_dtype dt, const attn_launch& a, prefill_kernel k, cudaStream_t s);
/// Cascade prefix pieces, items [counts[0] + counts[2], + counts[3]): each member's query heads
/// over the item's keys, the members gathered as the rows of one tensor-core tile (no causal
/// mask: every member sees the whole prefix); each member's normalised partial and log2-sum-exp
/// go to its slot (attn_prefix_row::partial), merged by launch_lse_combine.
/// Items of up to cascade_prefix_rows rows on mma.sync, or (wgmma) of up to
/// cascade_prefix_wgmma_rows on Hopper's warpgroup MMAs (cascade_prefix_wgmma_kernel.cu).
int launch_cascade_prefix(act_dtype dt, const attn_launch& a, bool wgmma, cudaStream_t s);
int launch_cascade_prefix_wgmma(act_dtype dt, const attn_launch& a, cudaStream_t s);
/// Log-sum-exp merge of split decode pieces (counts[1] combines).
int launch_lse_combine(act_dtype dt, const attn_launch& a, cudaStream_t s);

/// Resident CTAs per SM of a decode kernel (0 on error); `kv_fp8` picks the FP8-cache kernel,
/// else `vllm` the vLLM-style kernel, else `tma` the TMA flash-decoding kernel over the cp.async one.
int decode_ctas_per_sm(act_dtype dt, int head_dim, bool vllm, bool tma, bool kv_fp8);

}  // namespace actorserve::gpu::cuda
