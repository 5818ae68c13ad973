#include "gpu/cuda/mla/mla_splits.hpp"

#include <algorithm>
#include <climits>

namespace actorserve::gpu::cuda {
namespace {

/// Busy share (percent) of the resident slots over the waves that `ctas` CTAs take.
long long wave_fill_percent(long long ctas, long long slots) {
  const long long waves = (ctas + slots - 1) / slots;
  return 100 * ctas / (waves * slots);
}

constexpr long long kMinFillPercent = 80;

/// CTAs of n rows in one split, and the SMs' resident slots for them.
long long ctas_a_split(int n, int num_heads) { return static_cast<long long>(n) * mla_head_groups(num_heads); }
long long resident_slots(int num_sms) { return std::max(1LL, static_cast<long long>(num_sms) * mla_ctas_per_sm); }

}  // namespace

int mla_num_splits(int n, int num_heads, int num_sms, int max_partial_rows) {
  if (n <= 0) return 1;
  const long long ctas = ctas_a_split(n, num_heads), slots = resident_slots(num_sms);
  if (ctas >= 2 * slots) return 1;
  const int cap = std::min(mla_max_splits, max_partial_rows / n);
  for (int s = 1; s <= cap; ++s)
    if (wave_fill_percent(ctas * s, slots) >= kMinFillPercent) return s;
  return std::max(cap, 1);
}

int mla_partial_rows(int max_rows, int num_heads, int num_sms) {
  long long most = 0;
  for (int n = 1; n <= max_rows; ++n) {
    const int s = mla_num_splits(n, num_heads, num_sms, INT_MAX);
    if (s > 1) most = std::max(most, static_cast<long long>(n) * s);
    // Past two waves of CTAs without splits nothing larger splits.
    if (ctas_a_split(n, num_heads) >= 2 * resident_slots(num_sms)) break;
  }
  return static_cast<int>(most);
}

}  // namespace actorserve::gpu::cuda
