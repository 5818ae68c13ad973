#include "actors/router_policy.hpp"

#include <algorithm>

namespace actorserve::actors {

router_policy::router_policy(size_t num_engines, router_config cfg) : cfg_(cfg), engines_(num_engines) {
  for (auto& e : engines_) e.capacity = cfg_.default_cache_blocks;
}

void router_policy::set_up(size_t engine, bool up) {
  auto& e = engines_[engine];
  e.up = up;
  if (up) return;
  e.outstanding = e.reported = e.routed_since_report = 0;
  e.lru.clear();
  e.keys.clear();
}

size_t router_policy::num_up() const {
  return static_cast<size_t>(std::count_if(engines_.begin(), engines_.end(), [](const engine_view& e) { return e.up; }));
}

void router_policy::report_load(size_t engine, int64_t queued, int64_t kv_blocks_total) {
  auto& e = engines_[engine];
  e.reported = queued;
  e.routed_since_report = 0;
  if (kv_blocks_total > 0) {
    e.capacity = static_cast<size_t>(kv_blocks_total);
    trim(e);
  }
}

int64_t router_policy::load(size_t engine) const {
  const auto& e = engines_[engine];
  return std::max(e.outstanding, e.reported + e.routed_since_report);
}

size_t router_policy::match(size_t engine, std::span<const uint64_t> block_hashes) const {
  const auto& e = engines_[engine];
  size_t n = 0;
  while (n < block_hashes.size() && e.keys.count(block_hashes[n])) ++n;
  return n;
}

std::optional<size_t> router_policy::least_loaded() {
  std::optional<size_t> best;
  const size_t n = engines_.size();
  // Ties go round the engines, so equal loads do not all land on the first.
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (next_ + k) % n;
    if (engines_[i].up && (!best || load(i) < load(*best))) best = i;
  }
  if (best) next_ = (*best + 1) % n;
  return best;
}

std::optional<size_t> router_policy::pick(std::span<const uint64_t> block_hashes) {
  const size_t n = engines_.size();
  switch (cfg_.kind) {
    case routing_kind::round_robin:
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (next_ + k) % n;
        if (engines_[i].up) {
          next_ = (i + 1) % n;
          return i;
        }
      }
      return std::nullopt;
    case routing_kind::least_loaded:
      return least_loaded();
    case routing_kind::cache_aware: break;
  }
  std::optional<size_t> best;
  size_t best_match = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!engines_[i].up) continue;
    const size_t m = match(i, block_hashes);
    if (m > best_match || (m == best_match && m > 0 && load(i) < load(*best))) {
      best = i;
      best_match = m;
    }
  }
  auto fallback = least_loaded();
  if (!best || !fallback) return fallback;
  if (load(*best) > load(*fallback) + cfg_.balance_margin) return fallback;
  return best;
}

void router_policy::remember(engine_view& e, uint64_t key) {
  auto it = e.keys.find(key);
  if (it != e.keys.end()) {
    e.lru.splice(e.lru.begin(), e.lru, it->second);
    return;
  }
  e.lru.push_front(key);
  e.keys.emplace(key, e.lru.begin());
}

void router_policy::trim(engine_view& e) {
  while (e.lru.size() > e.capacity) {
    e.keys.erase(e.lru.back());
    e.lru.pop_back();
  }
}

void router_policy::on_routed(size_t engine, std::span<const uint64_t> block_hashes) {
  auto& e = engines_[engine];
  ++e.outstanding;
  ++e.routed_since_report;
  if (cfg_.kind != routing_kind::cache_aware) return;
  // Later blocks first, so the prefix ends up most recent: it is evicted last, as in the pool.
  for (size_t i = block_hashes.size(); i-- > 0;) remember(e, block_hashes[i]);
  trim(e);
}

void router_policy::on_finished(size_t engine) {
  auto& e = engines_[engine];
  if (e.outstanding > 0) --e.outstanding;
}

}  // namespace actorserve::actors
