#pragma once
// Where two engine runs' greedy tokens may part. The CUDA kernels are not batch-invariant: a
// row's GEMM, GEMV or attention result can round differently with the batch it was computed in
// (cuBLAS picks kernels by shape; a preempted sequence is recomputed by prefill where it was
// decoded; which requests share a step depends on when they arrived). So two runs, or a CPU and
// a CUDA run, may choose different greedy tokens, but only where the reference run itself saw a
// near-tie: with identical contexts up to that token, a wide margin there is an error, not a
// rounding flip. Measured on the H200 (5 repeats): exact-equality versions
// of these tests failed in 5 of 10 runs, each time one request of 200-256. A bf16 hidden state
// that rounds one unit apart moves a logit by several hundredths (one bf16 unit at 8-16 is
// 0.0625): the cascade test's request 1 parted at a margin of 0.054 in 2 of 9 runs on H100 and
// H200, so the near-tie bound is 0.1.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "../engine/engine_harness.hpp"

namespace actorserve::actors::testing {

/// Logprob margin below which a parting counts as a rounding flip (the executor reference
/// tests stop comparing greedy tokens below 5e-2, within one forward pass rather than a run).
inline constexpr float kNearTie = 0.1f;
/// Top logprobs a reference run keeps per token for parting_margin.
inline constexpr int kNearTieTop = 8;

/// Where `got` first differs from the reference `ref` (run with num_logprobs = kNearTieTop):
/// its index and the reference's logprob margin of its own token over got's token there (exact
/// when got's token is in the reference's top list, else a lower bound). index < 0: no parting
/// (equal, or one a prefix of the other).
struct parting {
  int index = -1;
  float margin = 0.0f;
};

inline parting first_parting(const choice_result& ref, const std::vector<int32_t>& got) {
  const auto& a = ref.tokens;
  size_t k = 0;
  while (k < a.size() && k < got.size() && a[k] == got[k]) ++k;
  if (k == a.size() || k == got.size() || k >= ref.logprobs.size() || ref.logprobs[k].top.empty()) return {};
  const logprob_entry& at = ref.logprobs[k];
  float other = at.top.back().second;
  for (const auto& [id, lp] : at.top)
    if (id == got[k]) other = lp;
  return {static_cast<int>(k), at.logprob - other};
}

}  // namespace actorserve::actors::testing
