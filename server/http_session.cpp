#include "server/http_session.hpp"

#include <fmt/format.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <array>
#include <deque>
#include <memory>
#include <optional>

#include "config/log.hpp"
#include "protocol/openai/sse.hpp"
#include "server/context.hpp"
#include "server/errors.hpp"
#include "server/job_runner.hpp"
#include "server/routes.hpp"
#include "server/ws_session.hpp"

namespace actorserve::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr std::string_view kSseHeaders =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n";
constexpr size_t kMaxBuffersPerWrite = 64;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string sv(beast::string_view s) { return std::string(s.data(), s.size()); }

/// Which deadline the pending read runs under (a timeout outside `idle` is counted).
enum class deadline_phase { first_request, idle, header, body };

class http_session : public std::enable_shared_from_this<http_session> {
 public:
  http_session(tcp::socket&& socket, server_context& ctx) : stream_(std::move(socket)), ctx_(ctx) {
    ctx_.num_connections.fetch_add(1);
    ctx_.stats.open_connections.fetch_add(1);
  }
  ~http_session() {
    if (job_) job_->abandon();
    if (!upgraded_) {
      ctx_.num_connections.fetch_sub(1);
      ctx_.stats.open_connections.fetch_sub(1);
    }
  }

  void run() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

 private:
  std::chrono::seconds idle() const { return std::chrono::seconds(ctx_.config.server.idle_timeout_s); }
  /// Time allowed for a request line and headers, from the first byte (or from accept).
  std::chrono::milliseconds header_deadline() const {
    return std::min<std::chrono::milliseconds>(idle(), std::chrono::milliseconds(ctx_.header_timeout_ms.load()));
  }

  /// Slowloris defence: a new connection must send its headers within the header deadline of
  /// accept; a kept-alive one may wait `idle` for its next request, then gets the same deadline
  /// from its first byte. The body then has `idle` more.
  void do_read() {
    parser_.emplace();
    parser_->header_limit(session_limits::max_header_bytes);
    parser_->body_limit(static_cast<uint64_t>(ctx_.config.server.max_body_bytes));
    if (requests_read_ == 0 || buffer_.size() > 0) {
      read_header(requests_read_ == 0 ? deadline_phase::first_request : deadline_phase::header);
      return;
    }
    phase_ = deadline_phase::idle;
    stream_.expires_after(idle());
    stream_.async_read_some(buffer_.prepare(session_limits::read_chunk_bytes),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->buffer_.commit(n);
      if (ec) self->on_read(ec);
      else self->read_header(deadline_phase::header);
    });
  }

  void read_header(deadline_phase phase) {
    phase_ = phase;
    stream_.expires_after(header_deadline());
    http::async_read_header(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec || self->parser_->is_done()) {
        self->on_read(ec);
        return;
      }
      self->phase_ = deadline_phase::body;
      self->stream_.expires_after(self->idle());
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](beast::error_code ec2, size_t) { self->on_read(ec2); });
    });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      reply_error_and_close(make_error(error_code::too_large, "body: request body exceeds --max-body-bytes"));
      return;
    }
    if (ec == http::error::header_limit) {
      keep_alive_ = false;
      write_whole(431, "application/json", "{\"error\":{\"message\":\"request headers too large\",\"type\":"
                                           "\"invalid_request_error\",\"param\":null,\"code\":\"too_large\"}}");
      return;
    }
    if (ec == beast::error::timeout) {
      if (phase_ != deadline_phase::idle) {
        ctx_.stats.connections_timed_out.fetch_add(1);
        log::debug("connection closed: request not received within its deadline");
      }
      close();
      return;
    }
    if (ec == http::error::end_of_stream || ec == net::error::operation_aborted || ec == net::error::eof ||
        ec == net::error::connection_reset) {
      close();
      return;
    }
    if (ec) {
      reply_error_and_close(make_error(error_code::invalid_argument, "request: malformed HTTP request"));
      return;
    }
    ++generation_;
    ++requests_read_;
    auto& req = parser_->get();
    keep_alive_ = req.keep_alive() && !ctx_.draining;
    const std::string target = sv(req.target());
    const std::string authorization = sv(req[http::field::authorization]);
    if (iequals(std::string_view(sv(req[http::field::upgrade])), "websocket")) {
      upgrade(target, authorization);
      return;
    }
    const std::string method = sv(req.method_string());
    route_result r = route(ctx_, {method, target, authorization, req.body()});
    if (!r.job) {
      write_whole(r.status, r.content_type, std::move(r.body));
      return;
    }
    start_job(std::move(*r.job));
  }

  void upgrade(const std::string& target, const std::string& authorization) {
    const std::string_view path = target_path(target);
    if (auto denied = check_auth(ctx_, path, authorization)) {
      keep_alive_ = false;
      write_whole(denied->status, denied->content_type, std::move(denied->body));
      return;
    }
    if (path != "/v1/stream") {
      reply_error_and_close(make_error(error_code::not_found, "route: WebSocket is served on /v1/stream"));
      return;
    }
    upgraded_ = true;  // the WebSocket session takes over the connection count
    stream_.expires_never();
    launch_ws_session(stream_.release_socket(), parser_->release(), ctx_);
  }

  void start_job(job_spec job) {
    sse_ = job.stream;
    headers_sent_ = false;
    auto self = shared_from_this();
    auto runner = std::make_shared<job_runner>(ctx_, std::move(job), sse_ ? output_mode::sse : output_mode::whole,
                                               std::string{}, [self](job_event ev) { return self->on_event(std::move(ev)); });
    job_ = runner;
    stream_.expires_never();
    auto ex = stream_.get_executor();
    if (auto st = runner->start([ex](std::function<void()> f) { net::post(ex, std::move(f)); }); !st) {
      job_.reset();
      route_result r = error_result(ctx_, st.err());
      write_whole(r.status, r.content_type, std::move(r.body));
      return;
    }
    watch_disconnect();
  }

  /// Called by the job runner on this strand.
  bool on_event(job_event ev) {
    if (closed_) return false;
    if (!sse_) {
      write_whole(ev.status, "application/json", std::move(ev.data));
      job_.reset();
      return true;
    }
    if (ev.last && ev.status != 200 && !headers_sent_) {
      write_whole(ev.status, "application/json", std::move(ev.data));
      job_.reset();
      return true;
    }
    if (!ev.last && (queue_.size() >= session_limits::max_queued_chunks ||
                     queued_bytes_ >= session_limits::max_queued_bytes))
      return false;
    std::string data = ev.status != 200
        ? protocol::sse::event(ev.data) + std::string(protocol::sse::done)
        : std::move(ev.data);
    if (!headers_sent_) {
      headers_sent_ = true;
      enqueue(std::string(kSseHeaders));
    }
    std::string chunk = fmt::format("{:x}\r\n", data.size());
    chunk += data;
    chunk += "\r\n";
    if (ev.last) {
      chunk += "0\r\n\r\n";
      response_complete_ = true;
      job_.reset();
    }
    enqueue(std::move(chunk));
    return true;
  }

  void write_whole(int status, std::string_view content_type, std::string body) {
    if (ctx_.draining) keep_alive_ = false;
    std::string out = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n",
                                  status, status_reason(status), content_type, body.size(),
                                  keep_alive_ ? "keep-alive" : "close");
    out += body;
    response_complete_ = true;
    enqueue(std::move(out));
  }

  void reply_error_and_close(const error& e) {
    keep_alive_ = false;
    route_result r = error_result(ctx_, e);
    write_whole(r.status, r.content_type, std::move(r.body));
  }

  void enqueue(std::string data) {
    queued_bytes_ += data.size();
    queue_.push_back(std::move(data));
    if (!writing_) do_write();
  }

  void do_write() {
    writing_ = true;
    std::vector<net::const_buffer> buffers;
    const size_t count = std::min(queue_.size(), kMaxBuffersPerWrite);
    buffers.reserve(count);
    for (size_t i = 0; i < count; ++i) buffers.emplace_back(net::buffer(queue_[i]));
    stream_.expires_after(idle());
    net::async_write(stream_, buffers, [self = shared_from_this(), count](beast::error_code ec, size_t) {
      self->on_write(ec, count);
    });
  }

  void on_write(beast::error_code ec, size_t count) {
    writing_ = false;
    if (ec) {
      close();
      return;
    }
    for (size_t i = 0; i < count; ++i) {
      queued_bytes_ -= queue_.front().size();
      queue_.pop_front();
    }
    if (!queue_.empty()) {
      do_write();
      return;
    }
    if (!response_complete_) {
      stream_.expires_never();  // a stream waits for the engine, not the client
      return;
    }
    response_complete_ = false;
    if (keep_alive_ && !closed_) do_read();
    else linger_close();
  }

  /// A disconnect while a job runs (no read is pending then) cancels the job at once.
  void watch_disconnect() {
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = shared_from_this(), gen = generation_](beast::error_code ec) {
      if (ec || gen != self->generation_ || !self->job_) return;
      beast::error_code avail_ec;
      const size_t n = self->stream_.socket().available(avail_ec);
      if (avail_ec || n == 0) {
        log::debug("req={} client disconnected", self->job_->id());
        self->close();
      }
    });
  }

  /// Half-closes, then reads what the client still sends so that it sees our answer.
  void linger_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
    stream_.async_read_some(net::buffer(drain_), [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) self->close(); else self->linger_close_more();
    });
  }
  void linger_close_more() {
    stream_.async_read_some(net::buffer(drain_), [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) self->close(); else self->linger_close_more();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (auto job = std::move(job_)) job->abandon();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  beast::tcp_stream stream_;
  server_context& ctx_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<job_runner> job_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  std::array<char, 512> drain_{};
  uint64_t generation_ = 0;
  uint64_t requests_read_ = 0;
  deadline_phase phase_ = deadline_phase::first_request;
  bool writing_ = false;
  bool keep_alive_ = true;
  bool sse_ = false;
  bool headers_sent_ = false;
  bool response_complete_ = false;
  bool closed_ = false;
  bool upgraded_ = false;
};

}  // namespace

void launch_http_session(tcp::socket&& socket, server_context& ctx) {
  std::make_shared<http_session>(std::move(socket), ctx)->run();
}

}  // namespace actorserve::server
