#pragma once
/// The error the template interpreter raises internally. It never leaves this folder: the public
/// entry points in chat_template.hpp catch it and return an `actorserve::error`.
#include <string>
#include <utility>

#include "config/error.hpp"

namespace actorserve::protocol::jinja {

struct template_error {
  error_code code = error_code::invalid_argument;
  std::string message;
};

/// Throws a template_error with "chat template line N: what" (line 0: no line prefix).
[[noreturn]] void fail(int line, const std::string& what, error_code code = error_code::invalid_argument);

}  // namespace actorserve::protocol::jinja
