#pragma once
/// The one place where an actorserve::error becomes an HTTP status and an OpenAI error object.
#include <string>
#include <string_view>

#include "config/error.hpp"

namespace actorserve::server {

struct http_error {
  int status = 500;
  std::string type;     ///< OpenAI error type, e.g. "invalid_request_error"
  std::string param;    ///< the field the message names, or ""
  std::string body;     ///< {"error": {...}}
};

/// Maps the error code to status + type; param comes from the message's "field: " prefix.
http_error to_http_error(const error& e);
/// The reason phrase of a status line ("Bad Request").
std::string_view status_reason(int status);

}  // namespace actorserve::server
