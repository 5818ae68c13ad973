#pragma once
/// The CUDA executor's kernel choices on the engine benchmarks' command lines: bench_latency and
/// bench_throughput take bench/cuda/tuning_flags.hpp's flags (--prefill-kernel, --fused-decode,
/// --cascade-overlap, ...) so that one build runs both sides of an A/B; the engine's executor is
/// then made with them (gpu::make_executor(cfg, tuning)).
#include <string>
#include <vector>

#include "config/engine_config.hpp"
#include "config/error.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::bench {

struct tuning_args {
  std::vector<char*> rest;         ///< argv without the tuning flags and their values
  std::vector<std::string> flags;  ///< the tuning flags given, in order
  gpu::cuda_tuning tuning;         ///< cuda_tuning's defaults with those flags applied
};

/// Splits the tuning flags off argv; a bad value exits with a message naming its flag.
tuning_args split_tuning_flags(int argc, char** argv);

/// The flags as one line for messages ("--prefill-kernel --fused-decode").
std::string tuning_flags_text(const tuning_args& t);

/// An error naming the flags when some were given but `cfg` picks the CPU executor (whose
/// kernels they do not choose).
status check_tuning_device(const tuning_args& t, const engine_config& cfg);

}  // namespace actorserve::bench
