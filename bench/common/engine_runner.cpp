#include "bench/common/engine_runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "gpu/executor_factory.hpp"

namespace actorserve::bench {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr std::chrono::seconds cancel_grace{15};

/// Shared between the sinks (actor threads) and the waiting caller.
struct run_state {
  clock_type::time_point start;
  std::vector<request_record> records;
  bool keep_outputs = false;
  std::mutex mu;
  std::condition_variable cv;
  size_t num_done = 0;

  double now() const { return std::chrono::duration<double>(clock_type::now() - start).count(); }
  void mark_done() {
    std::lock_guard<std::mutex> lock(mu);
    ++num_done;
    cv.notify_all();
  }
};

}  // namespace

std::string gpu_idle_lines(const actors::engine_stats& b, const actors::engine_stats& a) {
  auto line = [](const char* what, int64_t steps, int64_t busy_us, int64_t idle_us, int64_t seqs) {
    const double busy = double(busy_us) / 1000.0, wall = double(busy_us + idle_us) / 1000.0;
    const double idle_pct = wall > 0 ? 100.0 * (1.0 - busy / wall) : 0.0;
    std::string s =
        fmt::format("{} {:.2f} % (busy {:.1f} ms of {:.1f} ms, {} steps", what, idle_pct, busy, wall, steps);
    if (seqs >= 0) s += fmt::format(", batch mean {:.1f}", double(seqs) / double(std::max<int64_t>(steps, 1)));
    return s + ")\n";
  };
  return line("GPU idle between steps:", a.decode_steps - b.decode_steps, a.decode_busy_us - b.decode_busy_us,
              a.decode_idle_us - b.decode_idle_us, a.decode_seqs - b.decode_seqs) +
         line("GPU idle, all steps:   ", a.timed_steps - b.timed_steps, a.step_busy_us - b.step_busy_us,
              a.step_idle_us - b.step_idle_us, -1);
}

std::string step_phase_lines(const actors::engine_stats& b, const actors::engine_stats& a) {
  const int64_t dec = a.decode_steps - b.decode_steps, dec_us = a.decode_busy_us - b.decode_busy_us;
  const int64_t dec_seqs = a.decode_seqs - b.decode_seqs;
  const int64_t pre = (a.timed_steps - b.timed_steps) - dec, pre_us = (a.step_busy_us - b.step_busy_us) - dec_us;
  // Tokens of the timed steps that are not decode-only (one per decode row in the others), so
  // the token mean covers the same steps as the time mean: an untimed first step is often small.
  const int64_t pre_tokens = (a.timed_tokens - b.timed_tokens) - dec_seqs;
  const int64_t untimed = (a.num_steps - b.num_steps) - (a.timed_steps - b.timed_steps);
  const auto mean = [](double x, int64_t n) { return n > 0 ? x / double(n) : 0.0; };
  std::string s = fmt::format("Decode-only steps:        {} of {:.2f} ms mean, batch mean {:.1f} ({:.2f} s busy)\n",
                              dec, mean(double(dec_us) / 1000.0, dec), mean(double(dec_seqs), dec), double(dec_us) / 1e6);
  s += fmt::format("Prefill-carrying steps:   {} of {:.2f} ms mean, {:.1f} tokens mean ({:.2f} s busy)\n", pre,
                   mean(double(pre_us) / 1000.0, pre), mean(double(pre_tokens), pre), double(pre_us) / 1e6);
  if (untimed > 0)
    s += fmt::format("Steps not timed:          {} of {:.2f} s busy (not run back to back with the one before)\n", untimed,
                     double(a.untimed_busy_us - b.untimed_busy_us) / 1e6);
  return s;
}

std::string outside_steps_line(const actors::engine_stats& b, const actors::engine_stats& a, double elapsed_s) {
  const double busy = double((a.step_busy_us - b.step_busy_us) + (a.untimed_busy_us - b.untimed_busy_us)) / 1e6;
  const double idle = double(a.step_idle_us - b.step_idle_us) / 1e6;
  return fmt::format("Outside the steps:        {:.2f} s of the {:.2f} s elapsed ({:.2f} s busy in steps, {:.2f} s idle "
                     "between timed steps)\n",
                     elapsed_s - busy - idle, elapsed_s, busy, idle);
}

result<std::unique_ptr<actors::engine>> start_engine(const engine_config& cfg, double& seconds) {
  const auto t0 = clock_type::now();
  auto eng = actors::engine::start(cfg);
  seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return eng;
}

result<std::unique_ptr<actors::engine>> start_engine(const engine_config& cfg, const gpu::cuda_tuning& tuning,
                                                     double& seconds) {
  const auto t0 = clock_type::now();
  auto eng = actors::engine::start(cfg, [cfg, tuning] { return gpu::make_executor(cfg, tuning); });
  seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return eng;
}

result<run_report> run_requests(actors::engine& eng, std::vector<actors::generation_request> reqs, bool keep_outputs,
                                double timeout_s, bool one_by_one) {
  auto st = std::make_shared<run_state>();
  st->keep_outputs = keep_outputs;
  st->records.resize(reqs.size());
  run_report rep;
  rep.before = eng.stats();
  st->start = clock_type::now();
  size_t expected = reqs.size();
  std::vector<std::pair<actors::generation_request, actors::delta_sink>> batch;
  batch.reserve(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    request_record& rec = st->records[i];
    rec.request_id = reqs[i].request_id;
    rec.prompt_len = static_cast<int64_t>(reqs[i].prompt_ids.size());
    // NOTE: each sink touches only its own record; deltas of one request arrive in order, and
    // the final one is published to the waiting thread under the mutex.
    auto sink = [st, i](actors::delta d) {
      request_record& r = st->records[i];
      const double t = st->now();
      if (!d.token_ids.empty()) {
        if (r.first_token_s < 0) r.first_token_s = t;
        r.output_len += static_cast<int64_t>(d.token_ids.size());
        r.token_times_s.insert(r.token_times_s.end(), d.token_ids.size(), t);
        if (st->keep_outputs) r.output_ids.insert(r.output_ids.end(), d.token_ids.begin(), d.token_ids.end());
      }
      if (d.finish) {
        r.finish = d.finish;
        if (d.failure) r.error = d.failure->message;
      }
      if (d.usage) {
        r.usage = *d.usage;
        r.finish_s = t;
        st->mark_done();
      }
      return true;
    };
    batch.emplace_back(std::move(reqs[i]), std::move(sink));
  }
  // One arrival, as vLLM's benchmark_throughput adds every prompt before the engine steps.
  std::vector<status> admitted;
  if (one_by_one) {
    for (auto& [req, sink] : batch) admitted.push_back(eng.submit(std::move(req), std::move(sink)));
  } else {
    admitted = eng.submit_batch(std::move(batch));
  }
  for (size_t i = 0; i < admitted.size(); ++i) {
    if (!admitted[i]) {
      st->records[i].error = admitted[i].err().message;
      --expected;
    }
  }
  const auto deadline = clock_type::now() + std::chrono::duration<double>(timeout_s);
  {
    std::unique_lock<std::mutex> lock(st->mu);
    while (st->num_done < expected) {
      if (st->cv.wait_for(lock, std::chrono::milliseconds(5), [&] { return st->num_done >= expected; })) break;
      lock.unlock();
      const auto s = eng.stats();
      rep.peak_kv_blocks_used = std::max(rep.peak_kv_blocks_used, s.kv_blocks_used);
      rep.peak_running = std::max(rep.peak_running, s.num_running);
      lock.lock();
      if (clock_type::now() > deadline && !rep.timed_out) {
        // NOTE: cancelled requests still end with a final delta, after which their records are
        // no longer written; only then may they be copied.
        rep.timed_out = true;
        lock.unlock();
        for (const auto& r : st->records) eng.cancel(r.request_id);
        lock.lock();
      }
      if (rep.timed_out && clock_type::now() > deadline + cancel_grace)
        return make_error(error_code::cancelled,
                          fmt::format("run: {} of {} requests still unfinished {} s after cancelling them",
                                      expected - st->num_done, expected, cancel_grace.count()));
    }
    rep.requests = st->records;
  }
  rep.after = eng.stats();
  for (const auto& r : rep.requests) {
    const double last_token = r.token_times_s.empty() ? 0.0 : r.token_times_s.back();
    rep.elapsed_s = std::max(rep.elapsed_s, rep.timed_out ? last_token : r.finish_s);
    if (!r.error.empty() || !r.finish || *r.finish == actors::finish_reason::error ||
        *r.finish == actors::finish_reason::cancelled)
      ++rep.num_failed;
  }
  return rep;
}

std::string first_failure(const run_report& rep) {
  for (const auto& r : rep.requests) {
    if (!r.error.empty()) return fmt::format("request {}: {}", r.request_id, r.error);
    if (!r.finish) return fmt::format("request {}: never finished", r.request_id);
    if (*r.finish == actors::finish_reason::error || *r.finish == actors::finish_reason::cancelled)
      return fmt::format("request {}: finished as {}", r.request_id,
                         *r.finish == actors::finish_reason::error ? "error" : "cancelled");
  }
  return "none";
}

}  // namespace actorserve::bench
