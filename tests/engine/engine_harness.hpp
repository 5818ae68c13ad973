#pragma once
// Helpers for tests of the real engine (actors + CPU executor) on the tiny fixtures (llama-tiny
// unless a test names another).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "test_data.hpp"

namespace actorserve::actors::testing {

inline engine_config tiny_config(std::optional<int64_t> num_blocks = std::nullopt, bool prefix_caching = true,
                                 const std::string& model = "llama-tiny") {
  engine_config cfg;
  cfg.model.model_dir = actorserve::testing::model_dir(model);
  cfg.executor.device = device_kind::cpu;
  cfg.executor.cpu_threads = 1;
  cfg.cache.block_size = 16;
  cfg.cache.num_gpu_blocks_override = num_blocks.value_or(4096);
  cfg.cache.enable_prefix_caching = prefix_caching;
  cfg.scheduler.max_num_seqs = 256;
  cfg.scheduler.max_num_batched_tokens = 2048;
  return cfg;
}

inline std::unique_ptr<engine> start_engine(const engine_config& cfg) {
  auto e = engine::start(cfg);
  EXPECT_TRUE(e.ok()) << (e.ok() ? "" : e.err().message);
  return e.ok() ? std::move(e.value()) : nullptr;
}

/// What one choice of one request produced.
struct choice_result {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<finish_reason> finish;
  std::vector<logprob_entry> logprobs;
};

/// Collects deltas of many requests; `wait` blocks the test thread until all ended.
class collector {
 public:
  /// A sink for request `key`; `stop_after` > 0 makes the sink return false after that many deltas.
  delta_sink sink(int key, int stop_after = 0) {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++open_;
    }
    return [this, key, stop_after, calls = 0](delta d) mutable {
      std::lock_guard<std::mutex> l(mu_);
      auto& c = results_[key][d.index];
      c.tokens.insert(c.tokens.end(), d.token_ids.begin(), d.token_ids.end());
      c.text += d.text;
      c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
      if (d.finish) c.finish = d.finish;
      if (d.usage) usage_[key] = *d.usage;
      const bool keep = stop_after <= 0 || ++calls < stop_after;
      if (d.usage || !keep) {
        ended_[key] = true;
        --open_;
        cv_.notify_all();
      }
      return keep;
    };
  }
  /// Waits until every sink saw its last delta (or asked to stop); false on timeout.
  bool wait(std::chrono::seconds timeout = std::chrono::seconds(60)) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [this] { return open_ == 0; });
  }
  std::map<int, std::map<int32_t, choice_result>> results() {
    std::lock_guard<std::mutex> l(mu_);
    return results_;
  }
  std::map<int, usage_counts> usage() {
    std::lock_guard<std::mutex> l(mu_);
    return usage_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int open_ = 0;
  std::map<int, std::map<int32_t, choice_result>> results_;
  std::map<int, usage_counts> usage_;
  std::map<int, bool> ended_;
};

inline sampling_params greedy(int32_t max_tokens) {
  sampling_params p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

inline std::vector<int32_t> random_prompt(std::mt19937& rng, int32_t min_len, int32_t max_len) {
  const int32_t len = min_len + static_cast<int32_t>(rng() % static_cast<uint32_t>(max_len - min_len + 1));
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < len; ++i) ids.push_back(2 + static_cast<int32_t>(rng() % 1000));
  return ids;
}

inline generation_request make_request(std::string id, std::vector<int32_t> prompt, sampling_params p) {
  generation_request r;
  r.request_id = std::move(id);
  r.prompt_ids = std::move(prompt);
  r.params = std::move(p);
  return r;
}

/// Submits prompts[i] with `p` as request "r<i>" (key i) and waits for every one to end.
inline std::map<int, std::map<int32_t, choice_result>> run_all(engine& e, const std::vector<std::vector<int32_t>>& prompts,
                                                               const sampling_params& p) {
  collector c;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto st = e.submit(make_request("r" + std::to_string(i), prompts[i], p), c.sink(static_cast<int>(i)));
    EXPECT_TRUE(st.ok()) << (st.ok() ? "" : st.err().message);
  }
  EXPECT_TRUE(c.wait());
  return c.results();
}

/// Waits until the pool has no block in use (the last frees travel with one more reservation).
inline engine_stats wait_idle(engine& e, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  engine_stats s = e.stats();
  while ((s.kv_blocks_used != 0 || s.num_running + s.num_waiting != 0) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    s = e.stats();
  }
  return s;
}

}  // namespace actorserve::actors::testing
