#include "config/error.hpp"

namespace actorserve {

const char* to_string(error_code code) {
  switch (code) {
    case error_code::invalid_argument: return "invalid_argument";
    case error_code::not_found: return "not_found";
    case error_code::unsupported: return "unsupported";
    case error_code::malformed_file: return "malformed_file";
    case error_code::too_large: return "too_large";
    case error_code::unauthorized: return "unauthorized";
    case error_code::out_of_memory: return "out_of_memory";
    case error_code::cancelled: return "cancelled";
    case error_code::unavailable: return "unavailable";
    case error_code::internal: return "internal";
  }
  return "unknown";
}

}  // namespace actorserve
