#include "server/serve.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <thread>
#include <vector>

#include "config/log.hpp"
#include "protocol/tokenizer/tokenizer.hpp"
#include "server/context.hpp"
#include "server/http_connection.hpp"
#include "server/prompt_builder.hpp"
#include "server/stats_log.hpp"

namespace actorserve::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

class listener : public std::enable_shared_from_this<listener> {
 public:
  listener(net::io_context& ioc, tcp::acceptor&& acceptor, server_context& ctx)
      : ioc_(ioc), acceptor_(std::move(acceptor)), ctx_(ctx), backoff_(acceptor_.get_executor()) {}

  void run() { do_accept(); }
  void close() {
    net::post(acceptor_.get_executor(), [self = shared_from_this()] {
      boost::system::error_code ec;
      self->acceptor_.close(ec);
      self->backoff_.cancel();
    });
  }

 private:
  void do_accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [self = shared_from_this()](boost::system::error_code ec,
                                                                             tcp::socket socket) {
      self->on_accept(ec, std::move(socket));
    });
  }

  void on_accept(boost::system::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE/ENFILE) or another transient failure: the pending connection
      // stays in the backlog, so accepting again at once would spin. Back off, then retry.
      ctx_.stats.connections_refused.fetch_add(1);
      if (ec != last_accept_error_) log::warn("accept failed: {} (retrying every {} ms)", ec.message(), kAcceptBackoff.count());
      last_accept_error_ = ec;
      backoff_.expires_after(kAcceptBackoff);
      backoff_.async_wait([self = shared_from_this()](boost::system::error_code wait_ec) {
        if (!wait_ec) self->do_accept();
      });
      return;
    }
    last_accept_error_ = {};
    if (ctx_.num_connections.load() >= ctx_.config.server.max_connections) {
      if (ctx_.stats.connections_refused.fetch_add(1) % 1000 == 0)
        log::warn("connection refused: --max-connections {} reached", ctx_.config.server.max_connections);
      boost::system::error_code ignored;
      socket.close(ignored);
    } else {
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      launch_http_connection(std::move(socket), ctx_);
    }
    do_accept();
  }

  static constexpr std::chrono::milliseconds kAcceptBackoff{50};

  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  server_context& ctx_;
  net::steady_timer backoff_;
  boost::system::error_code last_accept_error_;
};

}  // namespace

struct http_server::impl {
  impl(int threads, int prompt_threads) : ioc(threads), prompt_pool(static_cast<size_t>(prompt_threads)) {}
  // Declared before ioc so that it outlives it: destroying ioc destroys the pending handlers, and
  // the connections they own touch ctx in their destructors (ASan/TSan: heap-use-after-free).
  std::unique_ptr<server_context> ctx;
  net::io_context ioc;
  /// After ioc: destroyed first, so that connections held by its pending work close their sockets
  /// while ioc still exists.
  net::thread_pool prompt_pool;
  std::shared_ptr<listener> accept;
  net::steady_timer stats_timer{ioc};
  actors::engine_stats last_stats;

  /// Every kStatsLogIntervalSeconds: the stats line, when the engine was busy.
  void schedule_stats_line() {
    stats_timer.expires_after(std::chrono::seconds(kStatsLogIntervalSeconds));
    stats_timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      const auto now = ctx->engine.stats();
      if (auto line = stats_line(last_stats, now, kStatsLogIntervalSeconds)) log::info("{}", *line);
      last_stats = now;
      schedule_stats_line();
    });
  }
  std::vector<std::thread> threads;
  uint16_t port = 0;
  bool stopped = false;
};

http_server::http_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
http_server::~http_server() { stop(); }

result<std::unique_ptr<http_server>> http_server::start(actors::engine& engine, const engine_config& cfg) {
  const int threads = static_cast<int>(std::max<int64_t>(1, cfg.server.io_threads));
  auto p = std::make_unique<impl>(threads, static_cast<int>(std::max<int64_t>(1, cfg.server.prompt_threads)));
  p->ctx = std::make_unique<server_context>(engine, cfg);
  auto prompts = prompt_builder::create(engine.tokenizer(), cfg.model.chat_template_file);
  if (!prompts) return prompts.err();
  p->ctx->prompts = std::move(*prompts);
  if (auto per_token = engine.tokenizer().max_input_bytes_per_token())
    p->ctx->prompts->bound_text_bytes(*per_token * p->ctx->max_model_len, p->ctx->max_model_len);
  p->ctx->run_off_io = [pool = &p->prompt_pool](std::function<void()> f) { net::post(*pool, std::move(f)); };

  boost::system::error_code ec;
  const auto address = net::ip::make_address(cfg.server.host, ec);
  if (ec) return make_error(error_code::invalid_argument, "--host: not an IP address: " + cfg.server.host);
  tcp::acceptor acceptor(p->ioc);
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(cfg.server.port));
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return make_error(error_code::unavailable,
                      "--port: cannot listen on " + cfg.server.host + ":" + std::to_string(cfg.server.port) + ": " +
                          ec.message());
  p->port = acceptor.local_endpoint().port();
  p->accept = std::make_shared<listener>(p->ioc, std::move(acceptor), *p->ctx);
  p->accept->run();
  if (cfg.server.log_stats) {
    p->last_stats = engine.stats();
    p->schedule_stats_line();
  }
  for (int i = 0; i < threads; ++i) p->threads.emplace_back([io = &p->ioc] { io->run(); });
  return std::unique_ptr<http_server>(new http_server(std::move(p)));
}

uint16_t http_server::port() const { return impl_->port; }
server_context& http_server::context() { return *impl_->ctx; }

bool http_server::wait_idle(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (impl_->ctx->num_active_jobs.load() > 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

bool http_server::drain(std::chrono::milliseconds grace) {
  impl_->ctx->draining = true;
  impl_->accept->close();
  return wait_idle(grace);
}

void http_server::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->accept->close();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  impl_->prompt_pool.join();
}

}  // namespace actorserve::server
