#pragma once
/// Runs one job against the engine and turns its deltas into output for one transport: SSE
/// events, WebSocket frames, or one whole JSON response. Transport-neutral: the connection gives a
/// `post` function (onto its strand) and an `emit` function (into its write queue).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/openai/types.hpp"
#include "server/job.hpp"

namespace actorserve::server {

enum class output_mode { sse, websocket, whole };

/// One piece of output. `last` ends the job. A `status` other than 200 marks an error whose
/// `data` is the bare OpenAI error JSON (an SSE connection frames it, or answers with that status
/// if no byte of the stream was sent yet).
struct job_event {
  std::string data;
  bool last = false;
  int status = 200;
};

/// Hands an event to the transport; false when its bounded queue is full (the stream is then
/// cut: the runner cancels and emits one last error event, which the transport must accept).
using emit_fn = std::function<bool(job_event)>;
/// Runs a function on the connection's strand (asio::post); called from actor threads.
using post_fn = std::function<void(std::function<void()>)>;

class job_runner : public std::enable_shared_from_this<job_runner> {
 public:
  job_runner(server_context& ctx, job_spec job, output_mode mode, std::string ws_id, emit_fn emit);
  /// Cancels unfinished engine requests: a dropped client frees its slots by construction.
  ~job_runner();
  job_runner(const job_runner&) = delete;
  job_runner& operator=(const job_runner&) = delete;

  /// Submits every engine request (deltas come back through `post`). On error, cancels what was
  /// submitted and returns the error; nothing is emitted.
  status start(post_fn post);
  /// The client went away: cancel in the engine, emit nothing more. Idempotent.
  void abandon();
  /// A WebSocket cancel frame: cancel in the engine and emit the final frame at once.
  void cancel_by_client();
  bool finished() const { return finished_; }
  const std::string& id() const { return job_.meta.id; }

 private:
  struct choice_state;
  struct request_state;
  struct channel;

  void on_delta(size_t prompt, actors::delta d);
  /// `parsed`: the delta's text through the chat output parsers, or nullptr for plain text.
  void emit_chunk(int32_t choice, const actors::delta& d, std::vector<protocol::openai::token_logprob>&& lp,
                  const protocol::chat_output::output_piece* parsed);
  void finish_ok();
  void fail(const error& e);
  void cut_slow_client();
  void cancel_engine_requests();
  void mark_finished();
  void log_access() const;
  bool send(std::string data, bool last = false, int status = 200);
  std::vector<protocol::openai::token_logprob> convert_logprobs(const std::vector<actors::logprob_entry>& in) const;
  protocol::openai::usage_info usage_so_far() const;

  server_context& ctx_;
  job_spec job_;
  output_mode mode_;
  std::string ws_id_;
  emit_fn emit_;
  std::shared_ptr<channel> channel_;
  std::vector<choice_state> choices_;
  std::vector<request_state> requests_;
  size_t requests_done_ = 0;
  int64_t buffered_bytes_ = 0;  ///< whole mode: what the response holds so far (about)
  int final_status_ = 200;      ///< for the access log: the error's status, 499 when the client left
  std::optional<std::chrono::steady_clock::time_point> first_token_;
  protocol::openai::usage_info usage_;
  std::chrono::steady_clock::time_point arrival_;
  bool started_ = false;
  bool finished_ = false;
};

}  // namespace actorserve::server
