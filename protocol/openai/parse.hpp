#pragma once
/// Request body parsers (simdjson inside). Unknown fields are ignored, as OpenAI does; a known
/// field of the wrong type or out of range is an invalid_argument error whose message starts
/// with the field's name ("top_p: must be in (0, 1], got 2").
#include <string_view>

#include "config/error.hpp"
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

/// The field an error message names ("top_p: must be..." -> "top_p"), or "" if none.
std::string_view error_param(std::string_view message);

}  // namespace actorserve::protocol::openai
