#include "gpu/cuda/step/step_profile.hpp"
#include "gpu/cuda/ops/elementwise.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <iterator>

namespace actorserve::gpu::cuda {
namespace {

constexpr int kOps = static_cast<int>(step_op::count);
const char* const kNames[] = {"step inputs (copies)",
                              "embedding",
                              "add_rmsnorm",
                              "qkv gemm",
                              "rope_kv_write",
                              "attention: prefill",
                              "attention: decode (+ merge)",
                              "latent attention (q / latent projections to W_UV)",
                              "o gemm",
                              "routed experts (router to combine)",
                              "gate_up gemm",
                              "silu_and_mul",
                              "down gemm",
                              "all-reduce / gather (tensor parallel)",
                              "lm_head gemm",
                              "sample",
                              "step outputs (copies)"};
static_assert(std::size(kNames) == kOps, "a name for every class");

}  // namespace

step_profile::~step_profile() {
  for (marks& m : slots_)
    for (cudaEvent_t e : m.events) cudaEventDestroy(e);
}

void step_profile::begin(int slot, int tokens, bool decode_only) {
  if (!on_ || slot < 0 || slot > 1) return;
  armed_ = slot;
  slots_[slot].used = 0;
  slots_[slot].ops.clear();
  slots_[slot].tokens = tokens;
  slots_[slot].decode_only = decode_only;
  slots_[slot].pending = false;
  for (double& h : slots_[slot].host_ms) h = 0.0;
}

bool step_profile::record(cudaStream_t s) {
  marks& m = slots_[armed_];
  if (m.used == m.events.size()) {
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) return false;
    m.events.push_back(e);
  }
  return cudaEventRecord(m.events[m.used++], s) == cudaSuccess;
}

void step_profile::mark(step_op op, cudaStream_t s) {
  if (armed_ < 0) return;
  marks& m = slots_[armed_];
  const auto now = std::chrono::steady_clock::now();
  if (!m.ops.empty())
    m.host_ms[static_cast<int>(m.ops.back())] += std::chrono::duration<double, std::milli>(now - m.last).count();
  m.last = now;
  if (record(s)) m.ops.push_back(op);
  else armed_ = -1;  // this step goes unprofiled
}

void step_profile::end(cudaStream_t s) {
  if (armed_ < 0) return;
  marks& m = slots_[armed_];
  if (!m.ops.empty())
    m.host_ms[static_cast<int>(m.ops.back())] +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - m.last).count();
  if (record(s)) m.pending = true;
  armed_ = -1;
}

void step_profile::collect(int slot) {
  if (slot < 0 || slot > 1 || !slots_[slot].pending) return;
  marks& m = slots_[slot];
  m.pending = false;
  double seg[kOps] = {};
  for (size_t i = 0; i + 1 < m.used && i < m.ops.size(); ++i) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, m.events[i], m.events[i + 1]) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    seg[static_cast<int>(m.ops[i])] += ms;
  }
  totals& t = m.decode_only ? decode_only_ : with_prefill_;
  for (int k = 0; k < kOps; ++k) {
    t.ms[k] += seg[k];
    t.host_ms[k] += m.host_ms[k];
  }
  ++t.steps;
  t.tokens += m.tokens;
}

std::string step_profile::totals::table(const char* kind) const {
  if (steps == 0) return {};
  double step = 0.0, host = 0.0;
  for (int k = 0; k < kOps; ++k) {
    step += ms[k];
    host += host_ms[k];
  }
  std::string out = fmt::format(
      "Eager-step profile (--profile-steps), {}: {} steps, {:.0f} rows per step on average\n"
      "| class | GPU ms per step | share | host ms per step (enqueuing) |\n|---|---|---|---|\n",
      kind, steps, double(tokens) / double(steps));
  for (int k = 0; k < kOps; ++k)
    if (ms[k] > 0.0)
      out += fmt::format("| {} | {:.3f} | {:.1f} % | {:.3f} |\n", kNames[k], ms[k] / double(steps),
                         100.0 * ms[k] / step, host_ms[k] / double(steps));
  out += fmt::format("| **whole step** | {:.3f} | | {:.3f} |\n", step / double(steps), host / double(steps));
  return out;
}

std::string step_profile::report() const {
  return with_prefill_.table("steps carrying a prefill") + decode_only_.table("decode-only steps");
}

}  // namespace actorserve::gpu::cuda
