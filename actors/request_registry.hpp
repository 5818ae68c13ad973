#pragma once
/// Internal: the request side both engine facades share (engine.cpp in one process,
/// cluster_engine.cpp for a front end of engine processes): the live request actors by id (for
/// `engine::cancel` and the shutdown's grace; entries leave when their actor ends), the
/// admission switch, group ids and default seeds. Include only from actors/*.cpp.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "actors/actor_spawn.hpp"

namespace actorserve::actors {

class request_registry : public std::enable_shared_from_this<request_registry> {
 public:
  /// Spawns the request's actor with `upstream` (the scheduler or a router) and records it until
  /// it ends. A request without a seed takes the next of seed_base, seed_base + 1, ...
  void spawn(caf::actor_system& sys, generation_request req, delta_sink sink, const request_upstream& upstream,
             const protocol::tokenizer& tok, std::shared_ptr<stats_board> stats, uint64_t seed_base);
  /// Sends `cancel` to the request with this id; unknown ids are ignored.
  void cancel(const std::string& request_id);
  /// Whether new requests are admitted (false from the start of stop()).
  bool accepting() const { return accepting_.load(); }
  /// A group id unique among this process's requests, local or remote.
  uint64_t next_group() { return next_group_.fetch_add(1); }
  /// Once: stops admitting, waits up to `grace` for the live requests, cancels the rest, waits up
  /// to `cancel_wait` for them to end, then runs `teardown`. Later calls return at once.
  void stop(std::chrono::milliseconds grace, std::chrono::milliseconds cancel_wait,
            const std::function<void()>& teardown);
  size_t size();
  void clear();

 private:
  void wait_until_empty(std::chrono::milliseconds timeout);

  std::mutex mu_;
  std::unordered_map<std::string, request_actor> by_id_;
  std::atomic<bool> accepting_{true};
  std::atomic<uint64_t> next_group_{1}, next_seed_{0};
  std::mutex stop_mu_;
  bool stopped_ = false;
};

}  // namespace actorserve::actors
