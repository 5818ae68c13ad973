#include "actors/request_registry.hpp"

#include <thread>

#include "actors/messages.hpp"

namespace actorserve::actors {

void request_registry::spawn(caf::actor_system& sys, generation_request req, delta_sink sink,
                             const request_upstream& upstream, const protocol::tokenizer& tok,
                             std::shared_ptr<stats_board> stats, uint64_t seed_base) {
  request_context ctx;
  ctx.upstream = &upstream;
  ctx.tokenizer = &tok;
  ctx.stats = std::move(stats);
  ctx.group_id = next_group();
  ctx.seed = req.params.seed ? *req.params.seed : seed_base + next_seed_.fetch_add(1);
  const std::string id = req.request_id;
  auto hdl = spawn_request(sys, std::move(req), std::move(sink), ctx);
  {
    std::lock_guard<std::mutex> lock(mu_);
    by_id_[id] = hdl;
  }
  // NOTE: attached after the insert and outside the lock: on an actor that already ended the
  // functor runs at once, here.
  std::weak_ptr<request_registry> weak = weak_from_this();
  hdl->attach_functor([weak, id, addr = hdl.address()] {
    if (auto reg = weak.lock()) {
      std::lock_guard<std::mutex> l(reg->mu_);
      auto it = reg->by_id_.find(id);
      if (it != reg->by_id_.end() && it->second.address() == addr) reg->by_id_.erase(it);
    }
  });
}

void request_registry::cancel(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_id_.find(request_id);
  if (it != by_id_.end()) caf::anon_send(it->second, cancel_atom::value);
}

void request_registry::wait_until_empty(std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (size() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

void request_registry::stop(std::chrono::milliseconds grace, std::chrono::milliseconds cancel_wait,
                            const std::function<void()>& teardown) {
  std::lock_guard<std::mutex> once(stop_mu_);
  if (stopped_) return;
  accepting_ = false;
  wait_until_empty(grace);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, hdl] : by_id_) caf::anon_send(hdl, cancel_atom::value);
  }
  wait_until_empty(cancel_wait);
  teardown();
  stopped_ = true;
}

size_t request_registry::size() {
  std::lock_guard<std::mutex> lock(mu_);
  return by_id_.size();
}

void request_registry::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  by_id_.clear();
}

}  // namespace actorserve::actors
