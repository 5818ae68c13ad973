#pragma once
// One random paged-attention step for the attention tests: a shuffled block pool of bf16/fp16 K/V,
// fp32 queries in the fused-QKV layout, the sequences' block tables, and the causal attention
// over them (with a sliding window when paged_inputs::window is set) computed in double precision
// on the host.
#include <cstdint>
#include <random>
#include <vector>

#include "cuda_test_util.hpp"
#include "gpu/cuda/attention/attention_plan.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::testing {

/// A sequence of the step: `q_len` new tokens at the end of `context_len` cached ones.
struct seq_spec {
  int context_len;
  int q_len;
};

/// The host side of one step; the caches hold activation bits (bf16 or fp16).
struct paged_inputs {
  int num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  int q_stride = 0;   ///< floats between tokens' queries, as in the fused QKV buffer
  int n_tokens = 0;   ///< query rows over all sequences
  std::vector<uint16_t> k_cache, v_cache;
  std::vector<float> q;
  std::vector<cuda::attn_seq> seqs;
  std::vector<int32_t> block_tables;
  /// Sliding window of the reference (0: none): position p sees keys [max(0, p - window + 1), p].
  int window = 0;
};

/// Random inputs for `specs`: blocks drawn from a shuffled pool with 3 unused blocks.
paged_inputs make_paged_inputs(cuda::act_dtype dt, int num_heads, int num_kv_heads, int head_dim, int block_size,
                               const std::vector<seq_spec>& specs, std::mt19937& rng);

/// Causal attention of every query row in double precision, within in.window when set:
/// [n_tokens][num_heads][head_dim].
std::vector<float> reference_attention(cuda::act_dtype dt, const paged_inputs& in);
/// The same over caches given as fp32 values in the layout of in.k_cache / in.v_cache (an FP8
/// cache's dequantized values, code x scale).
std::vector<float> reference_attention(const paged_inputs& in, const std::vector<float>& k_cache,
                                       const std::vector<float>& v_cache);

}  // namespace actorserve::testing
