#include "server/errors.hpp"

#include "protocol/openai/parse.hpp"
#include "protocol/openai/write.hpp"

namespace actorserve::server {

http_error to_http_error(const error& e) {
  http_error h;
  switch (e.code) {
    case error_code::invalid_argument:
    case error_code::unsupported: h.status = 400; h.type = "invalid_request_error"; break;
    case error_code::not_found: h.status = 404; h.type = "not_found_error"; break;
    case error_code::too_large: h.status = 413; h.type = "invalid_request_error"; break;
    case error_code::unauthorized: h.status = 401; h.type = "authentication_error"; break;
    case error_code::cancelled: h.status = 499; h.type = "cancelled"; break;
    case error_code::unavailable:
    case error_code::out_of_memory: h.status = 503; h.type = "service_unavailable"; break;
    case error_code::malformed_file:
    case error_code::internal: h.status = 500; h.type = "server_error"; break;
  }
  h.param = std::string(protocol::openai::error_param(e.message));
  h.body = protocol::openai::write_error(e.message, h.type, h.param, to_string(e.code));
  return h;
}

std::string_view status_reason(int status) {
  switch (status) {
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

}  // namespace actorserve::server
