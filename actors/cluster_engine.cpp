// The engine facade of a front end of remote engines (`actorserve serve --engines`): the server
// sees the same `engine` as in one process. The tokenizer is this process's (from --model), so
// templates, tokenization, detokenization and stop strings stay here; request actors run here
// too, with the router (router_actor.cpp) as their upstream instead of a scheduler.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <algorithm>
#include <thread>

#include "actors/actor_spawn.hpp"
#include "actors/messages.hpp"
#include "actors/request_registry.hpp"
#include "config/log.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::actors {

namespace {

class cluster_engine final : public engine {
 public:
  cluster_engine(const engine_config& cfg, protocol::tokenizer tok) : cfg_(cfg), tok_(std::move(tok)) {
    caf_cfg_.set("scheduler.max-threads", 2);
    caf_cfg_.set("logger.console", caf::atom("none"));
    configure_network(caf_cfg_, cfg.cluster);
    system_ = std::make_unique<caf::actor_system>(caf_cfg_);
    stats_ = std::make_shared<stats_board>();
    view_ = std::make_shared<cluster_view>();
    for (const auto& at : cfg.cluster.engines) {
      engine_node n;
      n.address = at.host + ":" + std::to_string(at.port);
      view_->nodes.push_back(std::move(n));
    }
    auto mm = cfg.cluster.tls.enabled() ? system_->openssl_manager().actor_handle()
                                        : system_->middleman().actor_handle();
    router_ = spawn_router(*system_, cfg.cluster, std::move(mm), view_);
    upstream_ = router_;
  }

  ~cluster_engine() override {
    shutdown(std::chrono::milliseconds(0));
    registry_->clear();
    upstream_ = request_upstream();
    router_ = router_actor();
    system_.reset();
  }

  /// Waits for the first engine to answer and takes the model's limits from it.
  status wait_for_first(std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(view_->mu);
    if (!view_->changed.wait_for(lock, timeout, [this] { return view_->first.has_value(); })) {
      std::string list;
      for (const auto& n : view_->nodes) list += (list.empty() ? "" : ",") + n.address;
      return make_error(error_code::unavailable, fmt::format("--engines: no engine of {} answered within {} s", list,
                                                             timeout.count()));
    }
    info_ = *view_->first;
    model_name_ = !cfg_.model.served_model_name.empty() ? cfg_.model.served_model_name : info_.model_name;
    return {};
  }

  status submit(generation_request req, delta_sink sink) override {
    if (auto st = admissible(req); !st) return st;
    // NOTE: the seed is fixed here, so a request moved to another engine draws the same tokens.
    registry_->spawn(*system_, std::move(req), std::move(sink), upstream_, tok_, stats_, cfg_.executor.seed);
    return {};
  }

  status admissible(const generation_request& req) const {
    if (!registry_->accepting()) return make_error(error_code::unavailable, "the engine is shutting down");
    if (num_up() == 0) return make_error(error_code::unavailable, "no engine is up");
    if (auto st = check_request(req, {info_.vocab_size, info_.max_model_len, info_.logit_bias, "engines'"}); !st)
      return st;
    if (req.grammar) return make_error(error_code::unsupported, grammar_unsupported(req.grammar_field));
    return {};
  }

  result<std::shared_ptr<const grammar::compiled_grammar>> compile_grammar(
      const grammar::constraint_spec& spec) override {
    return make_error(error_code::unsupported, grammar_unsupported(spec.field));
  }

  static std::string grammar_unsupported(const std::string& field) {
    return fmt::format("{}: grammar-constrained decoding is not supported behind --engines yet (the masks are "
                       "computed where the engine runs, and requests cross to it without their grammar)",
                       field.empty() ? std::string("response_format") : field);
  }

  void cancel(const std::string& request_id) override { registry_->cancel(request_id); }

  /// The sums over the engines that are up, as their last reports gave them.
  engine_stats stats() const override {
    engine_stats sum;
    std::lock_guard<std::mutex> lock(view_->mu);
    bool any = false;
    for (const auto& n : view_->nodes) {
      if (!n.up) continue;
      const auto& s = n.stats;
      any = any || s.healthy;
      sum.num_running += s.num_running;
      sum.num_waiting += s.num_waiting;
      sum.kv_blocks_total += s.kv_blocks_total;
      sum.kv_blocks_used += s.kv_blocks_used;
      sum.kv_blocks_free += s.kv_blocks_free;
      sum.kv_blocks_cached += s.kv_blocks_cached;
      sum.kv_blocks_shared += s.kv_blocks_shared;
      sum.prefix_cache_queries += s.prefix_cache_queries;
      sum.prefix_cache_hits += s.prefix_cache_hits;
      sum.num_preemptions += s.num_preemptions;
      sum.num_recomputed_tokens += s.num_recomputed_tokens;
      sum.num_computed_tokens += s.num_computed_tokens;
      sum.prompt_tokens += s.prompt_tokens;
      sum.generation_tokens += s.generation_tokens;
      sum.num_steps += s.num_steps;
      sum.executor_restarts += s.executor_restarts;
      sum.timed_steps += s.timed_steps;
      sum.timed_tokens += s.timed_tokens;
      sum.step_busy_us += s.step_busy_us;
      sum.step_idle_us += s.step_idle_us;
      sum.decode_steps += s.decode_steps;
      sum.decode_seqs += s.decode_seqs;
      sum.decode_busy_us += s.decode_busy_us;
      sum.decode_idle_us += s.decode_idle_us;
      sum.untimed_busy_us += s.untimed_busy_us;
      sum.cascade_seqs += s.cascade_seqs;
      for (size_t i = 0; i < std::min(sum.iteration_tokens.size(), s.iteration_tokens.size()); ++i)
        sum.iteration_tokens[i] += s.iteration_tokens[i];
      // Every engine serves the same model: the first one's expert shape, then the sums.
      if (sum.moe_expert_tokens.empty()) {
        sum.moe_layers = s.moe_layers;
        sum.num_experts = s.num_experts;
        sum.moe_expert_tokens = s.moe_expert_tokens;
      } else if (s.moe_expert_tokens.size() == sum.moe_expert_tokens.size()) {
        for (size_t i = 0; i < s.moe_expert_tokens.size(); ++i) sum.moe_expert_tokens[i] += s.moe_expert_tokens[i];
      }
    }
    // This front end's requests (the engines' counts include other front ends').
    sum.requests_finished = stats_->requests_finished.load();
    sum.requests_cancelled = stats_->requests_cancelled.load();
    sum.healthy = any && registry_->accepting();
    return sum;
  }

  std::vector<engine_node> engines() const override {
    std::lock_guard<std::mutex> lock(view_->mu);
    return view_->nodes;
  }

  const protocol::tokenizer& tokenizer() const override { return tok_; }
  const std::string& model_name() const override { return model_name_; }
  int64_t max_model_len() const override { return info_.max_model_len; }

  void shutdown(std::chrono::milliseconds grace) override {
    // The request actors' cancels reach the router (and the engines) before it stops.
    registry_->stop(grace, std::chrono::seconds(2), [this] {
      caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
      system_->await_all_actors_done();
    });
  }

 private:
  size_t num_up() const {
    std::lock_guard<std::mutex> lock(view_->mu);
    return static_cast<size_t>(
        std::count_if(view_->nodes.begin(), view_->nodes.end(), [](const engine_node& n) { return n.up; }));
  }

  engine_config cfg_;
  protocol::tokenizer tok_;
  engine_info info_;
  std::string model_name_;
  caf::actor_system_config caf_cfg_;
  std::unique_ptr<caf::actor_system> system_;
  std::shared_ptr<stats_board> stats_;
  std::shared_ptr<cluster_view> view_;
  router_actor router_;
  request_upstream upstream_;             ///< router_, as the request actors see it
  std::shared_ptr<request_registry> registry_ = std::make_shared<request_registry>();
};

}  // namespace

result<std::unique_ptr<engine>> engine::connect(const engine_config& cfg) {
  if (auto st = validate(cfg); !st) return st.err();
  if (cfg.cluster.engines.empty()) return make_error(error_code::invalid_argument, "--engines: give HOST:PORT,...");
  auto tok = protocol::tokenizer::from_model_dir(cfg.model.model_dir);
  if (!tok) return tok.err();
  auto e = std::make_unique<cluster_engine>(cfg, std::move(tok.value()));
  if (auto st = e->wait_for_first(std::chrono::seconds(cfg.cluster.connect_timeout_s)); !st) return st.err();
  return std::unique_ptr<engine>(std::move(e));
}

}  // namespace actorserve::actors
