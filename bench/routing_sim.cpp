// bench_routing_sim: replays a shared-prefix trace (system prompts shared by many conversations,
// multi-turn chats whose every turn repeats the conversation so far) against N simulated engines
// and reports, per routing policy, the prefix-cache hit rate and the load imbalance. The front
// end's routing is the real one (actors/router_policy.hpp, keys from actors/block_hash.hpp); the
// engines are simulated: an LRU prefix cache of --cache-blocks blocks each, and a token budget
// per 10 ms tick spent in arrival order (prefill tokens not in the cache, then --decode-cost per
// output token), reporting their load every --report-ticks ticks as the real engines do.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <list>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "actors/block_hash.hpp"
#include "actors/router_policy.hpp"

namespace {

using namespace actorserve;
using namespace actorserve::actors;

struct options {
  std::vector<size_t> engines{1, 2, 4, 8, 16, 32, 64};
  int32_t block_size = 16;
  size_t cache_blocks = 2048;          ///< per engine (32k tokens)
  int conversations_per_engine = 48;
  int turns = 4;
  int system_prompts = 32;
  int system_len = 768;                ///< tokens
  int64_t budget = 300;                ///< work units an engine does per tick (~70 % busy without a cache)
  int64_t decode_cost = 16;            ///< work units per output token
  int report_ticks = 10;               ///< load reports every 100 ms
  std::vector<size_t> margins{1, 4, 16};  ///< cache-aware's balance margins to compare
  uint64_t seed = 1;
};

struct request {
  int64_t arrival = 0;                 ///< tick
  std::vector<int32_t> prompt;
  int32_t output_len = 0;
  std::vector<uint64_t> hashes;        ///< full blocks of prompt
  std::vector<uint64_t> hashes_with_output;  ///< what the engine caches once it finished
};

/// System prompts drawn Zipf-like; each conversation's turns arrive 2-6 s apart.
std::vector<request> make_trace(const options& o, size_t num_engines) {
  std::mt19937_64 rng(o.seed);
  auto tokens = [&rng](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % 30000) + 100;
    return t;
  };
  std::vector<std::vector<int32_t>> systems;
  for (int s = 0; s < o.system_prompts; ++s) systems.push_back(tokens(o.system_len));
  std::vector<double> weights;
  for (int s = 0; s < o.system_prompts; ++s) weights.push_back(1.0 / (s + 1));
  std::discrete_distribution<int> pick_system(weights.begin(), weights.end());
  std::uniform_int_distribution<int> msg_len(64, 256), gap(200, 600);
  const int conversations = o.conversations_per_engine * static_cast<int>(num_engines);
  // Conversations start over the first 30 s.
  std::uniform_int_distribution<int64_t> start(0, 3000);
  std::vector<request> out;
  for (int c = 0; c < conversations; ++c) {
    std::vector<int32_t> history = systems[static_cast<size_t>(pick_system(rng))];
    int64_t at = start(rng);
    for (int t = 0; t < o.turns; ++t) {
      request r;
      auto user = tokens(msg_len(rng));
      history.insert(history.end(), user.begin(), user.end());
      r.arrival = at;
      r.prompt = history;
      r.output_len = msg_len(rng);
      auto reply = tokens(r.output_len);
      extend_block_hashes(r.hashes, r.prompt, o.block_size);
      history.insert(history.end(), reply.begin(), reply.end());
      r.hashes_with_output = r.hashes;
      extend_block_hashes(r.hashes_with_output, history, o.block_size);
      out.push_back(std::move(r));
      at += gap(rng);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const request& a, const request& b) { return a.arrival < b.arrival; });
  return out;
}

/// One engine's prefix cache (LRU over block keys) and its queue.
struct sim_engine {
  size_t capacity = 0;
  std::list<uint64_t> lru;
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> keys;
  struct job {
    const request* r;
    int64_t work_left;
  };
  std::deque<job> queue;
  int64_t work_done = 0;

  size_t cached_prefix(const std::vector<uint64_t>& h) const {
    size_t n = 0;
    while (n < h.size() && keys.count(h[n])) ++n;
    return n;
  }
  void touch(const std::vector<uint64_t>& h) {
    for (size_t i = h.size(); i-- > 0;) {
      auto it = keys.find(h[i]);
      if (it != keys.end()) {
        lru.splice(lru.begin(), lru, it->second);
      } else {
        lru.push_front(h[i]);
        keys.emplace(h[i], lru.begin());
      }
    }
    while (lru.size() > capacity) {
      keys.erase(lru.back());
      lru.pop_back();
    }
  }
};

struct outcome {
  double hit_rate = 0, imbalance = 0, mean_latency_ms = 0, p99_latency_ms = 0;
};

outcome simulate(const options& o, size_t n, routing_kind kind, int64_t margin, const std::vector<request>& trace) {
  router_config rc;
  rc.kind = kind;
  rc.balance_margin = margin;
  rc.default_cache_blocks = o.cache_blocks;
  router_policy policy(n, rc);
  std::vector<sim_engine> engines(n);
  for (size_t e = 0; e < n; ++e) {
    engines[e].capacity = o.cache_blocks;
    policy.set_up(e, true);
  }
  int64_t prompt_tokens = 0, cached_tokens = 0;
  std::vector<int64_t> latencies;
  size_t next = 0;
  for (int64_t tick = 0; next < trace.size() || std::any_of(engines.begin(), engines.end(), [](auto& e) {
                           return !e.queue.empty();
                         });
       ++tick) {
    if (tick % o.report_ticks == 0)
      for (size_t e = 0; e < n; ++e)
        policy.report_load(e, static_cast<int64_t>(engines[e].queue.size()), static_cast<int64_t>(o.cache_blocks));
    for (; next < trace.size() && trace[next].arrival <= tick; ++next) {
      const request& r = trace[next];
      const size_t e = *policy.pick(r.hashes);
      policy.on_routed(e, r.hashes);
      auto& eng = engines[e];
      const int64_t hit = static_cast<int64_t>(eng.cached_prefix(r.hashes)) * o.block_size;
      prompt_tokens += static_cast<int64_t>(r.prompt.size());
      cached_tokens += hit;
      eng.touch(r.hashes_with_output);
      eng.queue.push_back({&r, static_cast<int64_t>(r.prompt.size()) - hit + o.decode_cost * r.output_len});
    }
    for (size_t e = 0; e < n; ++e) {
      auto& eng = engines[e];
      int64_t budget = o.budget;
      while (budget > 0 && !eng.queue.empty()) {
        auto& j = eng.queue.front();
        const int64_t w = std::min(budget, j.work_left);
        j.work_left -= w;
        budget -= w;
        eng.work_done += w;
        if (j.work_left == 0) {
          latencies.push_back(tick + 1 - j.r->arrival);
          policy.on_finished(e);
          eng.queue.pop_front();
        }
      }
    }
  }
  outcome out;
  out.hit_rate = prompt_tokens > 0 ? double(cached_tokens) / double(prompt_tokens) : 0.0;
  int64_t max_work = 0, total_work = 0;
  for (const auto& e : engines) {
    max_work = std::max(max_work, e.work_done);
    total_work += e.work_done;
  }
  out.imbalance = total_work > 0 ? double(max_work) * double(n) / double(total_work) : 1.0;
  std::sort(latencies.begin(), latencies.end());
  double sum = 0;
  for (int64_t l : latencies) sum += double(l);
  out.mean_latency_ms = latencies.empty() ? 0 : sum / double(latencies.size()) * 10.0;
  out.p99_latency_ms = latencies.empty() ? 0 : double(latencies[latencies.size() * 99 / 100]) * 10.0;
  return out;
}

std::vector<size_t> parse_list(std::string_view s) {
  std::vector<size_t> out;
  while (!s.empty()) {
    const size_t comma = s.find(',');
    out.push_back(std::stoul(std::string(s.substr(0, comma))));
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_routing_sim: %s needs a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--engines") o.engines = parse_list(value("--engines"));
    else if (a == "--cache-blocks") o.cache_blocks = std::stoul(value("--cache-blocks"));
    else if (a == "--conversations-per-engine") o.conversations_per_engine = std::stoi(value("--conversations-per-engine"));
    else if (a == "--turns") o.turns = std::stoi(value("--turns"));
    else if (a == "--system-prompts") o.system_prompts = std::stoi(value("--system-prompts"));
    else if (a == "--system-len") o.system_len = std::stoi(value("--system-len"));
    else if (a == "--budget") o.budget = std::stoll(value("--budget"));
    else if (a == "--decode-cost") o.decode_cost = std::stoll(value("--decode-cost"));
    else if (a == "--report-ticks") o.report_ticks = std::stoi(value("--report-ticks"));
    else if (a == "--margins") o.margins = parse_list(value("--margins"));
    else if (a == "--seed") o.seed = std::stoull(value("--seed"));
    else {
      std::printf(
          "bench_routing_sim [--engines 1,2,4,...,64] [--cache-blocks 2048] [--conversations-per-engine 48]\n"
          "  [--turns 4] [--system-prompts 32] [--system-len 768] [--budget 8192] [--decode-cost 16]\n"
          "  [--report-ticks 10] [--margins 1,4,16] [--seed 1]\n"
          "Replays a shared-prefix multi-turn trace against N simulated engines per routing policy; prints\n"
          "the prefix-cache hit rate (cached / prompt tokens), the imbalance (busiest engine's work / mean)\n"
          "and the mean and p99 time from arrival to the last token (ms, 10 ms ticks).\n");
      return a == "--help" ? 0 : 2;
    }
  }
  std::printf("| engines | requests | policy | prefix-hit rate | imbalance (max/mean work) | mean latency ms | p99 latency ms |\n");
  std::printf("|---:|---:|---|---:|---:|---:|---:|\n");
  auto row = [](size_t n, size_t requests, const std::string& policy, const outcome& r) {
    std::printf("| %zu | %zu | %s | %.3f | %.2f | %.0f | %.0f |\n", n, requests, policy.c_str(), r.hit_rate,
                r.imbalance, r.mean_latency_ms, r.p99_latency_ms);
    std::fflush(stdout);
  };
  for (size_t n : o.engines) {
    const auto trace = make_trace(o, n);
    for (size_t m : o.margins)
      row(n, trace.size(), "cache-aware, margin " + std::to_string(m),
          simulate(o, n, routing_kind::cache_aware, static_cast<int64_t>(m), trace));
    for (auto kind : {routing_kind::least_loaded, routing_kind::round_robin})
      row(n, trace.size(), to_string(kind), simulate(o, n, kind, 0, trace));
  }
  return 0;
}
