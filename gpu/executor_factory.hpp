#pragma once
/// The executor factory: picks the device for an engine_config and maps the config to that
/// executor's options. The engine makes every executor through it, at start and after a restart.
#include <cstdint>
#include <memory>

#include "config/engine_config.hpp"
#include "config/error.hpp"
#include "gpu/executor.hpp"

namespace actorserve::gpu {

struct cuda_tuning;  // gpu/cuda/tuning.hpp

/// Whether make_executor picks the CUDA executor for `cfg`: --device cuda, or auto with a
/// visible GPU (always false in a build without CUDA).
bool picks_cuda(const engine_config& cfg);

/// Tokens per KV block of the executor make_executor would make for `cfg`, before any is made.
int64_t block_size_for(const engine_config& cfg);

/// Whether the CUDA executor runs the model of `cfg` at its --max-model-len (config.json read from
/// --model; check_cuda_model_support says what is refused). make_executor asks it before making a
/// CUDA executor.
status check_cuda_support(const engine_config& cfg);

/// Makes the executor `cfg` asks for: --device cpu, or auto without a usable GPU, gets the CPU
/// executor (with --tensor-parallel-size N > 1, N shard executors in an executor_group);
/// --device cuda, or auto with a GPU, the CUDA executor (N > 1: one shard per GPU on GPUs
/// 0..N-1 in an executor_group, refused when fewer are visible). With --inject-step-failures
/// (test only) it is wrapped to fail those steps. Errors name the flag or file.
result<std::unique_ptr<executor>> make_executor(const engine_config& cfg);

/// make_executor with the CUDA executor's kernel choices `tuning` in place of cuda_tuning's
/// defaults (the benchmarks' A/B flags, bench/cuda/tuning_flags.hpp). Refused where `cfg` picks
/// the CPU executor, whose kernels it does not choose.
result<std::unique_ptr<executor>> make_executor(const engine_config& cfg, const cuda_tuning& tuning);

}  // namespace actorserve::gpu
