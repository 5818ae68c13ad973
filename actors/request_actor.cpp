// The request actor: one per request. It turns the scheduler's sampled tokens into deltas (text
// through the incremental detokenizer and the stop matcher, logprobs, finish reasons, usage) and
// owns the request's deadline and cancellation.
#include <optional>

#include "actors/actor_spawn.hpp"
#include "actors/messages.hpp"
#include "grammar/matcher.hpp"
#include "protocol/stop/stop_matcher.hpp"
#include "protocol/tokenizer/incremental_detokenizer.hpp"

namespace actorserve::actors {

namespace {

struct choice_state {
  std::optional<protocol::incremental_detokenizer> detok;
  std::optional<protocol::stop_matcher> stop;
  bool done = false;
};

struct request_state {
  generation_request req;
  delta_sink sink;
  request_upstream upstream;   ///< the scheduler, or a front end's router
  const protocol::tokenizer* tok = nullptr;
  std::shared_ptr<stats_board> stats;
  uint64_t group_id = 0;
  std::vector<choice_state> choices;
  int32_t remaining = 0;
  usage_counts usage;
  request_clock clock;          ///< the scheduler's milestones over the choices
  bool sink_open = true;
  static inline const char* name = "request";
};

using request_self = request_actor::stateful_pointer<request_state>;

finish_reason to_reason(seq_finish f) {
  switch (f) {
    case seq_finish::stop:
    case seq_finish::complete: return finish_reason::stop;
    case seq_finish::length: return finish_reason::length;
    case seq_finish::aborted: return finish_reason::cancelled;
    default: return finish_reason::error;
  }
}

/// Quits, first removing this actor's monitor from the upstream: a monitor left behind is a
/// weak reference that keeps the finished actor's memory alive for as long as the upstream runs.
void stop(request_self self) {
  self->demonitor(self->state.upstream.address());
  self->quit();
}

/// Delivers one delta; marks the choice done when the delta finishes it and ends the actor after
/// the last choice. Returns false when the request ended.
bool deliver(request_self self, delta d) {
  auto& st = self->state;
  if (d.finish) {
    st.choices[static_cast<size_t>(d.index)].done = true;
    if (--st.remaining == 0) {
      d.usage = st.usage;
      d.times = st.clock.times();
    }
  }
  const bool last = st.remaining == 0;
  // NOTE: counted before the sink sees the end, so stats are current when the consumer wakes.
  if (last) st.stats->requests_finished.fetch_add(1, std::memory_order_relaxed);
  if (st.sink_open && !st.sink(std::move(d))) {
    st.sink_open = false;
    if (!last) {
      // The consumer asked to stop: cancel what is left without calling it again.
      self->send(st.upstream, abort_atom::value, st.group_id, int32_t{-1});
      st.stats->requests_cancelled.fetch_add(1, std::memory_order_relaxed);
      stop(self);
      return false;
    }
  }
  if (last) {
    stop(self);
    return false;
  }
  return true;
}

/// Ends every open choice with `why` (cancel, deadline, engine failure).
void end_all(request_self self, finish_reason why, std::optional<error> failure) {
  auto& st = self->state;
  self->send(st.upstream, abort_atom::value, st.group_id, int32_t{-1});
  if (why == finish_reason::cancelled) st.stats->requests_cancelled.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < st.choices.size(); ++i) {
    if (st.choices[i].done) continue;
    delta d;
    d.index = static_cast<int32_t>(i);
    d.finish = why;
    d.failure = failure;
    st.choices[i].done = true;
    if (--st.remaining == 0) {
      d.usage = st.usage;
      d.times = st.clock.times();
    }
    if (st.sink_open && !st.sink(std::move(d))) st.sink_open = false;
  }
  stop(self);
}

logprob_entry make_logprob(const request_state& st, const gpu::sampled_token& t) {
  logprob_entry e;
  e.token_id = t.token_id;
  e.token = st.tok->decode(std::span<const int32_t>(&t.token_id, 1), false);
  e.logprob = t.logprob;
  for (const auto& alt : t.top_logprobs) e.top.emplace_back(alt.token_id, alt.logprob);
  return e;
}

void on_outputs(request_self self, output_batch& batch) {
  auto& st = self->state;
  for (auto& o : batch.outputs) {
    if (o.index < 0 || static_cast<size_t>(o.index) >= st.choices.size()) continue;
    auto& c = st.choices[static_cast<size_t>(o.index)];
    if (c.done) continue;
    st.usage.cached_prompt_tokens = std::max<int64_t>(st.usage.cached_prompt_tokens, o.num_cached);
    st.usage.num_preemptions = std::max<int64_t>(st.usage.num_preemptions, o.num_preemptions);
    st.usage.num_recomputed_tokens = std::max<int64_t>(st.usage.num_recomputed_tokens, o.num_recomputed);
    st.clock.add(o);
    delta d;
    d.index = o.index;
    bool stopped = false;
    if (o.has_token) {
      ++st.usage.completion_tokens;
      d.token_ids.push_back(o.token.token_id);
      // A token that ends the sequence (EOS, stop_token_ids) is not part of the text, as in
      // vLLM; it matters when special tokens are kept (skip_special_tokens false).
      std::string text = o.finish == seq_finish::stop ? std::string() : c.detok->push(o.token.token_id);
      if (c.stop) {
        auto out = c.stop->push(text);
        text = std::move(out.text_to_emit);
        stopped = out.stopped;
      }
      d.text = std::move(text);
      if (st.req.params.num_logprobs >= 0) d.logprobs.push_back(make_logprob(st, o.token));
    }
    if (stopped) {
      d.finish = finish_reason::stop;
      if (o.finish == seq_finish::none) self->send(st.upstream, abort_atom::value, st.group_id, o.index);
    } else if (o.finish != seq_finish::none) {
      std::string tail = c.detok->flush();
      if (c.stop) {
        auto out = c.stop->push(tail);
        tail = std::move(out.text_to_emit);
        if (!out.stopped) tail += c.stop->flush();
      }
      d.text += tail;
      d.finish = to_reason(o.finish);
      if (o.finish == seq_finish::error)
        d.failure = make_error(error_code::internal, "the sequence failed (executor error or KV cache too small)");
      if (o.finish == seq_finish::grammar_overflow)
        d.failure = make_error(error_code::invalid_argument, grammar::matcher::overflow_message());
    }
    if (!deliver(self, std::move(d))) return;
  }
}

request_actor::behavior_type request(request_self self, generation_request req, delta_sink sink,
                                     request_upstream upstream, const protocol::tokenizer* tok,
                                     std::shared_ptr<stats_board> stats, uint64_t group_id, uint64_t seed) {
  auto& st = self->state;
  st.req = std::move(req);
  st.sink = std::move(sink);
  st.upstream = std::move(upstream);
  st.tok = tok;
  st.stats = std::move(stats);
  st.group_id = group_id;
  const int32_t n = std::max(1, st.req.params.n);
  st.choices.resize(static_cast<size_t>(n));
  for (auto& c : st.choices) {
    c.detok.emplace(*tok, st.req.prompt_ids, st.req.params.skip_special_tokens);
    if (!st.req.params.stop.empty()) c.stop.emplace(st.req.params.stop);
  }
  st.remaining = n;
  st.usage.prompt_tokens = static_cast<int64_t>(st.req.prompt_ids.size());

  self->monitor(st.upstream);
  self->set_down_handler([self](caf::down_msg&) {
    end_all(self, finish_reason::error, make_error(error_code::unavailable, "the engine stopped"));
  });
  new_request nr;
  nr.group_id = group_id;
  nr.prompt = st.req.prompt_ids;
  nr.params = std::make_shared<const sampling_params>(st.req.params);
  nr.seed = seed;
  nr.priority = st.req.priority;
  nr.grammar = st.req.grammar;
  self->send(st.upstream, enqueue_atom::value, std::move(nr), request_actor{self});
  if (st.req.deadline) {
    const auto left = *st.req.deadline - std::chrono::steady_clock::now();
    self->delayed_send(self, std::max(left, std::chrono::steady_clock::duration::zero()), deadline_atom::value);
  }
  return {
      [self](outputs_atom, output_batch& batch) { on_outputs(self, batch); },
      [self](cancel_atom) { end_all(self, finish_reason::cancelled, std::nullopt); },
      [self](deadline_atom) { end_all(self, finish_reason::cancelled, std::nullopt); },
      [self](fail_atom, const std::string& why) {
        end_all(self, finish_reason::error, make_error(error_code::unavailable, why));
      },
  };
}

}  // namespace

request_actor spawn_request(caf::actor_system& sys, generation_request req, delta_sink sink,
                            const request_context& ctx) {
  return sys.spawn(request, std::move(req), std::move(sink), *ctx.upstream, ctx.tokenizer, ctx.stats, ctx.group_id,
                   ctx.seed);
}

}  // namespace actorserve::actors
