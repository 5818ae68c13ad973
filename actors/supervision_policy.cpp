#include "actors/supervision_policy.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace actorserve::actors {

supervision_policy::supervision_policy(supervision_config cfg) : cfg_(cfg) {}

supervision_policy::verdict supervision_policy::on_failure(const std::string& why, clock::time_point now) {
  ++epoch_;
  last_failure_ = why;
  restarting_ = true;
  recovering_ = true;
  failures_.push_back(now);
  while (!failures_.empty() && now - failures_.front() > cfg_.restart_window) failures_.pop_front();
  if (static_cast<int32_t>(failures_.size()) > cfg_.max_restarts) {
    give_up(why);
    return verdict::give_up;
  }
  return verdict::restart;
}

std::optional<int32_t> supervision_policy::on_restarted(int32_t num_blocks, const std::string& error) {
  restarting_ = false;
  if (!error.empty()) {
    give_up(last_failure_ + "; the restart failed: " + error);
    return std::nullopt;
  }
  return cfg_.num_blocks > 0 ? std::min(cfg_.num_blocks, num_blocks) : num_blocks;
}

std::optional<std::string> supervision_policy::overdue(uint64_t step_id, clock::time_point started,
                                                       clock::time_point now) const {
  if (now - started < cfg_.step_timeout) return std::nullopt;
  return fmt::format("step {} did not complete within {} ms", step_id, cfg_.step_timeout.count());
}

std::chrono::milliseconds supervision_policy::watchdog_period() const {
  return std::max(cfg_.step_timeout / 4, std::chrono::milliseconds(10));
}

void supervision_policy::give_up(const std::string& why) {
  gave_up_ = true;
  give_up_message_ = "engine: executor failed repeatedly: " + why;
}

}  // namespace actorserve::actors
