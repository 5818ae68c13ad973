#pragma once
/// The periodic stats line an operator reads while the server is busy (vLLM's "Avg prompt
/// throughput ..." line): rates over the interval between two snapshots of the engine's counters.
#include <optional>
#include <string>

#include "actors/engine.hpp"

namespace actorserve::server {

/// Seconds between two stats lines (none while idle; --disable-log-stats: none at all).
inline constexpr int kStatsLogIntervalSeconds = 10;

/// The line for the interval from `before` to `now` (`seconds` long); nullopt when the engine
/// was idle throughout (nothing running or waiting, no token computed).
std::optional<std::string> stats_line(const actors::engine_stats& before, const actors::engine_stats& now,
                                      double seconds);

}  // namespace actorserve::server
