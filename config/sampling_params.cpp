#include "config/sampling_params.hpp"

#include <fmt/format.h>

#include <cmath>

namespace actorserve {
namespace {
error bad(std::string_view field, std::string_view why) {
  return make_error(error_code::invalid_argument, fmt::format("{}: {}", field, why));
}
}  // namespace

status validate(const sampling_params& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f || p.temperature > 100.0f)
    return bad("temperature", fmt::format("must be in [0, 100], got {}", p.temperature));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return bad("top_p", fmt::format("must be in (0, 1], got {}", p.top_p));
  if (p.top_k < -1) return bad("top_k", fmt::format("must be -1 (off) or >= 0, got {}", p.top_k));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return bad("min_p", fmt::format("must be in [0, 1], got {}", p.min_p));
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 100.0f))
    return bad("repetition_penalty", fmt::format("must be in (0, 100], got {}", p.repetition_penalty));
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    return bad("presence_penalty", fmt::format("must be in [-2, 2], got {}", p.presence_penalty));
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    return bad("frequency_penalty", fmt::format("must be in [-2, 2], got {}", p.frequency_penalty));
  if (p.num_logprobs < -1 || p.num_logprobs > 20)
    return bad("logprobs", fmt::format("must be in [0, 20], got {}", p.num_logprobs));
  if (p.max_tokens < 1) return bad("max_tokens", fmt::format("must be >= 1, got {}", p.max_tokens));
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens)
    return bad("min_tokens", fmt::format("must be in [0, max_tokens], got {}", p.min_tokens));
  if (p.n < 1 || p.n > 128) return bad("n", fmt::format("must be in [1, 128], got {}", p.n));
  for (const auto& s : p.stop)
    if (s.empty()) return bad("stop", "stop strings must not be empty");
  if (p.stop.size() > 16) return bad("stop", "at most 16 stop strings");
  for (auto id : p.stop_token_ids)
    if (id < 0) return bad("stop_token_ids", fmt::format("token ids must be >= 0, got {}", id));
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) return bad("logit_bias", fmt::format("token ids must be >= 0, got {}", id));
    if (!(bias >= -100.0f && bias <= 100.0f))
      return bad("logit_bias", fmt::format("biases must be in [-100, 100], got {}", bias));
  }
  if (p.logit_bias.size() > 1024) return bad("logit_bias", "at most 1024 entries");
  return {};
}

}  // namespace actorserve
