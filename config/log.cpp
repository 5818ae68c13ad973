#include "config/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "config/check.hpp"

namespace actorserve::log {
namespace {

std::atomic<level> g_level{level::info};

spdlog::logger& logger() {
  static auto instance = [] {
    auto l = spdlog::stderr_color_mt("actorserve");
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%t] %v");
    l->set_level(spdlog::level::trace);  // filtering happens in enabled()
    return l;
  }();
  return *instance;
}

spdlog::level::level_enum to_spdlog(level lvl) {
  switch (lvl) {
    case level::trace: return spdlog::level::trace;
    case level::debug: return spdlog::level::debug;
    case level::info: return spdlog::level::info;
    case level::warn: return spdlog::level::warn;
    case level::error: return spdlog::level::err;
    case level::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

void set_level(level lvl) { g_level.store(lvl, std::memory_order_relaxed); }
level current_level() { return g_level.load(std::memory_order_relaxed); }

bool parse_level(std::string_view text, level& out) {
  static constexpr std::pair<std::string_view, level> names[] = {
      {"trace", level::trace}, {"debug", level::debug}, {"info", level::info},
      {"warn", level::warn},   {"error", level::error}, {"off", level::off}};
  for (const auto& [name, lvl] : names) {
    if (name == text) {
      out = lvl;
      return true;
    }
  }
  return false;
}

void write(level lvl, std::string_view message) {
  logger().log(to_spdlog(lvl), "{}", message);
}

}  // namespace actorserve::log

namespace actorserve::detail {

void check_failed(const char* file, int line, const char* cond, std::string_view msg) {
  std::fprintf(stderr, "CHECK failed at %s:%d: %s: %.*s\n", file, line, cond,
               static_cast<int>(msg.size()), msg.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace actorserve::detail
