#pragma once
/// Workloads whose prompts share one prefix (a chat backend's system prompt), for cascade
/// attention (issue #37): the prefix's tokens and --preset shared-system-prompt, used by
/// bench_throughput and bench_serving alike.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "config/error.hpp"

namespace actorserve::bench {

/// What a length preset sets; flags given on the command line keep their values.
struct workload_lengths {
  int64_t num_prompts = 0, prefix_len = 0, input_len = 0, output_len = 0;
};

/// --preset shared-system-prompt: 256 streams behind one 4096-token system prompt, 128-token
/// user turns, 512-token answers (issue #37's end-to-end target).
inline constexpr workload_lengths shared_system_prompt{256, 4096, 128, 512};

/// The prefix every prompt starts with: `len` random ids below `vocab`, from a generator of its
/// own seeded by `seed`, so that the prompts' own tokens do not depend on it.
std::vector<int32_t> shared_prefix_ids(int64_t seed, int64_t len, int64_t vocab);

/// `prefix` followed by `len` random ids below `vocab` drawn from `rng`: one prompt of the workload.
std::vector<int32_t> prefixed_prompt(const std::vector<int32_t>& prefix, std::mt19937_64& rng, int32_t len,
                                     int64_t vocab);

/// Whether `argv` holds `flag`, alone or as flag=value.
bool has_flag(int argc, const char* const* argv, const char* flag);

/// Applies --preset `name` to `w`, except the values whose flags (--num-prompts,
/// --random-prefix-len, --input-len, --output-len) argv gives; an unknown name is an error.
status apply_preset(const std::string& name, int argc, const char* const* argv, workload_lengths& w);

}  // namespace actorserve::bench
