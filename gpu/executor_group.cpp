// The lock-step group: fans every step out to the shards, gathers their results per step and
// hands them back in submission order from the group's own thread.
#include "gpu/executor_group.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

namespace actorserve::gpu {

struct executor_group::impl {
  /// One submitted step: the shards' results as they arrive.
  struct pending {
    uint64_t ticket = 0;                       ///< submission number (step ids need not be unique)
    uint64_t step_id = 0;
    done_fn done;
    std::vector<std::optional<step_result>> results;   ///< [rank]
    size_t arrived = 0;
    std::optional<status> first_error;         ///< the first shard error to arrive
    std::optional<step_result> refused;        ///< set instead of results when never run
    bool complete() const { return refused.has_value() || arrived == results.size(); }
  };

  explicit impl(std::function<void()> abort) : abort_collective(std::move(abort)) {}

  /// A shard's result for step `ticket`; on the first failure the collective is aborted at once.
  void on_shard_done(uint64_t ticket, size_t rank, step_result r) {
    bool abort_now = false;
    {
      std::lock_guard lock(mu);
      auto it = std::find_if(steps.begin(), steps.end(), [&](const pending& p) { return p.ticket == ticket; });
      if (it == steps.end() || it->results[rank].has_value()) return;   // contract broken: ignore a repeat
      if (!r.outcome.ok()) {
        if (!it->first_error) it->first_error = r.outcome;
        if (!failure) {
          failure = fmt::format("shard {} failed step {}: {}", rank, it->step_id, r.outcome.err().message);
          failed_ticket = ticket;
          abort_now = true;
        }
      }
      it->results[rank] = std::move(r);
      ++it->arrived;
    }
    if (abort_now) abort_once();
    cv.notify_all();
  }

  void abort_once() {
    std::call_once(aborted, [this] {
      if (abort_collective) abort_collective();
    });
  }

  /// Shard 0's result with the largest device_ms and the first shard error; steps after a
  /// failed one fail too (the shards' state no longer agrees).
  step_result combine(pending& p) const {
    if (p.refused) return std::move(*p.refused);
    step_result out = std::move(*p.results[0]);
    for (const auto& r : p.results) out.device_ms = std::max(out.device_ms, r->device_ms);
    if (p.first_error)
      out.outcome = *p.first_error;
    else if (failure && p.ticket > failed_ticket)
      out.outcome = make_error(error_code::internal,
                               fmt::format("step {}: executor group: {}; its later steps fail until it is restarted",
                                           p.step_id, *failure));
    if (!out.outcome.ok()) {
      out.tokens.clear();
      out.expert_tokens.clear();
      out.cascade_seqs = 0;
    }
    return out;
  }

  /// The group's thread: delivers complete steps in submission order.
  void deliver_loop() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return (!steps.empty() && steps.front().complete()) || (stopping && steps.empty()); });
      if (steps.empty()) return;
      pending p = std::move(steps.front());
      steps.pop_front();
      step_result r = combine(p);
      lock.unlock();
      if (p.done) p.done(std::move(r));
      lock.lock();
    }
  }

  std::function<void()> abort_collective;
  std::once_flag aborted;
  std::mutex submit_mu;                 ///< one submit at a time: every shard sees the same order
  std::mutex mu;                        ///< guards what follows
  std::condition_variable cv;
  std::deque<pending> steps;            ///< in submission order
  uint64_t next_ticket = 0;
  std::optional<std::string> failure;   ///< what failed first
  uint64_t failed_ticket = 0;
  bool stopping = false;
  std::thread deliverer;
};

executor_group::executor_group(std::vector<std::unique_ptr<executor>> shards, std::function<void()> abort_collective)
    : shards_(std::move(shards)) {
  if (shards_.empty()) throw std::invalid_argument("executor_group: no shards");
  info_ = shards_.front()->info();
  info_.host_kv_cache_bytes = 0;
  for (const auto& s : shards_) {
    info_.num_blocks = std::min(info_.num_blocks, s->info().num_blocks);
    info_.host_kv_cache_bytes += s->info().host_kv_cache_bytes;
  }
  impl_ = std::make_unique<impl>(std::move(abort_collective));
  impl_->deliverer = std::thread([p = impl_.get()] { p->deliver_loop(); });
}

executor_group::~executor_group() {
  // Shards blocked in a collective return with an error, so destroying them (each answers its
  // queued steps and joins its thread) cannot hang.
  impl_->abort_once();
  shards_.clear();
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    // NOTE: a shard that broke the contract and never answered a step must not hang shutdown.
    for (auto& p : impl_->steps)
      if (!p.complete()) {
        step_result r;
        r.step_id = p.step_id;
        r.outcome = make_error(error_code::cancelled, "executor group shut down");
        p.refused = std::move(r);
      }
  }
  impl_->cv.notify_all();
  impl_->deliverer.join();
}

void executor_group::submit(step_batch batch, done_fn done) {
  std::lock_guard submit_lock(impl_->submit_mu);
  uint64_t ticket = 0;
  {
    std::lock_guard lock(impl_->mu);
    ticket = impl_->next_ticket++;
    impl::pending p;
    p.ticket = ticket;
    p.step_id = batch.step_id;
    p.done = std::move(done);
    p.results.resize(shards_.size());
    if (impl_->failure) {
      // Refused at once, yet answered behind the steps before it and from the group's thread.
      step_result r;
      r.step_id = batch.step_id;
      r.outcome = make_error(error_code::unavailable,
                             fmt::format("step {}: executor group: {}; it takes no steps until it is restarted",
                                         batch.step_id, *impl_->failure));
      p.refused = std::move(r);
    }
    const bool refused = p.refused.has_value();
    impl_->steps.push_back(std::move(p));
    if (refused) {
      impl_->cv.notify_all();
      return;
    }
  }
  for (size_t rank = 0; rank < shards_.size(); ++rank) {
    step_batch copy = rank + 1 == shards_.size() ? std::move(batch) : batch;
    shards_[rank]->submit(std::move(copy), [p = impl_.get(), ticket, rank](step_result r) {
      p->on_shard_done(ticket, rank, std::move(r));
    });
  }
}

bool executor_group::supports_logit_bias() const {
  return std::all_of(shards_.begin(), shards_.end(), [](const auto& s) { return s->supports_logit_bias(); });
}

bool executor_group::supports_token_masks() const {
  return std::all_of(shards_.begin(), shards_.end(), [](const auto& s) { return s->supports_token_masks(); });
}

}  // namespace actorserve::gpu
