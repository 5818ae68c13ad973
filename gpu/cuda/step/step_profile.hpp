#pragma once
// Opt-in GPU time per kernel class of the executor's eager steps (--profile-steps):
// the steps that run without a CUDA graph (every step carrying a prefill; every step with
// --enforce-eager), totalled apart for steps carrying a prefill and decode-only steps. A CUDA event is
// recorded before each class's launches and read when the step completes; the totals go to
// stderr when the executor stops. The events sit between kernels that would otherwise overlap
// through programmatic dependent launch, so a profiled step runs a little slower than an
// unprofiled one; the shares are what the profile is for.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace actorserve::gpu::cuda {

/// The classes of a step's launches, in the order a step runs them.
enum class step_op {
  inputs, embed, norm, qkv, rope, attention, attention_decode, latent_attention, o, experts, gate_up, silu, down,
  all_reduce, lm_head, sample, outputs,
  count
};

class step_profile {
 public:
  step_profile() = default;
  step_profile(const step_profile&) = delete;
  step_profile& operator=(const step_profile&) = delete;
  ~step_profile();

  void enable() { on_ = true; }
  bool on() const { return on_; }
  /// Arms the marks of the step staged into `slot` (0 or 1), which carries `tokens` rows and
  /// no prefill when `decode_only`.
  void begin(int slot, int tokens, bool decode_only);
  /// Starts a segment of class `op` on `s` (nothing unless armed).
  void mark(step_op op, cudaStream_t s);
  /// Closes the armed step's last segment and disarms.
  void end(cudaStream_t s);
  /// Forgets an armed step (a step that failed to launch, or one replayed from a graph).
  void disarm() { armed_ = -1; }
  /// Adds the completed step of `slot` to the totals (after its events completed).
  void collect(int slot);
  /// The totals as Markdown tables, one per kind of step profiled (empty when none was).
  std::string report() const;

 private:
  struct marks {
    std::vector<cudaEvent_t> events;
    std::vector<step_op> ops;  ///< ops[i]: the class of the segment that events[i] starts
    size_t used = 0;
    int tokens = 0;
    bool decode_only = false;
    double host_ms[static_cast<int>(step_op::count)] = {};  ///< host time enqueuing each class
    std::chrono::steady_clock::time_point last;              ///< the host time of the last mark
    bool pending = false;
  };
  /// The totals of one kind of step (carrying a prefill, or decode-only).
  struct totals {
    double ms[static_cast<int>(step_op::count)] = {};
    double host_ms[static_cast<int>(step_op::count)] = {};
    int64_t steps = 0, tokens = 0;
    std::string table(const char* kind) const;
  };
  bool record(cudaStream_t s);

  bool on_ = false;
  int armed_ = -1;
  marks slots_[2];
  totals with_prefill_, decode_only_;
};

}  // namespace actorserve::gpu::cuda
