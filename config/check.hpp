#pragma once
/// AS_CHECK(cond, "why"): an invariant of our own code. On failure it logs file:line, the
/// condition and the message, then aborts. Not for input validation: bad input returns an error.
#include <string_view>

namespace actorserve::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, std::string_view msg);
}

#define AS_CHECK(cond, msg)                                                \
  do {                                                                     \
    if (!(cond)) [[unlikely]]                                              \
      ::actorserve::detail::check_failed(__FILE__, __LINE__, #cond, msg);  \
  } while (0)
