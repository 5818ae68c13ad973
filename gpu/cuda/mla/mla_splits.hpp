#pragma once
/// Host-only choices of how latent_attention (mla_kernels.hpp) cuts a decode step into CTAs, and
/// the kernel's shape constants they depend on (no CUDA calls: unit-tested without a GPU).
namespace actorserve::gpu::cuda {

/// Most context splits of one token's attention (the partial buffers' depth).
inline constexpr int mla_max_splits = 16;
/// Heads a CTA of latent_attention takes (a head group: ceil(H / mla_heads_per_cta) counters a row).
inline constexpr int mla_heads_per_cta = 16;
/// Head groups of num_heads heads: the CTAs a row takes in one split (and its split counters).
constexpr int mla_head_groups(int num_heads) { return (num_heads + mla_heads_per_cta - 1) / mla_heads_per_cta; }
/// Resident latent_attention CTAs an SM holds (its shared memory at V2's 576-wide latent: two
/// stages of 32 keys plus the query); latent_attention_kernel.cu asserts it.
inline constexpr int mla_ctas_per_sm = 2;
/// Fewest keys of a split piece: a row's context is cut into at most ceil(context / this) pieces
/// (whole 32-key tiles), so that the pieces' partials and merge never outweigh their key reads.
/// One tile: a single stream's short contexts (128 to 384 keys) in as many CTAs as tiles, each
/// CTA's path one tile long; at 256 a single stream's CTAs each walked 8 tiles in turn (batch 1 x
/// 1,100 keys 42 µs a launch against 23 µs with pieces of 69 keys before).
inline constexpr int mla_min_piece = 32;

/// How many context splits latent_attention takes for n rows of num_heads heads on num_sms SMs:
/// with C = n x ceil(num_heads / mla_heads_per_cta) CTAs a split and S = num_sms x
/// mla_ctas_per_sm resident slots, no split once C fills two waves (2 S); otherwise the fewest
/// splits s whose C x s CTAs keep at least 80 % of the slots of their waves busy
/// (C s / (ceil(C s / S) S) >= 0.8), or, where none does, the most allowed: at most
/// mla_max_splits and max_partial_rows / n (the partial buffers' rows). The kernel cuts a short
/// context into fewer pieces (mla_min_piece), so the rule needs no context length and a captured
/// step replays at any.
int mla_num_splits(int n, int num_heads, int num_sms, int max_partial_rows);

/// Fewest splits whose pieces merge within a thread-block cluster (where the GPU runs the
/// cluster merge: attention_tuning::latent_cluster_merge); fewer merge by the last piece's CTA.
/// Measured on an H100 (bench_cuda_mla, context 1,100 to 4,096): the cluster merge took 0.78x
/// the last piece's time at 16 splits (batch 1) and 0.83-0.92x at 7 (batch 32), but 1.2-1.7x at
/// 4 (batches 64 and 196), whose long pieces gain little from a faster merge.
inline constexpr int mla_cluster_min_splits = 7;
constexpr bool mla_merges_in_cluster(bool cluster_merge, int splits) {
  return cluster_merge && splits >= mla_cluster_min_splits;
}

/// Partial rows (one row: a token's heads' sums of one piece) that mla_num_splits can ask for at
/// any step of up to max_rows rows when the buffers are unbounded: max over n of n x splits(n),
/// over the n that split at all (0 where none does).
int mla_partial_rows(int max_rows, int num_heads, int num_sms);

}  // namespace actorserve::gpu::cuda
