#pragma once
/// Internal: the live request actors of a front end by request id, for `engine::cancel` and the
/// shutdown's grace; entries leave when their actor ends. Shared by the engine in this process
/// (engine.cpp) and the front end of remote engines (cluster_engine.cpp). Include only from
/// actors/*.cpp.
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "actors/actor_spawn.hpp"

namespace actorserve::actors {

class request_registry : public std::enable_shared_from_this<request_registry> {
 public:
  /// Spawns the request's actor (spawn_request) and records it until it ends.
  void spawn(caf::actor_system& sys, generation_request req, delta_sink sink, const request_context& ctx);
  /// Sends `cancel` to the request with this id; unknown ids are ignored.
  void cancel(const std::string& request_id);
  /// Sends `cancel` to every live request.
  void cancel_all();
  size_t size();
  void clear();

 private:
  std::mutex mu_;
  std::unordered_map<std::string, request_actor> by_id_;
};

}  // namespace actorserve::actors
