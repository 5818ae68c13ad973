#pragma once
/// The routing policy of a front end of many engines (no CAF, tested directly): which engine a
/// request goes to. Cache-aware routing keeps, per engine, the prefix-cache keys of the prompts
/// it sent there (block_hash.hpp, exactly as the engines' prefix cache keys blocks), bounded by
/// the engine's pool size in least-recently-routed order, and sends a request to the engine
/// whose keys cover the longest prefix of its prompt, unless that engine's load exceeds the
/// least-loaded engine's by more than the balance margin; then, and for prompts that match
/// nowhere, the least-loaded engine wins. Load is the larger of the requests this front end has
/// outstanding on the engine and the engine's last report (running + waiting, every front end's)
/// plus what was routed there since.
#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "config/engine_config.hpp"

namespace actorserve::actors {

struct router_config {
  routing_kind kind = routing_kind::cache_aware;
  int64_t balance_margin = 16;              ///< requests (see above)
  size_t default_cache_blocks = 4096;       ///< per engine, until its first load report
};

class router_policy {
 public:
  router_policy(size_t num_engines, router_config cfg);

  /// An engine came up or went down (down: its keys and load are forgotten).
  void set_up(size_t engine, bool up);
  bool is_up(size_t engine) const { return engines_[engine].up; }
  size_t num_up() const;
  /// The engine's report: sequences running + waiting, and its pool size in blocks.
  void report_load(size_t engine, int64_t queued, int64_t kv_blocks_total);
  /// The engine for a prompt's full-block keys (in block order); none when no engine is up.
  std::optional<size_t> pick(std::span<const uint64_t> block_hashes);
  /// The request went to `engine`: its load grows and it now holds these keys.
  void on_routed(size_t engine, std::span<const uint64_t> block_hashes);
  /// A request routed to `engine` ended.
  void on_finished(size_t engine);

  int64_t load(size_t engine) const;
  /// Leading keys of `block_hashes` the engine is believed to hold.
  size_t match(size_t engine, std::span<const uint64_t> block_hashes) const;

 private:
  struct engine_view {
    bool up = false;
    int64_t outstanding = 0;            ///< routed by this front end, not finished
    int64_t reported = 0;               ///< last report: running + waiting
    int64_t routed_since_report = 0;
    size_t capacity = 0;                ///< keys kept (the engine's pool size)
    std::list<uint64_t> lru;            ///< most recently routed first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> keys;
  };
  std::optional<size_t> least_loaded();
  void remember(engine_view& e, uint64_t key);
  void trim(engine_view& e);

  router_config cfg_;
  std::vector<engine_view> engines_;
  size_t next_ = 0;                     ///< round-robin position (also breaks load ties)
};

}  // namespace actorserve::actors
