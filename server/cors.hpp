#pragma once
/// CORS (--allowed-origins): which browser origins may call the API, as response header lines.
/// No Beast: the connection passes the request's header values and appends the lines it gets.
#include <string>
#include <string_view>
#include <vector>

namespace actorserve::server {

struct cors_request {
  std::string_view origin;           ///< the Origin header, or ""
  bool preflight = false;            ///< OPTIONS with Access-Control-Request-Method
  std::string_view request_headers;  ///< Access-Control-Request-Headers (preflight), or ""
  std::string_view allow;            ///< the route's methods (preflight), e.g. "POST, OPTIONS"
};

/// The CORS header lines ("Name: value\r\n"...) for a request from an allowed origin; "" when
/// the request has no Origin or its origin is not allowed (the browser then blocks the page).
std::string cors_headers(const std::vector<std::string>& allowed_origins, const cors_request& r);

}  // namespace actorserve::server
