#include "bench/common/shared_prefix.hpp"

#include <fmt/format.h>

#include <cstring>
#include <random>

#include "bench/common/stats.hpp"

namespace actorserve::bench {

std::vector<int32_t> shared_prefix_ids(int64_t seed, int64_t len, int64_t vocab) {
  std::mt19937_64 rng(static_cast<uint64_t>(seed) ^ 0x9e3779b97f4a7c15ull);
  return random_token_ids(rng, static_cast<int32_t>(len), vocab);
}

std::vector<int32_t> prefixed_prompt(const std::vector<int32_t>& prefix, std::mt19937_64& rng, int32_t len,
                                     int64_t vocab) {
  std::vector<int32_t> ids = prefix;
  const std::vector<int32_t> own = random_token_ids(rng, len, vocab);
  ids.insert(ids.end(), own.begin(), own.end());
  return ids;
}

bool has_flag(int argc, const char* const* argv, const char* flag) {
  const size_t n = std::strlen(flag);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], flag, n) == 0 && (argv[i][n] == 0 || argv[i][n] == '=')) return true;
  return false;
}

status apply_preset(const std::string& name, int argc, const char* const* argv, workload_lengths& w) {
  if (name.empty()) return {};
  if (name != "shared-system-prompt")
    return make_error(error_code::invalid_argument,
                      fmt::format("--preset {}: the presets are shared-system-prompt", name));
  const workload_lengths& p = shared_system_prompt;
  if (!has_flag(argc, argv, "--num-prompts")) w.num_prompts = p.num_prompts;
  if (!has_flag(argc, argv, "--random-prefix-len")) w.prefix_len = p.prefix_len;
  if (!has_flag(argc, argv, "--input-len")) w.input_len = p.input_len;
  if (!has_flag(argc, argv, "--output-len")) w.output_len = p.output_len;
  return {};
}

}  // namespace actorserve::bench
