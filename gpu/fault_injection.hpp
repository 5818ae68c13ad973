#pragma once
/// Test-only fault injection (--inject-step-failures): a decorator around any executor that
/// turns the steps with the given global step numbers (step_batch::step_id) into failed steps.
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/executor.hpp"

namespace actorserve::gpu {

/// Wraps `inner` so that each step whose step_id is in `steps` runs as usual but reports an
/// error (and no tokens) to its `done`. An empty `steps` returns `inner` unchanged.
std::unique_ptr<executor> inject_step_failures(std::unique_ptr<executor> inner, std::vector<int64_t> steps);

}  // namespace actorserve::gpu
