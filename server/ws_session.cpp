#include "server/ws_session.hpp"

#include <boost/asio/post.hpp>
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

class ws_session : public std::enable_shared_from_this<ws_session> {
 public:
  ws_session(tcp::socket&& socket, server_context& ctx) : ws_(std::move(socket)), ctx_(ctx) {}
  ~ws_session() {
    abandon_all();
    ctx_.num_connections.fetch_sub(1);
    ctx_.stats.open_connections.fetch_sub(1);
  }

  void run(http::request<http::string_body>&& upgrade) {
    // Pings at half the idle timeout; a peer that answers nothing for --idle-timeout is closed.
    const auto idle = std::chrono::seconds(ctx_.config.server.idle_timeout_s);
    const auto handshake = std::min<std::chrono::milliseconds>(idle, std::chrono::milliseconds(ctx_.header_timeout_ms.load()));
    ws_.set_option(websocket::stream_base::timeout{handshake, idle, true});
    ws_.read_message_max(static_cast<uint64_t>(ctx_.config.server.max_body_bytes));
    ws_.async_accept(upgrade, [self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->do_read();
    });
  }

 private:
  void do_read() {
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec) {  // closed by the client, timed out or failed: every stream of this socket ends
      closed_ = true;
      abandon_all();
      return;
    }
    const auto data = buffer_.cdata();
    std::string text(static_cast<const char*>(data.data()), data.size());
    buffer_.consume(buffer_.size());
    handle(text);
    if (!closed_) do_read();
  }

  void handle(const std::string& text) {
    ctx_.stats.http_requests.fetch_add(1);
    auto msg = ws_proto::parse_client_message(text);
    if (!msg) {
      send_error("", msg.err());
      return;
    }
    if (msg->type == ws_proto::message_type::cancel) {
      auto it = jobs_.find(msg->id);
      if (it == jobs_.end()) return;  // finished already or unknown: nothing to cancel
      auto job = it->second;
      jobs_.erase(it);
      job->cancel_by_client();
      return;
    }
    if (jobs_.count(msg->id)) {
      send_error(msg->id, make_error(error_code::invalid_argument, "id: a request with this id is running"));
      return;
    }
    if (jobs_.size() >= session_limits::max_ws_requests) {
      send_error(msg->id, make_error(error_code::too_large,
                                     "id: too many running requests on this connection (at most " +
                                         std::to_string(session_limits::max_ws_requests) + ")"));
      return;
    }
    if (ctx_.draining) {
      send_error(msg->id, make_error(error_code::unavailable, "the server is shutting down"));
      return;
    }
    result<job_spec> job = make_error(error_code::internal, "unreachable");
    if (msg->type == ws_proto::message_type::chat) {
      auto req = protocol::openai::parse_chat_request(msg->body);
      job = req ? make_chat_job(ctx_, std::move(*req)) : result<job_spec>(req.err());
    } else {
      auto req = protocol::openai::parse_completion_request(msg->body);
      job = req ? make_completion_job(ctx_, std::move(*req)) : result<job_spec>(req.err());
    }
    if (!job) {
      send_error(msg->id, job.err());
      return;
    }
    start_job(msg->id, std::move(*job));
  }

  void start_job(const std::string& id, job_spec job) {
    auto self = shared_from_this();
    auto runner = std::make_shared<job_runner>(ctx_, std::move(job), output_mode::websocket, id,
                                               [self, id](job_event ev) { return self->on_event(id, std::move(ev)); });
    jobs_[id] = runner;
    auto ex = ws_.get_executor();
    if (auto st = runner->start([ex](std::function<void()> f) { net::post(ex, std::move(f)); }); !st) {
      jobs_.erase(id);
      send_error(id, st.err());
    }
  }

  /// Called by a job runner on this strand.
  bool on_event(const std::string& id, job_event ev) {
    if (closed_) return false;
    if (ev.last) {
      jobs_.erase(id);
    } else if (queue_.size() >= session_limits::max_queued_chunks ||
               queued_bytes_ >= session_limits::max_queued_bytes) {
      return false;
    }
    enqueue(std::move(ev.data));
    return true;
  }

  void send_error(const std::string& id, const error& e) {
    const http_error h = to_http_error(e);
    ctx_.stats.http_errors.fetch_add(1);
    enqueue(ws_proto::write_error_frame(id, e.message, h.type, h.param, to_string(e.code)));
  }

  void enqueue(std::string frame) {
    if (closed_) return;
    queued_bytes_ += frame.size();
    queue_.push_back(std::move(frame));
    if (!writing_) do_write();
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
    if (ec) {
      closed_ = true;
      abandon_all();
      return;
    }
    queued_bytes_ -= queue_.front().size();
    queue_.pop_front();
    if (!queue_.empty()) do_write();
  }

  void abandon_all() {
    auto jobs = std::move(jobs_);
    jobs_.clear();
    for (auto& [id, job] : jobs) job->abandon();
  }

  websocket::stream<beast::tcp_stream> ws_;
  server_context& ctx_;
  beast::flat_buffer buffer_;
  std::unordered_map<std::string, std::shared_ptr<job_runner>> jobs_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool closed_ = false;
};

}  // namespace

void launch_ws_session(tcp::socket&& socket, http::request<http::string_body>&& upgrade, server_context& ctx) {
  std::make_shared<ws_session>(std::move(socket), ctx)->run(std::move(upgrade));
}

}  // namespace actorserve::server
