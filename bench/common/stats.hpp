#pragma once
/// Small statistics helpers shared by the benchmarks (percentiles as numpy computes them).
#include <cstdint>
#include <random>
#include <vector>

namespace actorserve::bench {

/// The p-th percentile (0..100) of `values`, linear interpolation between closest ranks
/// (numpy's default); 0 for an empty set.
double percentile(std::vector<double> values, double p);

/// Mean, median and tail of a sample.
struct summary {
  double mean = 0, median = 0, p90 = 0, p99 = 0, min = 0, max = 0;
  int64_t count = 0;
};
summary summarize(const std::vector<double>& values);

/// `len` token ids drawn uniformly from [0, vocab).
std::vector<int32_t> random_token_ids(std::mt19937_64& rng, int32_t len, int64_t vocab);

}  // namespace actorserve::bench
