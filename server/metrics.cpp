#include "server/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <optional>

namespace actorserve::server {

histogram::histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1) {}

void histogram::observe(double seconds) {
  size_t i = 0;
  while (i < bounds_.size() && seconds > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<uint64_t>(seconds * 1e6), std::memory_order_relaxed);
}

void render_histogram(std::string& out, std::string_view name, std::string_view help, const std::vector<double>& bounds,
                      const std::vector<int64_t>& per_bucket, double sum, int64_t count) {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += i < per_bucket.size() ? per_bucket[i] : 0;
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds[i], cumulative);
  }
  for (size_t i = bounds.size(); i < per_bucket.size(); ++i) cumulative += per_bucket[i];
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, cumulative);
  out += fmt::format("{}_sum {}\n", name, sum);
  out += fmt::format("{}_count {}\n", name, count);
}

void histogram::render(std::string& out, std::string_view name, std::string_view help) const {
  std::vector<int64_t> per_bucket;
  per_bucket.reserve(buckets_.size());
  for (const auto& b : buckets_) per_bucket.push_back(static_cast<int64_t>(b.load(std::memory_order_relaxed)));
  render_histogram(out, name, help, bounds_, per_bucket,
                   static_cast<double>(sum_us_.load(std::memory_order_relaxed)) / 1e6,
                   static_cast<int64_t>(count_.load(std::memory_order_relaxed)));
}

// Bucket bounds as vLLM's Prometheus logger sets them, so its dashboards' quantiles read alike.
metrics::metrics(int64_t max_model_len)
    : time_to_first_token({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                           20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      inter_token_latency({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                           40.0, 80.0}),
      e2e_request_latency(request_latency_buckets()),
      request_queue_time(request_latency_buckets()),
      request_prefill_time(request_latency_buckets()),
      request_decode_time(request_latency_buckets()),
      request_inference_time(request_latency_buckets()),
      request_prompt_tokens(token_buckets(max_model_len)),
      request_generation_tokens(token_buckets(max_model_len)),
      request_params_n({1, 2, 5, 10, 20}),
      request_params_max_tokens(token_buckets(max_model_len)) {}

std::vector<double> metrics::token_buckets(int64_t max_value) {
  const double top = max_value > 0 ? static_cast<double>(max_value) : 1e6;
  std::vector<double> b;
  for (double decade = 1;; decade *= 10)
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * decade > top) return b;
      b.push_back(m * decade);
    }
}

std::vector<double> metrics::request_latency_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0,
          1920.0, 7680.0};
}

void metrics::observe(const actors::request_times& t) {
  if (t.queue_s) request_queue_time.observe(*t.queue_s);
  if (t.prefill_s) request_prefill_time.observe(*t.prefill_s);
  if (t.decode_s) request_decode_time.observe(*t.decode_s);
  if (t.inference_s) request_inference_time.observe(*t.inference_s);
}

namespace {
/// --metrics-compat vllm: the series whose meaning vLLM's shares, by their vLLM names (counters
/// keep the `_total` suffix that vLLM's Prometheus client adds).
constexpr std::pair<std::string_view, std::string_view> kVllmNames[] = {
    {"actorserve:num_requests_running", "vllm:num_requests_running"},
    {"actorserve:num_requests_waiting", "vllm:num_requests_waiting"},
    {"actorserve:kv_cache_usage_perc", "vllm:kv_cache_usage_perc"},
    {"actorserve:prefix_cache_queries_total", "vllm:prefix_cache_queries_total"},
    {"actorserve:prefix_cache_hits_total", "vllm:prefix_cache_hits_total"},
    {"actorserve:num_preemptions_total", "vllm:num_preemptions_total"},
    {"actorserve:prompt_tokens_total", "vllm:prompt_tokens_total"},
    {"actorserve:generation_tokens_total", "vllm:generation_tokens_total"},
    {"actorserve:request_success_total", "vllm:request_success_total"},
    {"actorserve:time_to_first_token_seconds", "vllm:time_to_first_token_seconds"},
    {"actorserve:inter_token_latency_seconds", "vllm:inter_token_latency_seconds"},
    {"actorserve:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"},
    {"actorserve:request_queue_time_seconds", "vllm:request_queue_time_seconds"},
    {"actorserve:request_prefill_time_seconds", "vllm:request_prefill_time_seconds"},
    {"actorserve:request_decode_time_seconds", "vllm:request_decode_time_seconds"},
    {"actorserve:request_inference_time_seconds", "vllm:request_inference_time_seconds"},
    {"actorserve:iteration_tokens_total", "vllm:iteration_tokens_total"},
    {"actorserve:request_params_n", "vllm:request_params_n"},
    {"actorserve:request_params_max_tokens", "vllm:request_params_max_tokens"},
    {"actorserve:request_prompt_tokens", "vllm:request_prompt_tokens"},
    {"actorserve:request_generation_tokens", "vllm:request_generation_tokens"},
};

/// The vLLM name of the series `line` starts with (the name alone, or followed by `_bucket`,
/// `_sum`, `_count`, `{` or a space), with the length of our name; nothing when it has none.
std::optional<std::pair<std::string_view, size_t>> vllm_name(std::string_view line) {
  for (const auto& [ours, theirs] : kVllmNames) {
    if (!line.starts_with(ours)) continue;
    const std::string_view rest = line.substr(ours.size());
    if (rest.starts_with(' ') || rest.starts_with('{') || rest.starts_with("_bucket") || rest.starts_with("_sum") ||
        rest.starts_with("_count"))
      return std::pair{theirs, ours.size()};
  }
  return std::nullopt;
}

/// `value` escaped for a Prometheus label (backslash, quote, newline).
std::string label_value(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

/// The page with `model_name="..."` on every sample (as vLLM's series carry it) and, with
/// `vllm_names`, the series in kVllmNames renamed on their sample, HELP and TYPE lines.
std::string finish_page(std::string_view page, std::string_view model, bool vllm_names) {
  const std::string label = "model_name=\"" + label_value(model) + "\"";
  std::string out;
  out.reserve(page.size() + 64 * label.size());
  while (!page.empty()) {
    const size_t eol = page.find('\n');
    std::string_view line = page.substr(0, eol == std::string_view::npos ? page.size() : eol + 1);
    page.remove_prefix(line.size());
    const bool help_or_type = line.starts_with("# HELP ") || line.starts_with("# TYPE ");
    if (!help_or_type && (line.empty() || line[0] == '#')) {
      out += line;
      continue;
    }
    if (help_or_type) {
      out += line.substr(0, 7);
      line.remove_prefix(7);
    }
    if (vllm_names) {
      if (auto renamed = vllm_name(line)) {
        out += renamed->first;
        line.remove_prefix(renamed->second);
      }
    }
    if (help_or_type) {
      out += line;
      continue;
    }
    const size_t brace = line.find('{');
    const size_t space = line.find(' ');
    if (brace != std::string_view::npos && brace < space) {
      out += line.substr(0, brace + 1);
      out += label;
      out += ',';
      out += line.substr(brace + 1);
    } else {
      out += line.substr(0, space);
      out += '{' + label + '}';
      out += line.substr(space);
    }
  }
  return out;
}

void gauge(std::string& out, std::string_view name, std::string_view help, std::string_view type, double v) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
}
}  // namespace

namespace {

/// Mixture of experts: tokens routed to each expert of each sparse layer, so a hot expert shows.
void render_experts(std::string& out, const actors::engine_stats& s) {
  const size_t experts = static_cast<size_t>(std::max(s.num_experts, 0));
  if (experts == 0 || s.moe_expert_tokens.size() != s.moe_layers.size() * experts) return;
  out += "# HELP actorserve:moe_expert_tokens_total Tokens routed to the expert (once per expert of a token's top k).\n"
         "# TYPE actorserve:moe_expert_tokens_total counter\n";
  for (size_t l = 0; l < s.moe_layers.size(); ++l)
    for (size_t e = 0; e < experts; ++e)
      out += fmt::format("actorserve:moe_expert_tokens_total{{layer=\"{}\",expert=\"{}\"}} {}\n", s.moe_layers[l], e,
                         s.moe_expert_tokens[l * experts + e]);
}

/// Per engine process of a front end: one sample per engine of each series.
void render_engines(std::string& out, const std::vector<actors::engine_node>& engines) {
  if (engines.empty()) return;
  auto series = [&](std::string_view name, std::string_view help, std::string_view type, auto value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const auto& e : engines) out += fmt::format("{}{{engine=\"{}\"}} {}\n", name, e.address, double(value(e)));
  };
  using node = actors::engine_node;
  series("actorserve:engine_up", "1 while the engine process is connected.", "gauge",
         [](const node& e) { return e.up ? 1 : 0; });
  series("actorserve:engine_num_requests_running", "Sequences running on the engine (its last report).", "gauge",
         [](const node& e) { return e.stats.num_running; });
  series("actorserve:engine_num_requests_waiting", "Sequences waiting on the engine (its last report).", "gauge",
         [](const node& e) { return e.stats.num_waiting; });
  series("actorserve:engine_kv_blocks_used", "KV blocks in use on the engine (its last report).", "gauge",
         [](const node& e) { return e.stats.kv_blocks_used; });
  series("actorserve:engine_prefix_cache_hits_total", "Prompt tokens found in the engine's prefix cache.", "counter",
         [](const node& e) { return e.stats.prefix_cache_hits; });
  series("actorserve:engine_prefix_cache_queries_total", "Prompt tokens looked up in the engine's prefix cache.",
         "counter", [](const node& e) { return e.stats.prefix_cache_queries; });
  series("actorserve:engine_requests_routed_total", "Requests this front end sent to the engine.", "counter",
         [](const node& e) { return e.requests_routed; });
  series("actorserve:engine_requests_resubmitted_total",
         "Requests or choices moved from the engine to others when it went down.", "counter",
         [](const node& e) { return e.requests_resubmitted; });
}

}  // namespace

std::string metrics::render(const actors::engine_stats& s, std::string_view model, int64_t active_jobs,
                            bool vllm_names, const std::vector<actors::engine_node>& engines) const {
  std::string out;
  out.reserve(8192);
  out += fmt::format("# actorserve metrics; model {}\n", model);
  gauge(out, "actorserve:num_requests_running", "Requests in the running batch.", "gauge", double(s.num_running));
  gauge(out, "actorserve:num_requests_waiting", "Requests waiting to be scheduled.", "gauge", double(s.num_waiting));
  gauge(out, "actorserve:kv_blocks_total", "KV cache blocks in the pool.", "gauge", double(s.kv_blocks_total));
  gauge(out, "actorserve:kv_blocks_used", "KV cache blocks in use.", "gauge", double(s.kv_blocks_used));
  gauge(out, "actorserve:kv_blocks_free", "KV cache blocks free.", "gauge", double(s.kv_blocks_free));
  gauge(out, "actorserve:kv_blocks_cached", "Free KV blocks that still hold a cached prefix.", "gauge", double(s.kv_blocks_cached));
  const double usage = s.kv_blocks_total > 0 ? double(s.kv_blocks_used) / double(s.kv_blocks_total) : 0.0;
  gauge(out, "actorserve:kv_cache_usage_perc", "Fraction of KV blocks in use.", "gauge", usage);
  gauge(out, "actorserve:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", "counter", double(s.prefix_cache_queries));
  gauge(out, "actorserve:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", "counter", double(s.prefix_cache_hits));
  const double hit_rate = s.prefix_cache_queries > 0 ? double(s.prefix_cache_hits) / double(s.prefix_cache_queries) : 0.0;
  gauge(out, "actorserve:prefix_cache_hit_rate", "Prefix cache hits / queries (tokens).", "gauge", hit_rate);
  gauge(out, "actorserve:num_preemptions_total", "Sequences preempted (recompute).", "counter", double(s.num_preemptions));
  gauge(out, "actorserve:num_recomputed_tokens_total", "Tokens recomputed after preemption.", "counter", double(s.num_recomputed_tokens));
  gauge(out, "actorserve:prompt_tokens_total", "Prompt tokens processed.", "counter", double(s.prompt_tokens));
  gauge(out, "actorserve:generation_tokens_total", "Tokens generated.", "counter", double(s.generation_tokens));
  gauge(out, "actorserve:num_steps_total", "Engine steps run.", "counter", double(s.num_steps));
  gauge(out, "actorserve:cascade_seqs_total", "Decodes whose shared prefix took one pass per group (cascade attention).", "counter", double(s.cascade_seqs));
  gauge(out, "actorserve:executor_restarts_total", "Executor restarts.", "counter", double(s.executor_restarts));
  gauge(out, "actorserve:requests_finished_total", "Engine requests finished.", "counter", double(s.requests_finished));
  gauge(out, "actorserve:requests_cancelled_total", "Engine requests cancelled.", "counter", double(s.requests_cancelled));
  gauge(out, "actorserve:engine_healthy", "1 while the engine loop makes progress.", "gauge", s.healthy ? 1.0 : 0.0);
  gauge(out, "actorserve:http_requests_total", "HTTP requests and WebSocket requests received.", "counter", double(http_requests.load()));
  gauge(out, "actorserve:http_errors_total", "Requests answered with an error.", "counter", double(http_errors.load()));
  gauge(out, "actorserve:streams_cut_total", "Streams cut because the client read too slowly.", "counter", double(streams_cut.load()));
  gauge(out, "actorserve:open_connections", "Open client connections.", "gauge", double(open_connections.load()));
  gauge(out, "actorserve:connections_refused_total", "Connections closed at accept (limit or no descriptors).", "counter", double(connections_refused.load()));
  gauge(out, "actorserve:connections_timed_out_total", "Connections closed by a header, body or idle deadline.", "counter", double(connections_timed_out.load()));
  gauge(out, "actorserve:active_jobs", "API requests between submit and their last byte.", "gauge", double(active_jobs));
  gauge(out, "actorserve:engine_requests_submitted_total", "Engine requests admitted.", "counter", double(engine_requests_submitted.load()));
  // An admitted engine request ends once, finished or cancelled (or failed, which neither counts):
  // without engine failures the difference is the number of request actors alive.
  gauge(out, "actorserve:engine_requests_alive", "Engine requests admitted and not yet finished or cancelled.", "gauge",
        double(engine_requests_submitted.load() - s.requests_finished - s.requests_cancelled));
  out += "# HELP actorserve:request_success_total Finished choices by finish reason.\n"
         "# TYPE actorserve:request_success_total counter\n";
  out += fmt::format("actorserve:request_success_total{{finished_reason=\"stop\"}} {}\n", finished_stop.load());
  out += fmt::format("actorserve:request_success_total{{finished_reason=\"length\"}} {}\n", finished_length.load());
  out += fmt::format("actorserve:request_success_total{{finished_reason=\"abort\"}} {}\n", finished_abort.load());
  out += fmt::format("actorserve:request_success_total{{finished_reason=\"error\"}} {}\n", finished_error.load());
  time_to_first_token.render(out, "actorserve:time_to_first_token_seconds", "Time to first token.");
  inter_token_latency.render(out, "actorserve:inter_token_latency_seconds", "Time between streamed deltas.");
  e2e_request_latency.render(out, "actorserve:e2e_request_latency_seconds", "Request latency, arrival to last token.");
  if (vllm_names) {
    // vLLM's name of the same observations before v0.10, which its older dashboards query.
    inter_token_latency.render(out, "vllm:time_per_output_token_seconds", "Time between streamed deltas.");
  }
  request_queue_time.render(out, "actorserve:request_queue_time_seconds",
                            "Per engine request: queued to first scheduled (scheduler clock).");
  request_prefill_time.render(out, "actorserve:request_prefill_time_seconds",
                              "Per engine request: first scheduled to first token (scheduler clock).");
  request_decode_time.render(out, "actorserve:request_decode_time_seconds",
                             "Per engine request: first token to last (scheduler clock).");
  request_inference_time.render(out, "actorserve:request_inference_time_seconds",
                                "Per engine request: first scheduled to last token (scheduler clock).");
  request_prompt_tokens.render(out, "actorserve:request_prompt_tokens", "Per engine request: prompt tokens.");
  request_generation_tokens.render(out, "actorserve:request_generation_tokens",
                                   "Per engine request: tokens generated over its choices.");
  request_params_n.render(out, "actorserve:request_params_n", "Per engine request: its n.");
  request_params_max_tokens.render(out, "actorserve:request_params_max_tokens", "Per engine request: its max_tokens.");
  {
    static const std::vector<double> bounds(std::begin(actors::iteration_tokens_bounds),
                                            std::end(actors::iteration_tokens_bounds));
    // Every step's tokens are counted in num_computed_tokens and every step in num_steps.
    render_histogram(out, "actorserve:iteration_tokens_total", "Tokens computed per engine step.", bounds,
                     s.iteration_tokens, double(s.num_computed_tokens), s.num_steps);
  }
  render_experts(out, s);
  render_engines(out, engines);
  return finish_page(out, model, vllm_names);
}

}  // namespace actorserve::server
