#pragma once
/// A scripted engine for the server tests that the real one cannot stage on demand: it emits
/// token 100+((step+choice) % 50) per step and choice, fails or turns unhealthy when told, and
/// records cancels. Uses the real llama-tiny tokenizer.
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "actors/engine.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

namespace actorserve::testing {

class fake_engine final : public actors::engine {
 public:
  explicit fake_engine(protocol::tokenizer tok) : tok_(std::move(tok)) {}
  ~fake_engine() override { shutdown(std::chrono::milliseconds(0)); }

  static int32_t token_at(int step, int choice) { return 100 + (step + choice) % 50; }

  status submit(actors::generation_request req, actors::delta_sink sink) override {
    std::lock_guard lk(mu_);
    if (stopped_) return make_error(error_code::unavailable, "engine stopped");
    if (fail_next_submit) {
      fail_next_submit = false;
      return make_error(error_code::invalid_argument, "prompt: rejected by the fake engine");
    }
    ++num_submitted;
    priorities_.push_back(req.priority);
    last_params_ = req.params;
    threads_.emplace_back([this, req = std::move(req), sink = std::move(sink)] { run(req, sink); });
    return {};
  }
  void cancel(const std::string& id) override {
    std::lock_guard lk(mu_);
    cancelled_.insert(id);
  }
  /// The sampling parameters of the last request submitted.
  sampling_params last_params() const {
    std::lock_guard lk(mu_);
    return last_params_;
  }
  bool was_cancelled(const std::string& id) const {
    std::lock_guard lk(mu_);
    return cancelled_.count(id) > 0;
  }
  /// The priority of every submitted request, in submission order.
  std::vector<int32_t> priorities() const {
    std::lock_guard lk(mu_);
    return priorities_;
  }
  size_t num_cancelled() const {
    std::lock_guard lk(mu_);
    return cancelled_.size();
  }
  actors::engine_stats stats() const override {
    actors::engine_stats s;
    s.num_running = running_.load();
    s.healthy = healthy.load();
    return s;
  }
  const protocol::tokenizer& tokenizer() const override { return tok_; }
  const std::string& model_name() const override { return name_; }
  int64_t max_model_len() const override { return context_length; }
  void shutdown(std::chrono::milliseconds) override {
    std::vector<std::thread> threads;
    {
      std::lock_guard lk(mu_);
      stopped_ = true;
      threads.swap(threads_);
    }
    for (auto& t : threads) t.join();
  }

  std::atomic<bool> healthy{true};
  std::atomic<bool> fail_mid_stream{false};  ///< the first delta of each request is a failure
  std::atomic<int> num_submitted{0};
  std::atomic<int> num_refused_by_sink{0};
  std::chrono::microseconds step{200};
  bool fail_next_submit = false;
  int64_t context_length = 64;
  std::string text_suffix;                   ///< appended to every delta's text (bulk for slow clients)
  /// When set: each choice's output is these pieces of text, one per step, ending with `stop`
  /// (drives the chat output parsers deterministically).
  std::vector<std::string> scripted_text;

 private:
  bool stop_or_cancelled(const std::string& id) const {
    std::lock_guard lk(mu_);
    return stopped_ || cancelled_.count(id) > 0;
  }

  void run(const actors::generation_request& req, const actors::delta_sink& sink) {
    running_.fetch_add(1);
    const int n = req.params.n;
    const bool scripted = !scripted_text.empty();
    const int steps = scripted ? static_cast<int>(scripted_text.size()) : req.params.max_tokens;
    for (int s = 0; s < steps; ++s) {
      for (int c = 0; c < n; ++c) {
        if (stop_or_cancelled(req.request_id)) {
          running_.fetch_sub(1);
          return;
        }
        actors::delta d;
        d.index = c;
        if (fail_mid_stream) {
          d.finish = actors::finish_reason::error;
          d.failure = make_error(error_code::internal, "executor: simulated device failure");
          d.usage = actors::usage_counts{};
          sink(std::move(d));
          running_.fetch_sub(1);
          return;
        }
        const int32_t id = token_at(s, c);
        d.token_ids = {id};
        d.text = scripted ? scripted_text[static_cast<size_t>(s)] : tok_.decode(d.token_ids, false) + text_suffix;
        if (s == steps - 1) d.finish = scripted ? actors::finish_reason::stop : actors::finish_reason::length;
        if (s == steps - 1 && c == n - 1) {
          d.usage = actors::usage_counts{static_cast<int64_t>(req.prompt_ids.size()), int64_t(n) * steps, 0};
          // As a scheduler would report them: no queue, one step per token.
          const double step_s = std::chrono::duration<double>(step).count();
          d.times = actors::request_times{0.0, step_s, step_s * (steps - 1), step_s * steps};
        }
        if (!sink(std::move(d))) {
          num_refused_by_sink.fetch_add(1);
          running_.fetch_sub(1);
          return;
        }
      }
      std::this_thread::sleep_for(step);
    }
    running_.fetch_sub(1);
  }

  protocol::tokenizer tok_;
  std::string name_ = "fake-llama";
  mutable std::mutex mu_;
  std::set<std::string> cancelled_;
  std::vector<int32_t> priorities_;
  sampling_params last_params_;
  std::vector<std::thread> threads_;
  std::atomic<int> running_{0};
  bool stopped_ = false;
};

}  // namespace actorserve::testing
