#include "server/stats_log.hpp"

#include <fmt/format.h>

namespace actorserve::server {

std::optional<std::string> stats_line(const actors::engine_stats& before, const actors::engine_stats& now,
                                      double seconds) {
  const int64_t prompt = now.prompt_tokens - before.prompt_tokens;
  const int64_t generated = now.generation_tokens - before.generation_tokens;
  if (now.num_running == 0 && now.num_waiting == 0 && prompt == 0 && generated == 0) return std::nullopt;
  const double secs = seconds > 0 ? seconds : 1.0;
  const int64_t queries = now.prefix_cache_queries - before.prefix_cache_queries;
  const int64_t hits = now.prefix_cache_hits - before.prefix_cache_hits;
  const double kv_used = now.kv_blocks_total > 0 ? 100.0 * double(now.kv_blocks_used) / double(now.kv_blocks_total) : 0.0;
  return fmt::format(
      "stats: prompt {:.1f} tok/s, generation {:.1f} tok/s, running {}, waiting {}, KV cache {:.1f} % used, "
      "prefix cache hits {:.1f} %, preemptions {} (+{})",
      double(prompt) / secs, double(generated) / secs, now.num_running, now.num_waiting, kv_used,
      queries > 0 ? 100.0 * double(hits) / double(queries) : 0.0, now.num_preemptions,
      now.num_preemptions - before.num_preemptions);
}

}  // namespace actorserve::server
