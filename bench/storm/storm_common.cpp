#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bench/common/stats.hpp"
#include "bench/storm/storm.hpp"

namespace actorserve::bench::storm {

double server_metrics::get(const std::string& name) const {
  auto it = values.find(name);
  return it == values.end() ? -1.0 : it->second;
}

process_figures read_process(int64_t pid) {
  process_figures f;
  if (pid <= 0) return f;
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") in >> f.rss_kib;
    else if (key == "Threads:") in >> f.threads;
    in.ignore(1 << 20, '\n');
  }
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(fmt::format("/proc/{}/fd", pid), ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++f.fds;
  return f;
}

void verdict::check(bool ok, const std::string& what) {
  if (!ok) ++violations_;
  fmt::print("  [{}] {}\n", ok ? "ok" : "VIOLATION", what);
  std::fflush(stdout);
}

latency_figures latencies(const std::vector<double>& ms) {
  latency_figures f;
  f.count = static_cast<int64_t>(ms.size());
  if (ms.empty()) return f;
  f.p50 = percentile(ms, 50);
  f.p99 = percentile(ms, 99);
  f.max = percentile(ms, 100);
  return f;
}

}  // namespace actorserve::bench::storm
