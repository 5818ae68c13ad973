#pragma once
/// Request body parsers (simdjson inside). Every field is read, accepted as documented
/// (docs/chat-api.md) or refused: a field of the wrong type or out of range, or an unknown
/// field, is an invalid_argument error, and a field the server does not implement an
/// unsupported one; both messages start with the field's name ("top_p: must be in (0, 1], got 2").
#include <string_view>

#include "config/error.hpp"
#include "config/model_config.hpp"
#include "protocol/openai/types.hpp"

namespace actorserve::protocol::openai {

/// POST /v1/completions body.
result<completion_request> parse_completion_request(std::string_view body);
/// POST /v1/chat/completions body.
result<chat_request> parse_chat_request(std::string_view body);
/// POST /tokenize body: {"prompt": ...} or {"messages": [...]}.
result<tokenize_request> parse_tokenize_request(std::string_view body);
/// POST /detokenize body: {"tokens": [...]}.
result<detokenize_request> parse_detokenize_request(std::string_view body);

/// Sets the sampling fields the request left unset (`given`) to generation_config.json's
/// defaults, as vLLM does (--generation-config auto).
void apply_generation_defaults(sampling_params& p, const given_fields& given, const generation_defaults& d);

/// The field an error message names ("top_p: must be..." -> "top_p"), or "" if none.
std::string_view error_param(std::string_view message);

}  // namespace actorserve::protocol::openai
