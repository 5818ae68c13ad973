#pragma once
/// Test helpers for engines on many processes: starting `actorserve` processes with their output
/// in a log file, waiting for a line of that log, killing them; a front end's /health as values;
/// one streamed completion as per-choice text.
#include <gtest/gtest.h>
#include <signal.h>
#include <simdjson.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/http_client.hpp"

namespace actorserve::testing {

/// One `actorserve` process; killed (SIGKILL) on destruction if still running.
class process {
 public:
  process() = default;
  process(std::vector<std::string> args, std::string log) : log_(std::move(log)) {
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(ACTORSERVE_BINARY));
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(nullptr);  // the child must not write the parent's buffered output again
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log_.c_str(), "w", stdout);
      if (f) ::dup2(::fileno(stdout), STDERR_FILENO);
      ::execv(ACTORSERVE_BINARY, argv.data());
      ::_exit(127);
    }
  }
  process(process&& o) noexcept : pid_(o.pid_), log_(std::move(o.log_)) { o.pid_ = -1; }
  process& operator=(process&& o) noexcept {
    kill_now();
    pid_ = o.pid_;
    log_ = std::move(o.log_);
    o.pid_ = -1;
    return *this;
  }
  ~process() { kill_now(); }

  pid_t pid() const { return pid_; }
  const std::string& log() const { return log_; }
  /// kill -9, then reaps it.
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  /// Sends SIGTERM (the process stops by itself; wait_exit reaps it).
  void terminate() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
  }
  /// Waits up to `timeout` for it to exit by itself; its exit status, or nothing.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }
  /// The first log line holding `needle`, waiting up to `timeout` for it (empty if none came,
  /// or the process ended first).
  std::string wait_for_line(std::string_view needle, std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      std::ifstream in(log_);
      std::string line;
      while (std::getline(in, line))
        if (line.find(needle) != std::string::npos) return line;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return {};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return {};
  }

 private:
  pid_t pid_ = -1;
  std::string log_;
};

/// The port at the end of a "... on HOST:PORT ..." or "http://HOST:PORT" log line.
inline uint16_t port_in(const std::string& line, std::string_view after) {
  const size_t at = line.find(after);
  if (at == std::string::npos) return 0;
  const size_t colon = line.find(':', at + after.size());
  return colon == std::string::npos ? 0 : static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
}

/// One engine as a front end's /health shows it.
struct engine_health {
  bool up = false;
  int64_t running = 0, waiting = 0, kv_blocks_used = 0, kv_blocks_total = 0;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0, requests_cancelled = 0;
  int64_t requests_routed = 0, requests_resubmitted = 0;
};

inline std::vector<engine_health> health_of(uint16_t front_port) {
  std::vector<engine_health> out;
  const auto r = http_call(front_port, "GET", "/health");
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(r.body).get(doc)) return out;
  simdjson::dom::array engines;
  if (doc["engines"].get(engines)) return out;
  for (auto e : engines) {
    engine_health h;
    bool up = false;
    if (e["up"].get(up)) up = false;
    h.up = up;
    auto num = [&e](const char* k) {
      int64_t v = 0;
      if (e[k].get(v)) v = 0;
      return v;
    };
    h.running = num("running");
    h.waiting = num("waiting");
    h.kv_blocks_used = num("kv_blocks_used");
    h.kv_blocks_total = num("kv_blocks_total");
    h.prefix_cache_queries = num("prefix_cache_queries");
    h.prefix_cache_hits = num("prefix_cache_hits");
    h.requests_cancelled = num("requests_cancelled");
    h.requests_routed = num("requests_routed");
    h.requests_resubmitted = num("requests_resubmitted");
    out.push_back(h);
  }
  return out;
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
template <class F>
bool eventually(F cond, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

/// What one streamed completion delivered.
struct stream_result {
  int status = 0;
  std::map<int64_t, std::string> text;          ///< per choice
  std::map<int64_t, std::string> finish;        ///< per choice
  int64_t completion_tokens = -1;               ///< from the usage chunk
  bool done = false;                            ///< [DONE] arrived
  bool operator==(const stream_result& o) const {
    return status == o.status && text == o.text && finish == o.finish && completion_tokens == o.completion_tokens &&
           done == o.done;
  }
};

inline std::ostream& operator<<(std::ostream& os, const stream_result& r) {
  os << "status " << r.status << " done " << r.done << " tokens " << r.completion_tokens;
  for (const auto& [i, t] : r.text) os << " [" << i << ": " << t.size() << " bytes, " << r.finish.at(i) << "]";
  return os;
}

/// POST /v1/completions with "stream": true; `fields` are extra JSON members ("\"n\":2,...").
inline stream_result stream_completion(uint16_t port, const std::string& prompt, const std::string& fields) {
  std::string body = "{\"model\":\"llama-tiny\",\"stream\":true,\"stream_options\":{\"include_usage\":true},";
  body += "\"prompt\":\"" + prompt + "\"," + fields + "}";
  const auto r = http_call(port, "POST", "/v1/completions", body);
  stream_result out;
  out.status = r.status;
  simdjson::dom::parser parser;
  for (const auto& payload : sse_payloads(r.body)) {
    if (payload == "[DONE]") {
      out.done = true;
      continue;
    }
    simdjson::dom::element doc;
    if (parser.parse(payload).get(doc)) continue;
    simdjson::dom::array choices;
    if (!doc["choices"].get(choices)) {
      for (auto c : choices) {
        int64_t index = 0;
        std::string_view text, finish;
        if (c["index"].get(index)) continue;
        if (!c["text"].get(text)) out.text[index] += std::string(text);
        if (!c["finish_reason"].get(finish)) out.finish[index] = std::string(finish);
      }
    }
    int64_t tokens = 0;
    if (!doc["usage"]["completion_tokens"].get(tokens)) out.completion_tokens = tokens;
  }
  return out;
}

}  // namespace actorserve::testing
