#include "server/job_runner.hpp"

#include <fmt/format.h>

#include <atomic>

#include "config/log.hpp"
#include "protocol/openai/sse.hpp"
#include "protocol/openai/write.hpp"
#include "protocol/tokenizer/tokenizer.hpp"
#include "protocol/websocket/messages.hpp"
#include "server/context.hpp"
#include "server/errors.hpp"

namespace actorserve::server {

namespace oa = protocol::openai;
using clock = std::chrono::steady_clock;

struct job_runner::choice_state {
  std::string text;                        ///< whole mode only
  std::vector<int32_t> token_ids;          ///< whole mode only
  std::vector<oa::token_logprob> logprobs; ///< whole mode only
  std::string finish;
  int64_t text_offset = 0;
  int64_t num_tokens = 0;
  bool sent_first = false;
  std::optional<protocol::chat_output::chat_output_parser> parser;  ///< chat with reasoning/tool parsing
  protocol::chat_output::chat_output parsed;                        ///< whole mode with a parser
};

struct job_runner::request_state {
  bool done = false;
  bool saw_token = false;
  clock::time_point last_token;
};

/// What the engine's sink holds: it outlives the runner safely (weak reference, closed flag).
struct job_runner::channel {
  post_fn post;
  std::weak_ptr<job_runner> runner;
  std::atomic<bool> closed{false};
};

namespace {
const char* finish_name(actors::finish_reason r) {
  switch (r) {
    case actors::finish_reason::stop: return "stop";
    case actors::finish_reason::length: return "length";
    case actors::finish_reason::cancelled: return "abort";
    case actors::finish_reason::error: return "error";
  }
  return "stop";
}

double seconds(clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

job_runner::job_runner(server_context& ctx, job_spec job, output_mode mode, std::string ws_id, emit_fn emit)
    : ctx_(ctx), job_(std::move(job)), mode_(mode), ws_id_(std::move(ws_id)), emit_(std::move(emit)),
      choices_(job_.requests.size() * static_cast<size_t>(job_.n)), requests_(job_.requests.size()),
      arrival_(clock::now()) {
  for (const auto& ids : job_.prompt_ids) usage_.prompt_tokens += static_cast<int64_t>(ids.size());
  if (job_.chat && job_.output_parsing.any())
    for (auto& c : choices_) c.parser.emplace(job_.output_parsing);
}

job_runner::~job_runner() { abandon(); }

status job_runner::start(post_fn post) {
  channel_ = std::make_shared<channel>();
  channel_->post = std::move(post);
  channel_->runner = weak_from_this();
  started_ = true;
  ctx_.num_active_jobs.fetch_add(1);
  for (size_t p = 0; p < job_.requests.size(); ++p) {
    auto ch = channel_;
    actors::delta_sink sink = [ch, p](actors::delta d) {
      if (ch->closed.load(std::memory_order_acquire)) return false;
      ch->post([ch, p, d = std::move(d)]() mutable {
        if (auto r = ch->runner.lock()) r->on_delta(p, std::move(d));
      });
      return true;
    };
    if (auto st = ctx_.engine.submit(job_.requests[p], std::move(sink)); !st) {
      requests_[p].done = true;  // never admitted: nothing to cancel
      cancel_engine_requests();
      mark_finished();
      return st;
    }
    ctx_.stats.engine_requests_submitted.fetch_add(1);
  }
  if (mode_ == output_mode::sse && job_.chat) {
    // OpenAI streams open each choice with the assistant role.
    for (size_t c = 0; c < choices_.size(); ++c) {
      oa::chunk_delta d;
      d.index = static_cast<int32_t>(c);
      d.first = true;
      if (job_.flags.return_token_ids) d.prompt_token_ids = job_.prompt_ids[c / job_.n];
      choices_[c].sent_first = true;
      send(protocol::sse::event(oa::write_chat_chunk(job_.meta, d, job_.flags)));
    }
  }
  return {};
}

void job_runner::abandon() {
  if (finished_ || !started_) return;
  final_status_ = 499;
  cancel_engine_requests();
  mark_finished();
}

void job_runner::cancel_by_client() {
  if (finished_) return;
  final_status_ = 499;
  cancel_engine_requests();
  for (auto& c : choices_)
    if (c.finish.empty()) c.finish = "abort";
  send(protocol::websocket::write_done_frame(ws_id_, usage_so_far()), true);
  mark_finished();
}

void job_runner::cancel_engine_requests() {
  if (channel_) channel_->closed.store(true, std::memory_order_release);
  for (size_t p = 0; p < requests_.size(); ++p)
    if (!requests_[p].done) {
      requests_[p].done = true;
      ctx_.engine.cancel(job_.requests[p].request_id);
    }
}

void job_runner::mark_finished() {
  if (finished_) return;
  finished_ = true;
  if (channel_) channel_->closed.store(true, std::memory_order_release);
  if (started_) ctx_.num_active_jobs.fetch_sub(1);
  if (started_ && ctx_.config.server.log_requests) log_access();
}

void job_runner::log_access() const {
  const char* route = job_.chat ? "/v1/chat/completions" : "/v1/completions";
  const char* transport = mode_ == output_mode::websocket ? "websocket" : mode_ == output_mode::sse ? "sse" : "http";
  const auto now = clock::now();
  const oa::usage_info u = usage_so_far();
  log::info("request {} {} {} status={} prompt_tokens={} output_tokens={} ttft={} duration={:.3f}s", job_.meta.id,
            route, transport, final_status_, u.prompt_tokens, u.completion_tokens,
            first_token_ ? fmt::format("{:.3f}s", seconds(*first_token_ - arrival_)) : std::string("-"),
            seconds(now - arrival_));
}

bool job_runner::send(std::string data, bool last, int status) {
  return emit_(job_event{std::move(data), last, status});
}

std::vector<oa::token_logprob> job_runner::convert_logprobs(const std::vector<actors::logprob_entry>& in) const {
  std::vector<oa::token_logprob> out;
  if (!job_.flags.logprobs) return out;
  const auto& tok = ctx_.engine.tokenizer();
  out.reserve(in.size());
  for (const auto& e : in) {
    oa::token_logprob t;
    t.token = e.token;
    t.logprob = e.logprob;
    t.top.reserve(e.top.size());
    for (const auto& [id, lp] : e.top) {
      const int32_t one[] = {id};
      t.top.push_back({tok.decode(one, false), lp});
    }
    out.push_back(std::move(t));
  }
  return out;
}

oa::usage_info job_runner::usage_so_far() const {
  oa::usage_info u = usage_;
  int64_t generated = 0;
  for (const auto& c : choices_) generated += c.num_tokens;
  u.completion_tokens = std::max(u.completion_tokens, generated);
  return u;
}

void job_runner::on_delta(size_t p, actors::delta d) {
  if (finished_) return;
  auto& rq = requests_[p];
  const auto now = clock::now();
  if (!d.token_ids.empty()) {
    if (!first_token_) first_token_ = now;
    if (!rq.saw_token) {
      ctx_.stats.time_to_first_token.observe(seconds(now - arrival_));
      rq.saw_token = true;
    } else {
      ctx_.stats.inter_token_latency.observe(seconds(now - rq.last_token));
    }
    rq.last_token = now;
  }
  if (d.failure || d.finish == actors::finish_reason::error) {
    ctx_.stats.finished_error.fetch_add(1);
    fail(d.failure ? *d.failure : make_error(error_code::internal, "generation failed"));
    return;
  }
  const size_t c = p * static_cast<size_t>(job_.n) + static_cast<size_t>(d.index);
  if (c >= choices_.size()) {
    fail(make_error(error_code::internal, "engine delta for an unknown choice"));
    return;
  }
  auto& ch = choices_[c];
  ch.num_tokens += static_cast<int64_t>(d.token_ids.size());
  auto lp = convert_logprobs(d.logprobs);
  if (d.finish) {
    ch.finish = finish_name(*d.finish);
    auto& counter = *d.finish == actors::finish_reason::stop     ? ctx_.stats.finished_stop
                    : *d.finish == actors::finish_reason::length ? ctx_.stats.finished_length
                                                                 : ctx_.stats.finished_abort;
    counter.fetch_add(1);
  }
  protocol::chat_output::output_piece piece;
  if (ch.parser) {
    piece = ch.parser->push(d.text);
    if (d.finish) {
      piece.append(ch.parser->finish());
      // A named function's call ends with "stop", as OpenAI answers a forced function.
      if (ch.finish == "stop" && ch.parser->called_tools() && job_.output_parsing.forced_function.empty())
        ch.finish = "tool_calls";
    }
  }
  if (mode_ == output_mode::whole) {
    buffered_bytes_ += static_cast<int64_t>(d.text.size() + 12 * d.token_ids.size());
    for (const auto& t : lp) buffered_bytes_ += static_cast<int64_t>(64 + t.token.size() + 48 * t.top.size());
    if (buffered_bytes_ > ctx_.config.server.max_response_bytes) {
      fail(make_error(error_code::invalid_argument,
                      fmt::format("stream: the response grew past the {} bytes a non-streamed response may buffer "
                                  "(--max-response-bytes); set \"stream\": true, or ask for fewer tokens, choices "
                                  "or logprobs",
                                  ctx_.config.server.max_response_bytes)));
      return;
    }
    if (ch.parser) ch.parsed.add(std::move(piece));
    else ch.text += d.text;
    ch.token_ids.insert(ch.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
    for (auto& t : lp) ch.logprobs.push_back(std::move(t));
  } else if (!d.text.empty() || !d.token_ids.empty() || d.finish) {
    emit_chunk(static_cast<int32_t>(c), d, std::move(lp), ch.parser ? &piece : nullptr);
    if (finished_) return;  // the stream was cut
  }
  ch.text_offset += static_cast<int64_t>(d.text.size());
  if (d.usage) {
    rq.done = true;
    ++requests_done_;
    usage_.completion_tokens += d.usage->completion_tokens;
    usage_.cached_tokens += d.usage->cached_prompt_tokens;
    ctx_.stats.e2e_request_latency.observe(seconds(now - arrival_));
    if (d.times) ctx_.stats.observe(*d.times);
    ctx_.stats.request_prompt_tokens.observe(static_cast<double>(job_.prompt_ids[p].size()));
    ctx_.stats.request_params_n.observe(static_cast<double>(job_.n));
    ctx_.stats.request_params_max_tokens.observe(static_cast<double>(job_.requests[p].params.max_tokens));
    ctx_.stats.request_generation_tokens.observe(static_cast<double>(d.usage->completion_tokens));
    if (requests_done_ == requests_.size()) finish_ok();
  }
}

void job_runner::emit_chunk(int32_t c, const actors::delta& d, std::vector<oa::token_logprob>&& lp,
                            const protocol::chat_output::output_piece* parsed) {
  auto& ch = choices_[static_cast<size_t>(c)];
  oa::chunk_delta cd;
  cd.index = c;
  cd.text = parsed ? std::string_view(parsed->content) : std::string_view(d.text);
  if (parsed) {
    cd.reasoning = parsed->reasoning;
    cd.tool_calls = parsed->tool_calls;
  }
  cd.token_ids = d.token_ids;
  cd.logprobs = lp;
  cd.text_offset = ch.text_offset;
  cd.finish_reason = ch.finish;
  if (!ch.sent_first && job_.flags.return_token_ids) cd.prompt_token_ids = job_.prompt_ids[c / job_.n];
  ch.sent_first = true;
  std::string data;
  if (mode_ == output_mode::websocket) {
    data = protocol::websocket::write_delta_frame(ws_id_, cd, job_.chat, job_.flags);
  } else {
    data = protocol::sse::event(job_.chat ? oa::write_chat_chunk(job_.meta, cd, job_.flags)
                                          : oa::write_completion_chunk(job_.meta, cd, job_.flags));
  }
  if (!send(std::move(data))) cut_slow_client();
}

void job_runner::finish_ok() {
  switch (mode_) {
    case output_mode::whole: {
      std::vector<oa::choice_result> results(choices_.size());
      for (size_t c = 0; c < choices_.size(); ++c) {
        results[c].index = static_cast<int32_t>(c);
        results[c].text = std::move(choices_[c].text);
        results[c].token_ids = std::move(choices_[c].token_ids);
        results[c].logprobs = std::move(choices_[c].logprobs);
        results[c].finish_reason = choices_[c].finish.empty() ? "stop" : choices_[c].finish;
        if (choices_[c].parser) {
          results[c].text = std::move(choices_[c].parsed.content);
          results[c].reasoning = std::move(choices_[c].parsed.reasoning);
          results[c].tool_calls = std::move(choices_[c].parsed.tool_calls);
        }
      }
      std::string body = job_.chat
          ? oa::write_chat_completion(job_.meta, results, usage_, job_.prompt_ids[0], job_.flags)
          : oa::write_completion(job_.meta, results, usage_, job_.prompt_ids, job_.n, job_.flags);
      send(std::move(body), true);
      break;
    }
    case output_mode::sse: {
      std::string tail;
      if (job_.flags.include_usage) tail = protocol::sse::event(oa::write_usage_chunk(job_.meta, job_.chat, usage_));
      tail += protocol::sse::done;
      send(std::move(tail), true);
      break;
    }
    case output_mode::websocket:
      send(protocol::websocket::write_done_frame(ws_id_, usage_), true);
      break;
  }
  mark_finished();
}

void job_runner::fail(const error& e) {
  cancel_engine_requests();
  const http_error h = to_http_error(e);
  final_status_ = h.status;
  log::warn("req={} failed: {}", job_.meta.id, e.message);
  switch (mode_) {
    case output_mode::whole: send(h.body, true, h.status); break;
    case output_mode::sse: send(h.body, true, h.status); break;  // the connection frames it
    case output_mode::websocket:
      send(protocol::websocket::write_error_frame(ws_id_, e.message, h.type, h.param, to_string(e.code)), true);
      break;
  }
  ctx_.stats.http_errors.fetch_add(1);
  mark_finished();
}

void job_runner::cut_slow_client() {
  ctx_.stats.streams_cut.fetch_add(1);
  log::warn("req={} cut: the client reads too slowly", job_.meta.id);
  fail(make_error(error_code::unavailable, "stream: the client did not read fast enough; the stream was cut"));
}

}  // namespace actorserve::server
