#include "actors/scheduler_policy.hpp"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <tuple>

#include "actors/block_hash.hpp"
#include "config/check.hpp"

namespace actorserve::actors {

namespace {
bool served_before(const sequence& a, const sequence& b) {
  return std::tie(a.priority, a.arrival) < std::tie(b.priority, b.arrival);
}
/// What a step tells a sequence's request: `tok` (if sampled), how it ended, its usage counts.
seq_output output_of(const sequence& s, seq_finish why, const gpu::sampled_token* tok) {
  seq_output o;
  o.group_id = s.group_id;
  o.index = s.index;
  o.has_token = tok != nullptr;
  if (tok) o.token = *tok;
  o.finish = why;
  o.num_cached = s.num_cached;
  o.num_preemptions = s.num_preemptions;
  o.num_recomputed = s.num_recomputed;
  auto since_queued = [&](int64_t t) { return t < 0 || s.times.queued_us < 0 ? -1 : t - s.times.queued_us; };
  o.scheduled_us = since_queued(s.times.scheduled_us);
  o.first_token_us = since_queued(s.times.first_token_us);
  o.last_token_us = since_queued(s.times.last_token_us);
  return o;
}

/// The bucket of iteration_tokens_bounds that a step of `tokens` falls in (`le` semantics).
size_t iteration_bucket(int64_t tokens) {
  size_t i = 0;
  while (i < std::size(iteration_tokens_bounds) && tokens > iteration_tokens_bounds[i]) ++i;
  return i;
}
}  // namespace

int64_t steady_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void request_clock::add(const seq_output& o) {
  auto earliest = [](int64_t& mine, int64_t theirs) {
    if (theirs >= 0 && (mine < 0 || theirs < mine)) mine = theirs;
  };
  earliest(scheduled_us, o.scheduled_us);
  earliest(first_token_us, o.first_token_us);
  last_token_us = std::max(last_token_us, o.last_token_us);
}

request_times request_clock::times() const {
  request_times t;
  auto span = [](int64_t from_us, int64_t to_us) -> std::optional<double> {
    if (from_us < 0 || to_us < 0) return std::nullopt;
    return static_cast<double>(std::max<int64_t>(0, to_us - from_us)) / 1e6;
  };
  t.queue_s = span(0, scheduled_us);
  t.prefill_s = span(scheduled_us, first_token_us);
  t.decode_s = span(first_token_us, last_token_us);
  t.inference_s = span(scheduled_us, last_token_us);
  return t;
}

scheduler_policy::scheduler_policy(scheduler_config cfg, scheduler_clock clock)
    : cfg_(std::move(cfg)), clock_(std::move(clock)) {
  AS_CHECK(cfg_.block_size > 0 && cfg_.max_num_batched_tokens > 0 && cfg_.max_num_seqs > 0, "scheduler limits");
  AS_CHECK(static_cast<bool>(clock_), "scheduler clock");
}

scheduler_policy::~scheduler_policy() = default;

const sequence* scheduler_policy::find(uint64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

sequence* scheduler_policy::lookup(uint64_t seq_id) {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

std::vector<uint64_t> scheduler_policy::group(uint64_t group_id) const {
  auto it = groups_.find(group_id);
  return it == groups_.end() ? std::vector<uint64_t>{} : it->second;
}

void scheduler_policy::add(new_request r) {
  auto s = std::make_unique<sequence>();
  s->seq_id = next_seq_id_++;
  s->group_id = r.group_id;
  s->index = r.index;
  s->priority = r.priority;
  s->arrival = next_arrival_++;
  s->params = std::move(r.params);
  s->seed = r.seed;
  s->tokens = std::move(r.prompt);
  s->num_prompt = s->num_tokens() - std::clamp(r.num_generated, 0, s->num_tokens() - 1);
  if (r.grammar) {
    s->matcher = std::make_shared<grammar::matcher>(std::move(r.grammar));
    // A resumed choice's generated tokens already followed the grammar: replay them.
    for (int32_t i = s->num_prompt; i < s->num_tokens(); ++i) s->matcher->accept_token(s->tokens[static_cast<size_t>(i)]);
  }
  s->fork_n = std::max(1, s->params->n);
  s->times.queued_us = clock_();
  if (cfg_.enable_prefix_caching) extend_block_hashes(s->block_hashes, s->tokens, cfg_.block_size);
  counters_.prompt_tokens += s->num_prompt;
  sequence* raw = s.get();
  groups_[r.group_id].push_back(raw->seq_id);
  seqs_.emplace(raw->seq_id, std::move(s));
  if (raw->fork_n > 1 && raw->target() == 0) {
    fork(*raw);  // a one-token prompt has nothing to share: the children start as waiting
    return;
  }
  insert_waiting(raw);
}

void scheduler_policy::insert_waiting(sequence* s) {
  s->status = seq_status::waiting;
  auto pos = waiting_.end();
  while (pos != waiting_.begin() && served_before(*s, **std::prev(pos))) --pos;
  waiting_.insert(pos, s);
}

void scheduler_policy::abort(uint64_t group_id, int32_t index) {
  if (awaiting_answer_) {
    deferred_aborts_.emplace_back(group_id, index);
    return;
  }
  abort_now(group_id, index);
}

void scheduler_policy::abort_now(uint64_t group_id, int32_t index) {
  auto git = groups_.find(group_id);
  if (git == groups_.end()) return;
  const auto ids = git->second;
  for (uint64_t id : ids) {
    sequence* s = lookup(id);
    // A choice is dropped alone; a fork parent stands for every choice, so only a whole-request
    // abort removes it.
    if (!s || (index >= 0 && (s->index != index || s->fork_n > 1))) continue;
    finish(*s, seq_finish::aborted);
  }
}

void scheduler_policy::flush_deferred_aborts() {
  const auto aborts = std::move(deferred_aborts_);
  deferred_aborts_.clear();
  for (auto [g, i] : aborts) abort_now(g, i);
}

seq_output scheduler_policy::fail(sequence& s) {
  seq_output out = output_of(s, seq_finish::error, nullptr);
  finish(s, seq_finish::error);
  return out;
}

void scheduler_policy::finish(sequence& s, seq_finish why) {
  s.finish = why;
  if (s.pending_mask) s.pending_mask->abandon();  // a sampler waiting on it goes on
  if (s.status == seq_status::running) {
    running_.erase(std::find(running_.begin(), running_.end(), &s));
  } else if (s.status == seq_status::waiting) {
    auto it = std::find(waiting_.begin(), waiting_.end(), &s);
    if (it != waiting_.end()) waiting_.erase(it);
  }
  s.status = seq_status::finished;
  if (s.holds_blocks || s.fork_parent) pending_frees_.push_back({s.seq_id, s.num_computed});
  auto git = groups_.find(s.group_id);
  if (git != groups_.end()) {
    auto& ids = git->second;
    ids.erase(std::find(ids.begin(), ids.end(), s.seq_id));
    if (ids.empty()) groups_.erase(git);
  }
  const uint64_t id = s.seq_id;  // `s` dies with the erase
  seqs_.erase(id);
}

void scheduler_policy::preempt(sequence& s) {
  if (s.pending_mask) s.pending_mask->abandon();
  s.pending_mask.reset();
  pending_frees_.push_back({s.seq_id, s.num_computed});
  s.recompute_until = std::max(s.recompute_until, s.num_computed);
  s.num_computed = 0;
  s.block_table.clear();
  s.holds_blocks = false;
  s.num_hashes_sent = 0;
  ++s.num_preemptions;
  ++counters_.num_preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), &s));
  insert_waiting(&s);
}

void scheduler_policy::fork(sequence& parent) {
  std::vector<sequence*> children;
  for (int32_t i = 0; i < parent.fork_n; ++i) {
    auto c = std::make_unique<sequence>(parent);
    c->seq_id = next_seq_id_++;
    c->index = i;
    c->fork_n = 1;
    c->seed = child_seed(parent.seed, i);
    if (parent.matcher) c->matcher = std::make_shared<grammar::matcher>(*parent.matcher);
    if (parent.holds_blocks) {
      c->fork_parent = parent.seq_id;
      pending_forks_.push_back({parent.seq_id, c->seq_id});
    }
    children.push_back(c.get());
    groups_[parent.group_id].push_back(c->seq_id);
    seqs_.emplace(c->seq_id, std::move(c));
  }
  if (parent.status == seq_status::running) {
    auto pos = running_.erase(std::find(running_.begin(), running_.end(), &parent));
    running_.insert(pos, children.begin(), children.end());
    for (sequence* c : children) c->status = seq_status::running;
    parent.status = seq_status::finished;  // not in any queue now; its blocks go with the frees
  } else {
    for (sequence* c : children) insert_waiting(c);
  }
  finish(parent, seq_finish::none);
}

std::optional<kv_reservation> scheduler_policy::plan() {
  AS_CHECK(in_flight_.empty(), "plan() with a step in flight");
  ahead_ = false;
  return plan_impl(true);
}

std::optional<kv_reservation> scheduler_policy::plan_ahead() {
  AS_CHECK(in_flight_.size() == 1, "plan_ahead() needs exactly one step in flight");
  ahead_ = true;
  return plan_impl(true);
}

bool scheduler_policy::may_plan_ahead(const sequence& s) const {
  if (s.num_inflight_samples == 0) return true;  // prefill continues with known tokens
  if (s.num_inflight_samples > 1 || s.fork_n > 1) return false;
  const sampling_params& p = *s.params;
  if (p.uses_penalties()) return false;          // the history must hold the pending token
  if (s.eff_generated() >= p.max_tokens) return false;  // the pending token ends it by length
  if (cfg_.max_model_len > 0 && s.eff_tokens() >= cfg_.max_model_len) return false;
  return true;
}

kv_item scheduler_policy::make_item(sequence& s, int32_t num_new, bool from_waiting) {
  kv_item it;
  it.seq_id = s.seq_id;
  it.num_computed = s.eff_computed();
  it.num_tokens = s.eff_target();
  it.num_new = num_new;
  it.lookup = from_waiting;
  it.optional = from_waiting;
  const size_t first = from_waiting ? 0 : static_cast<size_t>(s.num_hashes_sent);
  it.new_hashes.assign(s.block_hashes.begin() + static_cast<std::ptrdiff_t>(first), s.block_hashes.end());
  if (!from_waiting) s.num_hashes_sent = static_cast<int32_t>(s.block_hashes.size());
  return it;
}

int32_t scheduler_policy::least_new_tokens(const sequence& s) const {
  const int32_t n = s.target();
  if (!cfg_.enable_prefix_caching) return n;
  // The pool serves at most the full blocks it has hashes for, and never the last token.
  const int32_t cacheable = std::min<int32_t>((n - 1) / cfg_.block_size, static_cast<int32_t>(s.block_hashes.size()));
  return std::max(1, n - cacheable * cfg_.block_size);
}

std::optional<kv_reservation> scheduler_policy::plan_impl(bool admit) {
  kv_reservation r;
  r.step_id = next_step_id_;
  r.forks = std::move(pending_forks_);
  r.frees = std::move(pending_frees_);
  pending_forks_.clear();
  pending_frees_.clear();
  planned_.clear();
  r.items.reserve(running_.size() + (admit ? std::min<size_t>(waiting_.size(), 64) : 0));
  int32_t budget = cfg_.max_num_batched_tokens;
  const bool chunked = cfg_.enable_chunked_prefill;
  for (sequence* s : running_) {
    if (budget == 0) break;
    int32_t n = s->eff_uncomputed();
    if (n <= 0 || (ahead_ && !may_plan_ahead(*s))) continue;
    if (!chunked && n > budget && !planned_.empty()) continue;
    n = std::min(n, budget);
    r.items.push_back(make_item(*s, n, false));
    planned_.push_back({s, false});
    budget -= n;
  }
  const size_t running_planned = planned_.size();
  // Admission: the pool charges each waiting candidate only the tokens left after its prefix
  // lookup (kv_reservation::admit_tokens), so the candidates ask for their whole prompt. They are
  // listed while the least each could cost (its prompt past the blocks the cache could serve)
  // fits the budget, within the sequence cap and max_admission_candidates.
  r.admit_tokens = budget;
  r.admit_chunked = chunked;
  if (admit) {
    size_t num_seqs = running_.size();
    int32_t least = 0;
    bool busy = !planned_.empty();
    for (sequence* s : waiting_) {
      if (least >= budget || planned_.size() - running_planned >= max_admission_candidates ||
          num_seqs + static_cast<size_t>(s->fork_n) > static_cast<size_t>(cfg_.max_num_seqs))
        break;
      const int32_t n = s->num_uncomputed();
      const int32_t cheapest = std::min(n, least_new_tokens(*s));
      if (!chunked && busy && least + cheapest > budget) break;
      r.items.push_back(make_item(*s, n, true));
      planned_.push_back({s, true});
      least += cheapest;
      busy = true;
      num_seqs += static_cast<size_t>(s->fork_n);
    }
  }
  if (r.items.empty() && r.frees.empty() && r.forks.empty()) return std::nullopt;
  awaiting_answer_ = true;
  return r;
}

scheduler_policy::decision scheduler_policy::on_answer(const kv_answer& a) {
  AS_CHECK(awaiting_answer_, "an answer without a reservation");
  awaiting_answer_ = false;
  counters_.prefix_cache_queries += a.prefix_cache_queries;
  counters_.prefix_cache_hits += a.prefix_cache_hits;
  decision d;
  if (!a.granted && ahead_) {
    // Planning ahead never preempts: drop this plan; the caller plans again after the step.
    planned_.clear();
    flush_deferred_aborts();
    return d;
  }
  if (!a.granted) {
    // Preempt the lowest-priority, latest-arriving running sequence, then ask again without
    // admitting anyone new this step.
    AS_CHECK(!running_.empty(), "a shortfall with nothing running");
    sequence* victim = *std::max_element(running_.begin(), running_.end(),
                                         [](const sequence* x, const sequence* y) { return served_before(*x, *y); });
    if (running_.size() == 1) {
      d.failed.push_back(fail(*victim));
    } else {
      preempt(*victim);
    }
    flush_deferred_aborts();
    d.retry = plan_impl(false);
    return d;
  }
  gpu::step_batch batch;
  batch.step_id = next_step_id_++;
  batch.block_copies = a.copies;
  step_record rec{batch.step_id, {}};
  rec.seqs.reserve(a.items.size());
  batch.seqs.reserve(a.items.size());
  bool admitted = false;
  int64_t step_tokens = 0;
  const int64_t now = a.items.empty() ? 0 : clock_();
  for (size_t i = 0; i < a.items.size(); ++i) {
    sequence& s = *planned_[i].seq;
    const kv_grant_item& g = a.items[i];
    apply_grant(s.block_table, g, a.blocks);
    s.holds_blocks = true;
    s.fork_parent.reset();
    if (planned_[i].from_waiting) {
      s.num_computed = g.num_computed;
      s.num_hashes_sent = static_cast<int32_t>(s.block_hashes.size());
      if (!s.admitted_once) {
        s.num_cached = g.num_cached;
        // vLLM's queue time ends at the first scheduling; readmissions leave it.
        if (s.times.scheduled_us < 0) s.times.scheduled_us = now;
      }
      s.admitted_once = true;
      s.status = seq_status::running;
      running_.push_back(&s);
      admitted = true;
    }
    const int32_t redo = std::min(g.num_computed + g.num_new, s.recompute_until) - g.num_computed;
    if (redo > 0) {
      s.num_recomputed += redo;
      counters_.num_recomputed_tokens += redo;
    }
    if (g.num_new == 0) continue;
    counters_.num_computed_tokens += g.num_new;
    step_tokens += g.num_new;
    fill_step_sequence(batch.seqs.emplace_back(), s, g);
    const bool sample = batch.seqs.back().sample;
    rec.seqs.push_back({s.seq_id, g.num_new, sample});
    s.num_inflight += g.num_new;
    s.num_inflight_samples += sample ? 1 : 0;
  }
  if (admitted) {
    waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(),
                                  [](const sequence* s) { return s->status == seq_status::running; }),
                   waiting_.end());
  }
  if (!ahead_ && a.items.empty() && running_.empty() && !planned_.empty()) {
    // The whole pool is free and the head of the queue still does not fit: it never will.
    d.failed.push_back(fail(*planned_.front().seq));
  }
  flush_deferred_aborts();
  if (!batch.seqs.empty()) {
    ++counters_.num_steps;
    ++counters_.iteration_tokens[iteration_bucket(step_tokens)];
    in_flight_.push_back(std::move(rec));
    d.step = std::move(batch);
  }
  return d;
}

void scheduler_policy::fill_step_sequence(gpu::step_sequence& q, sequence& s, const kv_grant_item& g) {
  q.seq_id = s.seq_id;
  q.num_computed = g.num_computed;
  // Positions past the known tokens hold the token still being sampled (planning ahead).
  const int32_t known = std::clamp(s.num_tokens() - g.num_computed, 0, g.num_new);
  const auto begin = s.tokens.begin() + g.num_computed;
  q.new_tokens.assign(begin, begin + known);
  q.new_tokens.resize(static_cast<size_t>(g.num_new), gpu::previous_token);
  AS_CHECK(known == g.num_new || g.num_new == 1, "a placeholder token must be a step's only new token");
  q.block_table = s.block_table;
  q.sample = g.num_computed + g.num_new == s.eff_tokens() && s.fork_n == 1;
  if (q.sample) {
    q.params = *s.params;
    q.seed = s.seed;
    q.num_generated = s.eff_generated();
    q.prompt_len = s.num_prompt;
    q.suppress_eos = s.eff_generated() < s.params->min_tokens;
    if (s.params->uses_penalties()) q.history = std::make_shared<const std::vector<int32_t>>(s.tokens);
    if (s.matcher) {
      // The mask decides about EOS (min_tokens included): the grammar may allow nothing else.
      q.suppress_eos = false;
      q.allowed_tokens = std::make_shared<gpu::token_mask>();
      if (s.num_inflight_samples == 0) {
        fill_mask(s, *q.allowed_tokens, q.num_generated);
      } else {
        // Planned ahead: the token sampled in the step in flight decides this mask; it is filled
        // when that step's result arrives (on_step_done), while this step's forward pass runs.
        s.pending_mask = q.allowed_tokens;
        s.pending_mask_index = q.num_generated;
      }
    }
  }
}

void scheduler_policy::fill_mask(const sequence& s, gpu::token_mask& mask, int32_t index) {
  grammar::matcher& m = *s.matcher;
  const grammar::vocabulary& v = m.compiled().vocab();
  std::vector<uint32_t> words(v.mask_words());
  const int64_t allowed = m.fill_next_token_bitmask(words);
  const sampling_params& p = *s.params;
  auto set = [&](int32_t id, bool on) {
    if (id < 0 || id >= v.size()) return;
    uint32_t& w = words[static_cast<size_t>(id) >> 5];
    w = on ? (w | (1u << (id & 31))) : (w & ~(1u << (id & 31)));
  };
  if (m.is_complete()) {
    // Where the grammar may end, EOS may end the output (and stop ids, which end it as EOS
    // does), unless ignore_eos or min_tokens say otherwise and the grammar allows more.
    const int64_t others = allowed - static_cast<int64_t>(v.terminators().size());
    const bool hold = (p.ignore_eos || index < p.min_tokens) && others > 0;
    for (int32_t id : v.terminators()) set(id, !hold);
    if (!hold)
      for (int32_t id : p.stop_token_ids) set(id, true);
  }
  mask.fill(std::move(words));
}

seq_finish scheduler_policy::advance_grammar(sequence& s, int32_t token, seq_finish why) {
  grammar::matcher& m = *s.matcher;
  const auto& term = m.compiled().vocab().terminators();
  // A mask filled after an overflow may have missed tokens: the generation cannot go on.
  if (m.overflowed()) return seq_finish::grammar_overflow;
  if (std::find(term.begin(), term.end(), token) != term.end()) return m.is_complete() ? seq_finish::stop : seq_finish::error;
  // Refused: a token of an abandoned mask (never kept), or a read past the matcher's bound.
  if (!m.accept_token(token)) return m.overflowed() ? seq_finish::grammar_overflow : seq_finish::error;
  if (m.is_complete() && !m.can_continue()) return seq_finish::complete;
  return why;
}

std::vector<seq_output> scheduler_policy::on_step_done(const gpu::step_result& r) {
  AS_CHECK(!in_flight_.empty() && in_flight_.front().step_id == r.step_id, "a step result out of order");
  const step_record rec = std::move(in_flight_.front());
  in_flight_.pop_front();
  std::vector<seq_output> outs;
  size_t k = 0;
  const int64_t now = clock_();
  for (const auto& f : rec.seqs) {
    const gpu::sampled_token* tok = nullptr;
    if (f.sample && r.outcome.ok()) {
      AS_CHECK(k < r.tokens.size() && r.tokens[k].seq_id == f.seq_id, "step result out of batch order");
      tok = &r.tokens[k++];
    }
    sequence* s = lookup(f.seq_id);
    if (!s) continue;  // aborted while the step ran
    if (!r.outcome.ok()) {
      outs.push_back(fail(*s));
      continue;
    }
    s->num_computed += f.num_new;
    s->num_inflight -= f.num_new;
    if (f.sample) --s->num_inflight_samples;
    if (tok) {
      ++counters_.generation_tokens;
      if (s->times.first_token_us < 0) s->times.first_token_us = now;
      s->times.last_token_us = now;
      seq_finish why = append_token(*s, tok->token_id, cfg_.eos_token_ids, cfg_.max_model_len, cfg_.block_size,
                                    cfg_.enable_prefix_caching);
      // A stop id ends the output without being part of it: the grammar does not read it.
      if (s->matcher && why != seq_finish::stop) why = advance_grammar(*s, tok->token_id, why);
      outs.push_back(output_of(*s, why, tok));
      if (why != seq_finish::none) {
        finish(*s, why);
      } else if (s->pending_mask) {
        fill_mask(*s, *s->pending_mask, s->pending_mask_index);
        s->pending_mask.reset();
      }
    } else if (s->fork_n > 1 && s->num_computed == s->target()) {
      fork(*s);
    }
  }
  return outs;
}

void scheduler_policy::requeue_all_for_recompute() {
  flush_deferred_aborts();
  awaiting_answer_ = false;
  in_flight_.clear();
  planned_.clear();
  pending_forks_.clear();
  pending_frees_.clear();
  const std::vector<sequence*> was_running = running_;
  running_.clear();
  for (auto& [id, s] : seqs_) {
    if (s->pending_mask) s->pending_mask->abandon();  // its step is lost
    s->pending_mask.reset();
    s->recompute_until = std::max(s->recompute_until, s->num_computed);
    s->num_computed = 0;
    s->block_table.clear();
    s->holds_blocks = false;
    s->fork_parent.reset();
    s->num_hashes_sent = 0;
    s->num_inflight = 0;
    s->num_inflight_samples = 0;
  }
  for (sequence* s : was_running) insert_waiting(s);
}

}  // namespace actorserve::actors
