#pragma once
/// Internal to config/: what model_config.cpp and moe_config.cpp share while reading a
/// config.json. Included only by .cpp files (it brings simdjson through json_fields.hpp).
#include "config/json_fields.hpp"
#include "config/model_config.hpp"

namespace actorserve {

/// Returns the error of a failed status from the enclosing function.
#define AS_TRY(expr)                                      \
  do {                                                    \
    if (status st_ = (expr); !st_.ok()) return st_.err(); \
  } while (0)

/// Reads the mixture-of-experts keys of the sparse architectures (Mixtral, Qwen3-MoE,
/// DeepSeek-V2) into cfg.moe; other architectures keep it empty. Needs the architecture and the
/// shapes already read.
status parse_moe_keys(const json_obj& r, model_config& cfg);

/// Reads DeepSeek-V2's multi-head latent attention keys into cfg.mla (and its head_dim and
/// biases); other architectures keep it empty. Needs the shapes already read.
status parse_mla_keys(const json_obj& r, model_config& cfg);

/// Reads `quantization_config` (FP8 checkpoints) into cfg.quantization; absent leaves it empty.
/// Anything it cannot load is refused naming the key and the value.
status parse_quantization_keys(const json_obj& r, model_config& cfg);

}  // namespace actorserve
