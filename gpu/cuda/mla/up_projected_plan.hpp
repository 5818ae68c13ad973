#pragma once
/// Host-only planning of DeepSeek-V2's up-projected prefill (mla_prefill, docs/mla.md): which of
/// a step's prefill chunks share one gather of their contexts into the workspace, and which
/// launches of mla_up_projected_attention cover their queries, each launch's CTAs ordered longest
/// first. Plain host code: unit-tested without a GPU.
#include <cstdint>
#include <span>
#include <vector>

#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/mla/mla_kernels.hpp"

namespace actorserve::gpu::cuda {

/// Context tokens times heads the up-projected workspace holds at least (it holds
/// --max-model-len tokens if more): at V2-Lite's 16 heads 16,384 tokens (176 MiB), the contexts
/// of a step's 1,000-token prompts expanded 16 at a time and attended in one launch of 2,048 CTAs,
/// where a launch a prompt has 128, one wave with most of its SMs idle at the end.
inline constexpr int mla_prefill_group_head_tokens = 16384 * 16;

/// The workspace's context tokens for `heads` heads and contexts of up to max_context tokens.
constexpr int mla_prefill_workspace_tokens(int heads, int max_context) {
  const int group = mla_prefill_group_head_tokens / (heads > 0 ? heads : 1);
  return max_context > group ? max_context : group;
}

/// Sequences [first, first + kv_rows.size()) of the step's up-projected list, whose contexts lie
/// one after another in the workspace (sequence first + i from row kv_rows[i], sequence first at
/// row 0; context_rows in all), and the launches over their queries.
struct mla_up_projected_group {
  int first = 0;
  std::vector<int32_t> kv_rows;
  int context_rows = 0;
  std::vector<mla_up_projected_launch> launches;
};

/// Groups consecutive sequences while their contexts fit `workspace_tokens` rows (a sequence's
/// context never exceeds it: the workspace holds --max-model-len tokens), and cuts each group's
/// queries into launches of at most mla_up_projected_max_pieces pieces and
/// mla_up_projected_max_items CTAs a head (a chunk of more queries than one launch takes becomes
/// several pieces). Sequences without queries take no CTA. Empty for a context past the workspace.
std::vector<mla_up_projected_group> plan_up_projected(std::span<const attn_seq> seqs, int workspace_tokens);

}  // namespace actorserve::gpu::cuda
