#include "bench/common/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace actorserve::bench {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

summary summarize(const std::vector<double>& values) {
  summary s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.median = percentile(values, 50);
  s.p90 = percentile(values, 90);
  s.p99 = percentile(values, 99);
  auto [mn, mx] = std::minmax_element(values.begin(), values.end());
  s.min = *mn;
  s.max = *mx;
  return s;
}

std::vector<int32_t> random_token_ids(std::mt19937_64& rng, int32_t len, int64_t vocab) {
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(vocab, 1) - 1);
  std::vector<int32_t> ids(static_cast<size_t>(std::max(len, 0)));
  for (auto& id : ids) id = static_cast<int32_t>(pick(rng));
  return ids;
}

}  // namespace actorserve::bench
