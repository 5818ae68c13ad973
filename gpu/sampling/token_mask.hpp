#pragma once
/// The tokens a grammar-constrained sequence may sample at one step: a bitmask over the
/// vocabulary (token id i is allowed when bit i % 32 of word i / 32 is set).
///
/// With two steps in flight, the mask of a sequence's sampling in step N+1 depends on the token
/// it samples in step N, which the engine learns only when N completes. So a mask may be filled
/// after its step was submitted: the executor runs the step's forward pass meanwhile and waits
/// for the mask only when it samples. The engine either fills the mask or abandons it (the
/// sequence ended, or the steps in flight are lost); an abandoned mask leaves the sampling
/// unconstrained, and its token is dropped by the engine.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

namespace actorserve::gpu {

class token_mask {
 public:
  /// The allowed tokens; wakes a waiting sampler. Only the first of fill/abandon counts.
  void fill(std::vector<uint32_t> words) {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != state::pending) return;
    words_ = std::move(words);
    state_ = state::filled;
    cv_.notify_all();
  }
  /// The sampling's token will be dropped: wake a waiting sampler without a mask.
  void abandon() {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != state::pending) return;
    state_ = state::abandoned;
    cv_.notify_all();
  }
  /// Blocks until filled or abandoned: the words, or nullptr when abandoned.
  const std::vector<uint32_t>* wait() const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return state_ != state::pending; });
    return state_ == state::filled ? &words_ : nullptr;
  }
  /// Whether wait() would return at once.
  bool ready() const {
    std::lock_guard<std::mutex> lock(mu_);
    return state_ != state::pending;
  }

 private:
  enum class state { pending, filled, abandoned };
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::vector<uint32_t> words_;
  state state_ = state::pending;
};

}  // namespace actorserve::gpu
