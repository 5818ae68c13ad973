#pragma once
/// Logging: one line per event, levels, `req=<id>` as the conventional request tag.
/// Backed by spdlog (stderr); the format helpers are fmt's.
#include <fmt/format.h>

#include <string_view>

namespace actorserve::log {

enum class level { trace, debug, info, warn, error, off };

void set_level(level lvl);
level current_level();
/// Parses trace|debug|info|warn|error|off; false on anything else.
bool parse_level(std::string_view text, level& out);
void write(level lvl, std::string_view message);

inline bool enabled(level lvl) { return lvl >= current_level(); }

template <class... A>
void debug(fmt::format_string<A...> f, A&&... a) {
  if (enabled(level::debug)) write(level::debug, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void info(fmt::format_string<A...> f, A&&... a) {
  if (enabled(level::info)) write(level::info, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void warn(fmt::format_string<A...> f, A&&... a) {
  if (enabled(level::warn)) write(level::warn, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void error(fmt::format_string<A...> f, A&&... a) {
  if (enabled(level::error)) write(level::error, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace actorserve::log
