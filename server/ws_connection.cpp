#include "server/ws_connection.hpp"

#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/websocket.hpp>

#include <deque>
#include <memory>
#include <unordered_map>

#include "config/log.hpp"
#include "protocol/openai/parse.hpp"
#include "protocol/websocket/messages.hpp"
#include "server/context.hpp"
#include "server/errors.hpp"
#include "server/job_runner.hpp"

namespace actorserve::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
namespace ws_proto = protocol::websocket;

/// Beast's WebSocket stream reads the handshake into a buffer of this size (tcp_frame_size).
constexpr size_t kHandshakeBufferBytes = 1536;

class ws_connection : public std::enable_shared_from_this<ws_connection> {
 public:
  ws_connection(tcp::socket&& socket, server_context& ctx)
      : ws_(std::move(socket)), ctx_(ctx), message_timer_(ws_.get_executor()) {}
  ~ws_connection() {
    abandon_all();
    ctx_.num_connections.fetch_sub(1);
    ctx_.stats.open_connections.fetch_sub(1);
  }

  void run(std::string handshake) {
    // Pings at half the idle timeout; a peer that answers nothing for --idle-timeout is closed.
    const auto handshake_timeout =
        std::min<std::chrono::milliseconds>(idle(), std::chrono::milliseconds(ctx_.header_timeout_ms.load()));
    ws_.set_option(websocket::stream_base::timeout{handshake_timeout, idle(), true});
    ws_.read_message_max(static_cast<uint64_t>(ctx_.config.server.max_body_bytes));
    // Beast copies the bytes before async_accept returns; it reads the request from them and
    // keeps what follows it (frames sent with the upgrade) for the first reads.
    ws_.async_accept(net::buffer(handshake), [self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->do_read();
    });
  }

 private:
  /// A running request and the sequences it holds (--max-seqs-per-connection).
  struct running {
    std::shared_ptr<job_runner> runner;
    int64_t num_sequences = 0;
  };

  std::chrono::seconds idle() const { return std::chrono::seconds(ctx_.config.server.idle_timeout_s); }

  /// Reads a message piece by piece, so that a message gets --idle-timeout to complete from
  /// its first bytes, as an HTTP body does (a dribbled frame cannot hold its buffer forever).
  void do_read() {
    ws_.async_read_some(buffer_, connection_limits::read_chunk_bytes,
                        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) {  // closed by the client, timed out or failed: every stream of this socket ends
      closed_ = true;
      message_timer_.cancel();
      abandon_all();
      return;
    }
    if (!ws_.is_message_done()) {
      if (!message_started_) start_message_deadline();
      do_read();
      return;
    }
    message_started_ = false;
    message_timer_.cancel();
    const auto data = buffer_.cdata();
    std::string text(static_cast<const char*>(data.data()), data.size());
    buffer_.consume(buffer_.size());
    handle(text);
    if (!closed_) do_read();
  }

  void start_message_deadline() {
    message_started_ = true;
    message_timer_.expires_after(idle());
    message_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_ || !self->message_started_) return;
      self->ctx_.stats.connections_timed_out.fetch_add(1);
      log::debug("WebSocket closed: a message was not completed within --idle-timeout");
      self->close_connection("a message was not completed within --idle-timeout");
    });
  }

  void handle(const std::string& text) {
    ctx_.stats.http_requests.fetch_add(1);
    auto msg = ws_proto::parse_client_message(text);
    if (!msg) {
      send_error("", msg.err());
      return;
    }
    if (msg->type == ws_proto::message_type::cancel) {
      cancel(msg->id);
      return;
    }
    if (jobs_.count(msg->id) || pending_.count(msg->id)) {
      // Refuses this frame only: id null, since the request with this id goes on.
      send_error("", make_error(error_code::invalid_argument,
                                fmt::format("id: a request with id '{}' is already running on this connection; "
                                            "this frame was refused and the running request goes on",
                                            msg->id)));
      return;
    }
    if (jobs_.size() + pending_.size() >= connection_limits::max_ws_requests) {
      send_error(msg->id, make_error(error_code::too_large,
                                     "id: too many running requests on this connection (at most " +
                                         std::to_string(connection_limits::max_ws_requests) + ")"));
      return;
    }
    if (ctx_.draining) {
      send_error(msg->id, make_error(error_code::unavailable, "the server is shutting down"));
      return;
    }
    prepare(std::move(*msg));
  }

  /// Parses the body and builds the job on the prompt pool; the result comes back here.
  void prepare(ws_proto::client_message msg) {
    const uint64_t serial = ++next_serial_;
    pending_[msg.id] = serial;
    auto ex = ws_.get_executor();
    ctx_.run_off_io([self = shared_from_this(), ex, serial, msg = std::move(msg)] {
      auto job = std::make_shared<result<job_spec>>(make_error(error_code::internal, "unreachable"));
      auto& ctx = self->ctx_;
      if (msg.type == ws_proto::message_type::chat) {
        auto req = protocol::openai::parse_chat_request(msg.body);
        *job = req ? make_chat_job(ctx, std::move(*req)) : result<job_spec>(req.err());
      } else {
        auto req = protocol::openai::parse_completion_request(msg.body);
        *job = req ? make_completion_job(ctx, std::move(*req)) : result<job_spec>(req.err());
      }
      net::post(ex, [self, serial, id = msg.id, job] { self->on_prepared(id, serial, std::move(*job)); });
    });
  }

  void on_prepared(const std::string& id, uint64_t serial, result<job_spec> job) {
    auto it = pending_.find(id);
    if (closed_ || it == pending_.end() || it->second != serial) return;  // cancelled meanwhile
    pending_.erase(it);
    if (!job) {
      send_error(id, job.err());
      return;
    }
    const int64_t seqs = job->num_sequences();
    if (num_sequences_ + seqs > ctx_.config.server.max_seqs_per_connection) {
      send_error(id, make_error(error_code::invalid_argument,
                                fmt::format("n: this request's {} sequences and the {} of the requests running on "
                                            "this connection exceed the {} one connection may hold "
                                            "(--max-seqs-per-connection)",
                                            seqs, num_sequences_, ctx_.config.server.max_seqs_per_connection)));
      return;
    }
    start_job(id, std::move(*job), seqs);
  }

  void cancel(const std::string& id) {
    if (auto it = pending_.find(id); it != pending_.end()) {
      pending_.erase(it);  // still being prepared: it never reaches the engine
      enqueue(ws_proto::write_done_frame(id, {}));
      return;
    }
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;  // finished already or unknown: nothing to cancel
    auto job = it->second.runner;
    forget(it);
    job->cancel_by_client();
  }

  void start_job(const std::string& id, job_spec job, int64_t seqs) {
    auto self = shared_from_this();
    auto runner = std::make_shared<job_runner>(ctx_, std::move(job), output_mode::websocket, id,
                                               [self, id](job_event ev) { return self->on_event(id, std::move(ev)); });
    jobs_[id] = running{runner, seqs};
    num_sequences_ += seqs;
    auto ex = ws_.get_executor();
    if (auto st = runner->start([ex](std::function<void()> f) { net::post(ex, std::move(f)); }); !st) {
      forget(jobs_.find(id));
      send_error(id, st.err());
    }
  }

  void forget(std::unordered_map<std::string, running>::iterator it) {
    num_sequences_ -= it->second.num_sequences;
    jobs_.erase(it);
  }

  /// Called by a job runner on this strand.
  bool on_event(const std::string& id, job_event ev) {
    if (closed_) return false;
    if (ev.last) {
      if (auto it = jobs_.find(id); it != jobs_.end()) forget(it);
    } else if (queue_.size() >= connection_limits::max_queued_chunks ||
               queued_bytes_ >= connection_limits::max_queued_bytes) {
      return false;
    }
    enqueue(std::move(ev.data));
    return true;
  }

  void send_error(const std::string& id, const error& e) {
    const http_error h = to_http_error(e);
    ctx_.stats.http_errors.fetch_add(1);
    // A refused frame is logged at debug level only: a flood of them must not flood the log too.
    if (id.empty()) log::debug("WebSocket frame refused: {}", e.message);
    else log::info("WebSocket request {} answered {}: {}", id, h.status, e.message);
    enqueue(ws_proto::write_error_frame(id, e.message, h.type, h.param, to_string(e.code)));
  }

  /// Every frame counts against the connection's bound: one over it closes the connection.
  void enqueue(std::string frame) {
    if (closed_) return;
    if (queued_bytes_ + frame.size() > connection_limits::max_ws_queued_bytes) {
      log::warn("WebSocket closed: its client does not read its frames ({} bytes queued)", queued_bytes_);
      close_connection("the client does not read its frames");
      return;
    }
    queued_bytes_ += frame.size();
    queue_.push_back(std::move(frame));
    if (!writing_) do_write();
  }

  /// Ends every request, drops the queued frames (all but the one being written) and closes:
  /// with a close frame (1008, policy violation) when no write is stuck, else at the TCP level.
  void close_connection(std::string_view reason) {
    closed_ = true;
    message_timer_.cancel();
    abandon_all();
    while (queue_.size() > (writing_ ? 1u : 0u)) {
      queued_bytes_ -= queue_.back().size();
      queue_.pop_back();
    }
    queue_.shrink_to_fit();
    if (writing_) {
      beast::error_code ec;
      beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ec);
      beast::get_lowest_layer(ws_).close();
      return;
    }
    ws_.async_close(websocket::close_reason(websocket::close_code::policy_error, reason),
                    [self = shared_from_this()](beast::error_code) {});
  }

  void do_write() {
    writing_ = true;
    ws_.text(true);
    ws_.async_write(net::buffer(queue_.front()), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_write(ec);
    });
  }

  void on_write(beast::error_code ec) {
    writing_ = false;
    queued_bytes_ -= queue_.front().size();
    queue_.pop_front();
    if (ec) {
      closed_ = true;
      abandon_all();
      queue_.clear();
      queued_bytes_ = 0;
      return;
    }
    if (!queue_.empty() && !closed_) do_write();
  }

  void abandon_all() {
    pending_.clear();
    auto jobs = std::move(jobs_);
    jobs_.clear();
    num_sequences_ = 0;
    for (auto& [id, job] : jobs) job.runner->abandon();
  }

  websocket::stream<beast::tcp_stream> ws_;
  server_context& ctx_;
  beast::flat_buffer buffer_;
  net::steady_timer message_timer_;
  std::unordered_map<std::string, running> jobs_;
  std::unordered_map<std::string, uint64_t> pending_;  ///< id -> serial of its preparation
  uint64_t next_serial_ = 0;
  int64_t num_sequences_ = 0;                           ///< over jobs_
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool closed_ = false;
  bool message_started_ = false;
};

}  // namespace

std::optional<std::string> ws_handshake_bytes(const http::request<http::string_body>& upgrade, std::string_view early) {
  std::string out = "GET /v1/stream HTTP/1.1\r\nHost: actorserve\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n";
  for (const auto field : {http::field::sec_websocket_key, http::field::sec_websocket_version}) {
    const auto it = upgrade.find(field);
    if (it == upgrade.end()) continue;
    out += fmt::format("{}: {}\r\n", std::string_view(it->name_string()), std::string_view(it->value()));
  }
  out += "\r\n";
  out += early;
  if (out.size() > kHandshakeBufferBytes) return std::nullopt;
  return out;
}

void launch_ws_connection(tcp::socket&& socket, std::string handshake, server_context& ctx) {
  std::make_shared<ws_connection>(std::move(socket), ctx)->run(std::move(handshake));
}

}  // namespace actorserve::server
