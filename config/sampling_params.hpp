#pragma once
/// Per-request sampling parameters, shared by the CLI, the OpenAI request parser, the engine and
/// both executors. Defaults are OpenAI's/vLLM's.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/error.hpp"

namespace actorserve {

struct sampling_params {
  float temperature = 1.0f;          ///< 0 means greedy
  float top_p = 1.0f;                ///< nucleus mass in (0, 1]
  int32_t top_k = -1;                ///< -1 or 0: off
  float min_p = 0.0f;                ///< in [0, 1]
  float repetition_penalty = 1.0f;   ///< > 0; 1 off (HF/vLLM semantics over prompt + output)
  float presence_penalty = 0.0f;     ///< [-2, 2], over output tokens
  float frequency_penalty = 0.0f;    ///< [-2, 2], over output tokens
  std::optional<uint64_t> seed;      ///< same seed => same tokens
  int32_t num_logprobs = -1;         ///< -1: none; 0: the sampled token only; K: plus top-K
  int32_t max_tokens = 16;           ///< generated tokens at most
  int32_t min_tokens = 0;            ///< EOS/stop ids suppressed before this many
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;   ///< extra stop ids besides the model's EOS
  std::vector<std::string> stop;         ///< stop strings (matched on text, never sent)
  int32_t n = 1;                         ///< parallel samples of one prompt
  /// (token id, bias) added to the logits before penalties; biases in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool skip_special_tokens = true;       ///< output text leaves special tokens out

  bool greedy() const { return temperature <= 0.0f; }
  bool uses_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

/// The error names the field as an OpenAI client spells it (e.g. "top_p").
status validate(const sampling_params& p);

}  // namespace actorserve
