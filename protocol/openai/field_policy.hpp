#pragma once
/// The request fields the parsers do not read into typed values: fields accepted with no effect
/// on the output (identifiers), fields refused unless they hold their neutral value, and
/// unknown fields. Nothing is ignored silently: a field is read, accepted as documented in
/// docs/chat-api.md, or refused with an error naming it. Private to protocol/openai .cpp files.
#include <string_view>

#include "protocol/openai/json_fields.hpp"

namespace actorserve::protocol::openai {

enum class endpoint { completions, chat };

/// `key` is a field neither parser reads: ok when accepted (or neutral), else an `unsupported`
/// error ("<key>: ... is not supported") or, for an unknown field, invalid_argument.
status check_other_field(std::string_view key, detail::element value, endpoint ep);

}  // namespace actorserve::protocol::openai
