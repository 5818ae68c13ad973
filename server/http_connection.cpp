#include "server/http_connection.hpp"

#include <fmt/format.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <array>
#include <deque>
#include <memory>
#include <optional>

#include "config/log.hpp"
#include "protocol/openai/sse.hpp"
#include "server/context.hpp"
#include "server/cors.hpp"
#include "server/errors.hpp"
#include "server/job_runner.hpp"
#include "server/routes.hpp"
#include "server/ws_connection.hpp"

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
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
/// An SSE comment (clients skip it): what a stream writes to learn whether its client is gone.
constexpr std::string_view kSseProbeChunk = "4\r\n: \n\n\r\n";
constexpr auto kFirstProbeCheck = std::chrono::milliseconds(100);
constexpr auto kProbeInterval = std::chrono::seconds(1);

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string sv(beast::string_view s) { return std::string(s.data(), s.size()); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// Header checks once the headers are in and before the body is read: codings this server does
/// not decode (415) and expectations it cannot meet (417). nullopt: read the body.
std::optional<std::pair<int, error>> refuse_header(const http::request<http::string_body>& req) {
  const std::string_view te = req[http::field::transfer_encoding];
  for (size_t pos = 0; pos <= te.size() && !te.empty();) {
    const size_t comma = std::min(te.find(',', pos), te.size());
    const std::string_view coding = trim(te.substr(pos, comma - pos));
    if (!iequals(coding, "chunked"))
      return std::pair{415, make_error(error_code::unsupported,
                                       "Transfer-Encoding: only chunked is supported, got '" + std::string(te) + "'")};
    pos = comma + 1;
  }
  const std::string_view ce = trim(req[http::field::content_encoding]);
  if (!ce.empty() && !iequals(ce, "identity"))
    return std::pair{415, make_error(error_code::unsupported,
                                     "Content-Encoding: compressed bodies are not supported, got '" + std::string(ce) + "'")};
  const std::string_view expect = trim(req[http::field::expect]);
  if (!expect.empty() && !iequals(expect, "100-continue"))
    return std::pair{417, make_error(error_code::invalid_argument,
                                     "Expect: only 100-continue is supported, got '" + std::string(expect) + "'")};
  return std::nullopt;
}

/// Whether the peer has gone (reset, or closed after our last write): TCP state CLOSE or a
/// pending socket error. A half-closed peer that still reads stays in CLOSE_WAIT.
bool peer_gone(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) return true;
  tcp_info info{};
  len = sizeof info;
  return ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE;
}

/// Which deadline the pending read runs under (a timeout outside `idle` is counted).
enum class deadline_phase { first_request, idle, header, body };

class http_connection : public std::enable_shared_from_this<http_connection> {
 public:
  http_connection(tcp::socket&& socket, server_context& ctx)
      : stream_(std::move(socket)), ctx_(ctx), probe_timer_(stream_.get_executor()) {
    ctx_.num_connections.fetch_add(1);
    ctx_.stats.open_connections.fetch_add(1);
  }
  ~http_connection() {
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
    origin_.clear();
    request_headers_.clear();
    preflight_ = false;
    parser_.emplace();
    parser_->header_limit(connection_limits::max_header_bytes);
    parser_->body_limit(static_cast<uint64_t>(ctx_.config.server.max_body_bytes));
    if (requests_read_ == 0 || buffer_.size() > 0) {
      read_header(requests_read_ == 0 ? deadline_phase::first_request : deadline_phase::header);
      return;
    }
    phase_ = deadline_phase::idle;
    stream_.expires_after(idle());
    stream_.async_read_some(buffer_.prepare(connection_limits::read_chunk_bytes),
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
      self->on_header();
    });
  }

  /// Headers in, body to come: refuse what cannot be served before reading it, answer
  /// `Expect: 100-continue`, then read the body within --idle-timeout.
  void on_header() {
    const auto& req = parser_->get();
    origin_ = sv(req[http::field::origin]);
    if (auto refusal = refuse_header(req)) {
      keep_alive_ = false;  // the body stays unread
      write_result(error_result(ctx_, refusal->first, refusal->second));
      return;
    }
    if (!iequals(trim(req[http::field::expect]), "100-continue") || req.version() < 11) {
      read_body();
      return;
    }
    stream_.expires_after(idle());
    net::async_write(stream_, net::buffer(kContinue), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) self->close();
      else self->read_body();
    });
  }

  void read_body() {
    phase_ = deadline_phase::body;
    stream_.expires_after(idle());
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_read(ec);
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
    ++requests_read_;
    sse_ = false;
    headers_sent_ = false;
    auto& req = parser_->get();
    keep_alive_ = req.keep_alive() && !ctx_.draining;
    http11_ = req.version() >= 11;
    head_ = req.method() == http::verb::head;
    const std::string target = sv(req.target());
    const std::string authorization = sv(req[http::field::authorization]);
    if (iequals(std::string_view(sv(req[http::field::upgrade])), "websocket")) {
      upgrade(target, authorization);
      return;
    }
    const std::string method = head_ ? std::string("GET") : sv(req.method_string());
    preflight_ = req.method() == http::verb::options && req.count(http::field::access_control_request_method) > 0;
    origin_ = sv(req[http::field::origin]);
    request_headers_ = sv(req[http::field::access_control_request_headers]);
    handle(route(ctx_, {method, target, authorization, std::move(req.body())}));
  }

  void handle(route_result r) {
    if (r.deferred) {
      run_off_io(std::move(r.deferred));
      return;
    }
    if (r.job) {
      start_job(std::move(*r.job));
      return;
    }
    write_result(std::move(r));
  }

  /// Parsing, templates and tokenization run on the prompt pool; the connection is watched
  /// meanwhile, and the result comes back onto this strand.
  void run_off_io(std::function<route_result()> work) {
    preparing_ = true;
    stream_.expires_never();
    auto ex = stream_.get_executor();
    ctx_.run_off_io([self = shared_from_this(), ex, work = std::move(work)] {
      auto r = std::make_shared<route_result>(work());
      net::post(ex, [self, r] {
        self->preparing_ = false;
        if (!self->closed_) self->handle(std::move(*r));
      });
    });
    watch_connection();
  }

  void write_result(route_result r) {
    write_whole(r.status, r.content_type, head_ ? std::string() : std::move(r.body), r.allow,
                head_ ? r.body.size() : std::optional<size_t>{});
  }

  /// The CORS header lines of this request's answer (--allowed-origins), or "".
  std::string cors(std::string_view allow = {}) const {
    return cors_headers(ctx_.config.server.allowed_origins, {origin_, preflight_, request_headers_, allow});
  }

  void upgrade(const std::string& target, const std::string& authorization) {
    const std::string_view path = target_path(target);
    if (auto denied = check_auth(ctx_, "GET", path, upgrade_authorization(target, authorization))) {
      keep_alive_ = false;
      write_whole(denied->status, denied->content_type, std::move(denied->body));
      return;
    }
    if (path != "/v1/stream") {
      reply_error_and_close(make_error(error_code::not_found, "route: WebSocket is served on /v1/stream"));
      return;
    }
    const auto early = buffer_.cdata();
    auto handshake = ws_handshake_bytes(parser_->get(),
                                        std::string_view(static_cast<const char*>(early.data()), early.size()));
    if (!handshake) {
      reply_error_and_close(make_error(error_code::invalid_argument,
                                       "Upgrade: too many bytes arrived with the upgrade request; send WebSocket "
                                       "frames after the 101 response"));
      return;
    }
    upgraded_ = true;  // the WebSocket connection takes over the connection count
    stream_.expires_never();
    launch_ws_connection(stream_.release_socket(), std::move(*handshake), ctx_);
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
      write_result(error_result(ctx_, st.err()));
      return;
    }
    watch_connection();
    if (peer_eof_) start_probing();
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
    if (!ev.last && (queue_.size() >= connection_limits::max_queued_chunks ||
                     queued_bytes_ >= connection_limits::max_queued_bytes))
      return false;
    std::string data = ev.status != 200
        ? protocol::sse::event(ev.data) + std::string(protocol::sse::done)
        : std::move(ev.data);
    if (!headers_sent_) {
      headers_sent_ = true;
      std::string headers(kSseHeaders);
      headers.insert(headers.size() - 2, cors());
      enqueue(std::move(headers));
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

  /// `head_length`: a HEAD answer's Content-Length (the GET body's), with no body sent.
  void write_whole(int status, std::string_view content_type, std::string body, std::string_view allow = {},
                   std::optional<size_t> head_length = std::nullopt) {
    if (ctx_.draining) keep_alive_ = false;
    std::string out = fmt::format("HTTP/1.1 {} {}\r\n", status, status_reason(status));
    if (status != 204)
      out += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", content_type, head_length.value_or(body.size()));
    if (!allow.empty()) out += fmt::format("Allow: {}\r\n", allow);
    out += cors(allow);
    out += fmt::format("Connection: {}\r\n\r\n", keep_alive_ ? "keep-alive" : "close");
    out += body;
    response_complete_ = true;
    enqueue(std::move(out));
  }

  void reply_error_and_close(const error& e) {
    keep_alive_ = false;
    write_result(error_result(ctx_, e));
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
    after_response();
  }

  /// The response is out: the next request (kept alive) or the close, once the watch is off
  /// the socket.
  void after_response() {
    if (watching_) {
      resume_after_watch_ = true;
      beast::error_code ec;
      stream_.socket().cancel(ec);
      return;
    }
    if (probing_) {  // the reset wait must not outlive its request
      beast::error_code ec;
      stream_.socket().cancel(ec);
    }
    probing_ = false;
    probe_timer_.cancel();
    if (closed_) return;
    // After an EOF, requests pipelined before it are still answered.
    if (keep_alive_ && (!peer_eof_ || buffer_.size() > 0)) do_read();
    else linger_close();
  }

  bool busy() const { return job_ != nullptr || preparing_; }

  /// While a request is prepared or runs, the connection is read: pipelined bytes are kept for
  /// the next request (up to one whole request), a reset ends the request at once, and an EOF
  /// is a half-close (the client may still read the answer) that start_probing tells apart
  /// from a client that has gone.
  void watch_connection() {
    if (watching_ || peer_eof_ || closed_) return;
    const size_t cap = connection_limits::max_header_bytes + static_cast<size_t>(ctx_.config.server.max_body_bytes);
    if (buffer_.size() >= cap) return;  // a whole request waits already: read no further ahead
    watching_ = true;
    stream_.socket().async_read_some(buffer_.prepare(connection_limits::read_chunk_bytes),
                                     [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->watching_ = false;
      self->buffer_.commit(n);
      self->on_watch(ec);
    });
  }

  void on_watch(beast::error_code ec) {
    if (resume_after_watch_) {
      resume_after_watch_ = false;
      if (ec == net::error::eof) peer_eof_ = true;
      after_response();
      return;
    }
    if (closed_ || ec == net::error::operation_aborted) return;
    if (ec == net::error::eof) {
      peer_eof_ = true;
      if (busy()) start_probing();
      return;
    }
    if (ec) {
      log::debug("req={} client disconnected", job_ ? job_->id() : std::string("(preparing)"));
      close();
      return;
    }
    if (busy()) watch_connection();
  }

  /// After the client's EOF: writes a probe the client ignores (a 100 Continue before the
  /// response, an SSE comment within a stream; nothing is allowed to an HTTP/1.0 client) and
  /// checks soon after, then every second, whether the peer answered it with a reset.
  void start_probing() {
    if (probing_) return;
    probing_ = true;
    probe(kFirstProbeCheck);
    // A peer that has gone answers the probe with a reset, which wakes this wait at once; the
    // timer's checks are the fallback.
    stream_.socket().async_wait(tcp::socket::wait_error,
                                [self = shared_from_this(), request = requests_read_](beast::error_code ec) {
      if (ec || self->closed_ || !self->busy() || request != self->requests_read_) return;
      if (peer_gone(self->stream_.socket().native_handle())) {
        log::debug("req={} client disconnected (reset after its EOF)", self->job_ ? self->job_->id() : std::string("-"));
        self->close();
      }
    });
  }

  void probe(std::chrono::steady_clock::duration check_after) {
    if (closed_ || !busy() || !probing_) {
      probing_ = false;
      return;
    }
    if (!sse_ || !headers_sent_) {
      if (http11_) enqueue(std::string(kContinue));
    } else {
      enqueue(std::string(kSseProbeChunk));
    }
    probe_timer_.expires_after(check_after);
    probe_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_ || !self->busy()) return;
      if (peer_gone(self->stream_.socket().native_handle())) {
        log::debug("req={} client disconnected (after its EOF)", self->job_ ? self->job_->id() : std::string("-"));
        self->close();
        return;
      }
      self->probe(kProbeInterval);
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
    probe_timer_.cancel();
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
  net::steady_timer probe_timer_;
  uint64_t requests_read_ = 0;
  deadline_phase phase_ = deadline_phase::first_request;
  bool writing_ = false;
  bool keep_alive_ = true;
  bool sse_ = false;
  bool headers_sent_ = false;
  bool response_complete_ = false;
  bool closed_ = false;
  bool upgraded_ = false;
  std::string origin_;              ///< this request's Origin header (CORS)
  std::string request_headers_;     ///< its Access-Control-Request-Headers (CORS preflight)
  bool preflight_ = false;          ///< a CORS preflight (OPTIONS with Access-Control-Request-Method)
  bool http11_ = true;
  bool head_ = false;               ///< a HEAD request: the answer has headers only
  bool preparing_ = false;          ///< the request is on the prompt pool
  bool watching_ = false;           ///< a watch read is pending
  bool resume_after_watch_ = false; ///< the response is out; go on once the watch read ends
  bool peer_eof_ = false;           ///< the client shut down its sending side
  bool probing_ = false;
};

}  // namespace

void launch_http_connection(tcp::socket&& socket, server_context& ctx) {
  std::make_shared<http_connection>(std::move(socket), ctx)->run();
}

}  // namespace actorserve::server
