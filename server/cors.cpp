#include "server/cors.hpp"

#include <algorithm>

namespace actorserve::server {

std::string cors_headers(const std::vector<std::string>& allowed_origins, const cors_request& r) {
  if (r.origin.empty()) return {};
  const bool any = std::find(allowed_origins.begin(), allowed_origins.end(), "*") != allowed_origins.end();
  if (!any && std::find(allowed_origins.begin(), allowed_origins.end(), r.origin) == allowed_origins.end()) return {};
  // The origin is echoed rather than "*", so that a cache keyed on Vary: Origin stays right.
  std::string out = "Access-Control-Allow-Origin: " + std::string(r.origin) + "\r\nVary: Origin\r\n";
  if (r.preflight) {
    out += "Access-Control-Allow-Methods: " + std::string(r.allow) + "\r\n";
    out += "Access-Control-Allow-Headers: " +
           std::string(r.request_headers.empty() ? "Authorization, Content-Type" : r.request_headers) + "\r\n";
    out += "Access-Control-Max-Age: 600\r\n";
  }
  return out;
}

}  // namespace actorserve::server
