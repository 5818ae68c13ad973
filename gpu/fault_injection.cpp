// Test-only fault injection: the decorator behind --inject-step-failures. It works for any
// executor (CPU in CI, CUDA on a GPU) because it only rewrites the step's result.
#include "gpu/fault_injection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace actorserve::gpu {

namespace {

class fault_injecting_executor final : public executor {
 public:
  fault_injecting_executor(std::unique_ptr<executor> inner, std::vector<int64_t> steps)
      : inner_(std::move(inner)), steps_(std::move(steps)) {}

  const executor_info& info() const override { return inner_->info(); }
  bool supports_logit_bias() const override { return inner_->supports_logit_bias(); }
  bool supports_token_masks() const override { return inner_->supports_token_masks(); }

  void submit(step_batch batch, done_fn done) override {
    const uint64_t id = batch.step_id;
    const bool fail = std::find(steps_.begin(), steps_.end(), static_cast<int64_t>(id)) != steps_.end();
    if (!fail) {
      inner_->submit(std::move(batch), std::move(done));
      return;
    }
    // The step still runs, so `done` comes from the executor's own thread as the contract says.
    inner_->submit(std::move(batch), [id, done = std::move(done)](step_result r) {
      r.outcome = make_error(error_code::internal, fmt::format("injected failure at step {}", id));
      r.tokens.clear();
      done(std::move(r));
    });
  }

 private:
  std::unique_ptr<executor> inner_;
  std::vector<int64_t> steps_;
};

}  // namespace

std::unique_ptr<executor> inject_step_failures(std::unique_ptr<executor> inner, std::vector<int64_t> steps) {
  if (steps.empty()) return inner;
  return std::make_unique<fault_injecting_executor>(std::move(inner), std::move(steps));
}

}  // namespace actorserve::gpu
