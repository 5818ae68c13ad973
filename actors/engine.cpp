// The engine facade: loads the tokenizer, makes an executor (gpu/executor_factory.hpp), starts the
// actor system and the service actors (scheduler, KV block manager, executor), and spawns one
// actor per request.
#include "actors/engine.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "actors/actor_spawn.hpp"
#include "actors/messages.hpp"
#include "actors/request_registry.hpp"
#include "config/log.hpp"
#include "gpu/executor_factory.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::actors {

const char* to_string(finish_reason r) {
  switch (r) {
    case finish_reason::stop: return "stop";
    case finish_reason::length: return "length";
    case finish_reason::cancelled: return "cancelled";
    case finish_reason::error: return "error";
  }
  return "error";
}

status check_request(const generation_request& req, const request_limits& lim) {
  if (auto st = validate(req.params); !st) return st;
  if (req.prompt_ids.empty()) return make_error(error_code::invalid_argument, "prompt: must not be empty");
  const int32_t vocab = lim.vocab_size;
  if (!req.params.logit_bias.empty() && !lim.logit_bias)
    return make_error(error_code::unsupported,
                      fmt::format("logit_bias: not supported by the {} executor yet", lim.executor_name));
  for (const auto& [id, bias] : req.params.logit_bias)
    if (vocab > 0 && id >= vocab)
      return make_error(error_code::invalid_argument,
                        fmt::format("logit_bias: token id {} is out of range (vocabulary size {})", id, vocab));
  for (int32_t id : req.prompt_ids) {
    if (id < 0 || (vocab > 0 && id >= vocab))
      return make_error(error_code::invalid_argument, fmt::format("prompt: token id {} is out of range", id));
  }
  if (static_cast<int64_t>(req.prompt_ids.size()) >= lim.max_model_len)
    return make_error(error_code::too_large, fmt::format("prompt: {} tokens leave no room under max_model_len {}",
                                                         req.prompt_ids.size(), lim.max_model_len));
  return {};
}

namespace {

/// A step that has not finished this long while work is pending makes the engine unhealthy.
constexpr std::chrono::seconds wedge_timeout{30};
/// Supervision: a step not done after this long has failed (the executor is replaced), and
/// more than `max_executor_restarts` failures within `restart_window` give up.
constexpr std::chrono::seconds step_timeout{60};
constexpr int32_t max_executor_restarts = 3;
constexpr std::chrono::seconds restart_window{60};

class engine_impl final : public engine {
 public:
  engine_impl(const engine_config& cfg, protocol::tokenizer tok, std::shared_ptr<gpu::executor> ex,
              executor_factory make_executor)
      : cfg_(cfg), tok_(std::move(tok)), info_(ex->info()), logit_bias_(ex->supports_logit_bias()),
        token_masks_(ex->supports_token_masks()) {
    const auto& info = info_;
    max_model_len_ = info.max_model_len;
    std::filesystem::path dir(cfg.model.model_dir);
    model_name_ = !cfg.model.served_model_name.empty() ? cfg.model.served_model_name
                                                      : dir.lexically_normal().filename().string();
    if (model_name_.empty()) model_name_ = dir.lexically_normal().parent_path().filename().string();

    scheduler_config sc;
    sc.max_num_seqs = static_cast<int32_t>(cfg.scheduler.max_num_seqs);
    sc.max_num_batched_tokens = static_cast<int32_t>(cfg.scheduler.max_num_batched_tokens);
    sc.enable_chunked_prefill = cfg.scheduler.enable_chunked_prefill;
    sc.async_scheduling = cfg.scheduler.async_scheduling;
    sc.block_size = info.block_size;
    sc.enable_prefix_caching = cfg.cache.enable_prefix_caching;
    sc.max_model_len = info.max_model_len;
    sc.eos_token_ids = info.eos_token_ids;
    for (int32_t id : tok_.eos_token_ids()) {
      if (std::find(sc.eos_token_ids.begin(), sc.eos_token_ids.end(), id) == sc.eos_token_ids.end())
        sc.eos_token_ids.push_back(id);
    }
    eos_token_ids_ = sc.eos_token_ids;
    int32_t num_blocks = info.num_blocks;
    if (cfg.cache.num_gpu_blocks_override)
      num_blocks = std::min<int32_t>(num_blocks, static_cast<int32_t>(*cfg.cache.num_gpu_blocks_override));

    caf_cfg_.set("scheduler.max-threads", 2);
    caf_cfg_.set("logger.console", caf::atom("none"));
    if (cfg.cluster.listen) configure_network(caf_cfg_, cfg.cluster);
    system_ = std::make_unique<caf::actor_system>(caf_cfg_);
    stats_ = std::make_shared<stats_board>();
    stats_->set_moe_shape(info_.moe_layers, info_.num_experts);
    stats_->mark_progress();
    block_manager_ = spawn_kv_block_manager(*system_, num_blocks, info.block_size, cfg.cache.enable_prefix_caching,
                                            stats_);
    // The executor actor owns the executor: a restart must be able to free it (device memory).
    executor_actor_ = spawn_executor_actor(*system_, std::move(ex), std::move(make_executor));
    supervision_config sup;
    sup.step_timeout = step_timeout;
    sup.max_restarts = max_executor_restarts;
    sup.restart_window = restart_window;
    sup.num_blocks = num_blocks;
    scheduler_ = spawn_scheduler(*system_, std::move(sc), block_manager_, executor_actor_, stats_, sup);
    upstream_ = scheduler_;
    stats_->alive = true;
    log::info("engine: model {} on the {} executor, {} KV blocks of {} tokens, max_model_len {}", model_name_,
              info.name, num_blocks, info.block_size, max_model_len_);
    if (info.host_kv_cache_bytes > 0)
      log::info("engine: the KV cache takes up to {:.1f} MiB of host memory; the process grows towards it as "
                "blocks are first used, then stays level", double(info.host_kv_cache_bytes) / double(1 << 20));
  }

  ~engine_impl() override {
    shutdown(std::chrono::milliseconds(0));
    registry_->clear();
    gate_ = engine_gate_actor();
    upstream_ = request_upstream();
    scheduler_ = scheduler_actor();
    block_manager_ = kv_block_manager_actor();
    executor_actor_ = executor_actor();
    system_.reset();
  }

  status submit(generation_request req, delta_sink sink) override {
    if (auto st = admissible(req); !st) return st;
    spawn_one(std::move(req), std::move(sink));
    return {};
  }

  std::vector<status> submit_batch(std::vector<std::pair<generation_request, delta_sink>> batch) override {
    std::vector<status> out;
    out.reserve(batch.size());
    uint32_t admitted = 0;
    for (const auto& [req, sink] : batch) {
      out.push_back(admissible(req));
      admitted += out.back().ok() ? 1 : 0;
    }
    // NOTE: sent before the first request actor exists, so it is in the scheduler's mailbox
    // ahead of every enqueue of this batch.
    if (admitted > 1) caf::anon_send(scheduler_, hold_atom::value, admitted);
    for (size_t i = 0; i < batch.size(); ++i)
      if (out[i].ok()) spawn_one(std::move(batch[i].first), std::move(batch[i].second));
    return out;
  }

  /// What submit refuses at once: a stopping or failed engine, bad parameters or prompt ids.
  status admissible(const generation_request& req) const {
    if (!registry_->accepting()) return make_error(error_code::unavailable, "the engine is shutting down");
    if (stats_->gave_up.load()) return make_error(error_code::unavailable, stats_->failure());
    if (auto st = check_request(req, {info_.vocab_size, max_model_len_, logit_bias_, info_.name}); !st) return st;
    if (req.grammar && !token_masks_)
      return make_error(error_code::unsupported, grammar_unsupported(req.grammar_field));
    if (req.grammar && req.grammar->vocab().size() != info_.vocab_size)
      return make_error(error_code::internal, "grammar: compiled for another vocabulary");
    return {};
  }

  result<std::shared_ptr<const grammar::compiled_grammar>> compile_grammar(const grammar::constraint_spec& spec) override {
    if (!token_masks_) return make_error(error_code::unsupported, grammar_unsupported(spec.field));
    std::call_once(grammar_once_, [this] {
      const auto t0 = std::chrono::steady_clock::now();
      grammars_ = std::make_unique<grammar::grammar_compiler>(make_vocabulary());
      log::info("engine: grammar vocabulary of {} tokens ready in {:.0f} ms", info_.vocab_size,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    });
    return grammars_->compile(spec);
  }

  std::string grammar_unsupported(const std::string& field) const {
    return fmt::format("{}: grammar-constrained decoding is not supported by the {} executor yet (its sampler "
                       "applies no token masks)",
                       field.empty() ? std::string("response_format") : field, info_.name);
  }

  /// The model's vocabulary as grammar masks see it: each id's bytes; special tokens and ids
  /// past the tokenizer's never inside a grammar; EOS ids where it is complete.
  std::shared_ptr<const grammar::vocabulary> make_vocabulary() const {
    const int32_t n = std::min(info_.vocab_size, tok_.vocab_size());
    std::vector<std::string> bytes(static_cast<size_t>(std::max(n, 0)));
    std::vector<uint8_t> excluded(bytes.size(), 0);
    for (int32_t id = 0; id < n; ++id) {
      if (auto b = tok_.token_bytes(id)) bytes[static_cast<size_t>(id)] = std::move(*b);
      excluded[static_cast<size_t>(id)] = tok_.is_special(id) ? 1 : 0;
    }
    return std::make_shared<const grammar::vocabulary>(info_.vocab_size, std::move(bytes), std::move(excluded),
                                                       eos_token_ids_);
  }

  void spawn_one(generation_request req, delta_sink sink) {
    registry_->spawn(*system_, std::move(req), std::move(sink), upstream_, tok_, stats_, cfg_.executor.seed);
  }

  void cancel(const std::string& request_id) override { registry_->cancel(request_id); }

  result<uint16_t> publish() override {
    if (!cfg_.cluster.listen) return engine::publish();
    gate_context ctx;
    ctx.scheduler = scheduler_;
    ctx.info = {wire_version, model_name_, info_.vocab_size, info_.block_size, max_model_len_, logit_bias_};
    ctx.stats = [this] { return stats(); };
    ctx.admissible = [this](const generation_request& r) { return admissible(r); };
    ctx.next_group = [reg = registry_] { return reg->next_group(); };
    ctx.on_abandoned = [board = stats_] { board->requests_cancelled.fetch_add(1, std::memory_order_relaxed); };
    gate_ = spawn_engine_gate(*system_, std::move(ctx));
    const auto& at = *cfg_.cluster.listen;
    auto port = cfg_.cluster.tls.enabled() ? caf::openssl::publish(gate_, at.port, at.host.c_str(), true)
                                           : caf::io::publish(gate_, at.port, at.host.c_str(), true);
    if (!port)
      return make_error(error_code::unavailable, fmt::format("--listen: cannot publish on {}:{}: {}", at.host, at.port,
                                                             caf::to_string(port.error())));
    return *port;
  }

  engine_stats stats() const override {
    const auto& s = *stats_;
    constexpr auto r = std::memory_order_relaxed;
    engine_stats e;
    e.num_running = s.num_running.load(r);
    e.num_waiting = s.num_waiting.load(r);
    e.kv_blocks_total = s.kv_blocks_total.load(r);
    e.kv_blocks_used = s.kv_blocks_used.load(r);
    e.kv_blocks_free = s.kv_blocks_free.load(r);
    e.kv_blocks_cached = s.kv_blocks_cached.load(r);
    e.kv_blocks_shared = s.kv_blocks_shared.load(r);
    e.prefix_cache_queries = s.prefix_cache_queries.load(r);
    e.prefix_cache_hits = s.prefix_cache_hits.load(r);
    e.num_preemptions = s.num_preemptions.load(r);
    e.num_recomputed_tokens = s.num_recomputed_tokens.load(r);
    e.num_computed_tokens = s.num_computed_tokens.load(r);
    e.prompt_tokens = s.prompt_tokens.load(r);
    e.generation_tokens = s.generation_tokens.load(r);
    e.num_steps = s.num_steps.load(r);
    e.executor_restarts = s.executor_restarts.load(r);
    e.requests_finished = s.requests_finished.load(r);
    e.requests_cancelled = s.requests_cancelled.load(r);
    e.timed_steps = s.timed_steps.load(r);
    e.timed_tokens = s.timed_tokens.load(r);
    e.step_busy_us = s.step_busy_us.load(r);
    e.step_idle_us = s.step_idle_us.load(r);
    e.decode_steps = s.decode_steps.load(r);
    e.decode_seqs = s.decode_seqs.load(r);
    e.decode_busy_us = s.decode_busy_us.load(r);
    e.decode_idle_us = s.decode_idle_us.load(r);
    e.untimed_busy_us = s.untimed_busy_us.load(r);
    e.cascade_seqs = s.cascade_seqs.load(r);
    for (size_t i = 0; i < s.iteration_tokens.size(); ++i) e.iteration_tokens[i] = s.iteration_tokens[i].load(r);
    s.read_experts(e);
    const bool pending = e.num_running + e.num_waiting > 0;
    const auto since = std::chrono::steady_clock::now().time_since_epoch() -
                       std::chrono::steady_clock::duration(s.last_progress_ns.load(r));
    e.healthy = s.alive.load() && !s.restarting.load() && !s.gave_up.load() && (!pending || since < wedge_timeout);
    return e;
  }

  const protocol::tokenizer& tokenizer() const override { return tok_; }
  const std::string& model_name() const override { return model_name_; }
  int64_t max_model_len() const override { return max_model_len_; }

  void shutdown(std::chrono::milliseconds grace) override {
    registry_->stop(grace, std::chrono::milliseconds(0), [this] {
      if (gate_) caf::anon_send_exit(gate_, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(scheduler_, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(block_manager_, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(executor_actor_, caf::exit_reason::user_shutdown);
      system_->await_all_actors_done();
      stats_->alive = false;
    });
  }

 private:
  engine_config cfg_;
  protocol::tokenizer tok_;
  gpu::executor_info info_;
  bool logit_bias_ = false;               ///< the executor's sampler applies logit_bias
  bool token_masks_ = false;              ///< the executor's sampler applies grammar masks
  std::vector<int32_t> eos_token_ids_;
  std::once_flag grammar_once_;
  std::unique_ptr<grammar::grammar_compiler> grammars_;  ///< made at the first constrained request
  int64_t max_model_len_ = 0;
  std::string model_name_;
  caf::actor_system_config caf_cfg_;
  std::unique_ptr<caf::actor_system> system_;
  std::shared_ptr<stats_board> stats_;
  kv_block_manager_actor block_manager_;
  executor_actor executor_actor_;
  scheduler_actor scheduler_;
  request_upstream upstream_;             ///< scheduler_, as the request actors see it
  engine_gate_actor gate_;                ///< set by publish()
  std::shared_ptr<request_registry> registry_ = std::make_shared<request_registry>();
};

}  // namespace

result<std::unique_ptr<engine>> engine::start(const engine_config& cfg) {
  return start(cfg, [cfg] { return gpu::make_executor(cfg); });
}

result<std::unique_ptr<engine>> engine::start(
    const engine_config& cfg, std::function<result<std::unique_ptr<gpu::executor>>()> make_executor) {
  if (auto st = validate(cfg); !st) return st.err();
  auto tok = protocol::tokenizer::from_model_dir(cfg.model.model_dir);
  if (!tok) return tok.err();
  auto ex = make_executor();
  if (!ex) return ex.err();
  return std::unique_ptr<engine>(new engine_impl(cfg, std::move(tok.value()),
                                                 std::shared_ptr<gpu::executor>(std::move(ex.value())),
                                                 std::move(make_executor)));
}

}  // namespace actorserve::actors
