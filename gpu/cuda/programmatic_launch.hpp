#pragma once
/// Programmatic dependent launch (sm_90 PDL) of the step's kernels, on by default.
namespace actorserve::gpu::cuda {

/// Whether the step's kernels (embedding, norms, rope, SiLU, the sampler and the GEMV) launch as
/// programmatic dependents of the kernel before them (sm_90 PDL): their blocks are scheduled while
/// that one drains and wait for it before touching its outputs. Process-wide; default on, and
/// off whatever was set where the GPU or the loaded code lacks PDL (compute capability below 9.0,
/// code compiled for an older target: tuning.hpp, runs_pdl).
void set_programmatic_launch(bool on);
bool programmatic_launch();

}  // namespace actorserve::gpu::cuda
