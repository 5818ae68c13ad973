// Engines on many processes behind one API, on loopback with the CPU executor and llama-tiny:
// three `actorserve engine` processes, front ends (`actorserve serve --engines`) with cache-aware
// and round-robin routing, and a single-process `actorserve serve` whose outputs are the
// reference. Streams with shared prefixes, an engine killed mid-stream (kill -9) and restarted,
// a front end killed, and TLS with and without a valid certificate.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "processes.hpp"
#include "scratch_dir.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr size_t num_engines = 3;

std::vector<std::string> engine_args(uint16_t port, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"engine", "--model", model_dir("llama-tiny"), "--listen",
                                "127.0.0.1:" + std::to_string(port), "--device", "cpu", "--cpu-threads", "1",
                                "--cpu-kv-cache-space", "0.05", "--log-level", "info"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<std::string> front_args(const std::vector<uint16_t>& ports, const std::string& routing,
                                    std::vector<std::string> extra = {}) {
  std::string list;
  for (uint16_t p : ports) list += (list.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(p);
  std::vector<std::string> a = {"serve", "--model", model_dir("llama-tiny"), "--port", "0", "--engines", list,
                                "--routing", routing, "--disable-log-stats", "--engine-connect-timeout", "30"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

/// Runs `n` jobs on `threads` client threads.
template <class F>
void run_parallel(size_t n, size_t threads, F job) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) job(i);
    });
  for (auto& t : pool) t.join();
}

class cluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_.emplace("cluster");
    for (size_t i = 0; i < num_engines; ++i) start_engine(i, 0);
    for (size_t i = 0; i < num_engines; ++i) {
      const auto line = engines_[i].wait_for_line("engine listening on", 60s);
      ASSERT_FALSE(line.empty()) << "engine " << i << " did not start; see " << engines_[i].log();
      ports_.push_back(port_in(line, "listening on"));
    }
    cache_aware_ = start_front("cache-aware", "front-cache-aware", &cache_aware_port_);
    round_robin_ = start_front("round-robin", "front-round-robin", &round_robin_port_);
    reference_ = process({"serve", "--model", model_dir("llama-tiny"), "--port", "0", "--device", "cpu",
                          "--cpu-threads", "1", "--cpu-kv-cache-space", "0.05", "--disable-log-stats"},
                         (*dir_ / "reference.log").string());
    const auto line = reference_.wait_for_line("listening on http", 60s);
    ASSERT_FALSE(line.empty()) << "see " << reference_.log();
    reference_port_ = port_in(line, "http://");
  }

  static void TearDownTestSuite() {
    cache_aware_.kill_now();
    round_robin_.kill_now();
    reference_.kill_now();
    for (auto& e : engines_) e.kill_now();
    // The logs stay after a failure, or with ACTORSERVE_KEEP_TEST_LOGS set. NOTE: the suite's
    // Failed(), since Test::HasFailure() here sees only the suite set-up's and tear-down's own.
    if (::testing::UnitTest::GetInstance()->current_test_suite()->Failed() || std::getenv("ACTORSERVE_KEEP_TEST_LOGS"))
      dir_->keep();
    dir_.reset();
  }

  static void start_engine(size_t i, uint16_t port) {
    engines_.resize(num_engines);
    engines_[i] = process(engine_args(port), (*dir_ / ("engine" + std::to_string(i) + ".log")).string());
  }

  /// Starts engine `i` again on its port and waits until both front ends have it up.
  static void restart_engine(size_t i) {
    start_engine(i, ports_[i]);
    ASSERT_FALSE(engines_[i].wait_for_line("engine listening on", 60s).empty()) << engines_[i].log();
    for (uint16_t front : {cache_aware_port_, round_robin_port_})
      EXPECT_TRUE(eventually([&] { return health_of(front)[i].up; }, 30s)) << "front end " << front;
  }

  static process start_front(const std::string& routing, const std::string& name, uint16_t* port,
                             std::vector<std::string> extra = {}) {
    process p(front_args(ports_, routing, std::move(extra)), (*dir_ / (name + ".log")).string());
    const auto line = p.wait_for_line("listening on http", 60s);
    EXPECT_FALSE(line.empty()) << "front end " << name << " did not start; see " << p.log();
    *port = port_in(line, "http://");
    // Every engine up, so routing sees all of them from the first request on.
    EXPECT_TRUE(eventually(
        [&] {
          auto h = health_of(*port);
          return h.size() == num_engines && std::all_of(h.begin(), h.end(), [](auto& e) { return e.up; });
        },
        30s));
    return p;
  }

  /// Waits until no engine runs or queues anything (as front end `port` last heard).
  static bool engines_idle(uint16_t port) {
    return eventually(
        [&] {
          auto h = health_of(port);
          return !h.empty() && std::all_of(h.begin(), h.end(), [](auto& e) {
            return !e.up || (e.running == 0 && e.waiting == 0 && e.kv_blocks_used == 0);
          });
        },
        30s);
  }

  /// The engines' prefix-cache hit rate over a workload run through front end `port`.
  static double hit_rate_of(uint16_t port, size_t num_requests, int salt) {
    auto before = health_of(port);
    // A hundred system prompts of ~100 tokens, each shared by every hundredth request (with its
    // own tail): its first request misses on any engine, the later ones hit only where an
    // earlier one ran.
    run_parallel(num_requests, 6, [&](size_t i) {
      const size_t prefix = i % 100;
      std::string system = "system " + std::to_string(salt) + "-" + std::to_string(prefix) + ":";
      for (int w = 0; w < 40; ++w) system += " rule" + std::to_string((w * 7 + prefix) % 23);
      const auto r = stream_completion(port, system + " user " + std::to_string(i), "\"max_tokens\":4,\"temperature\":0");
      EXPECT_EQ(r.status, 200);
      EXPECT_TRUE(r.done);
    });
    EXPECT_TRUE(engines_idle(port));
    // Load reports come every 100 ms: wait for one that has every prompt.
    std::this_thread::sleep_for(300ms);
    auto after = health_of(port);
    int64_t queries = 0, hits = 0;
    for (size_t e = 0; e < after.size(); ++e) {
      queries += after[e].prefix_cache_queries - before[e].prefix_cache_queries;
      hits += after[e].prefix_cache_hits - before[e].prefix_cache_hits;
    }
    return queries > 0 ? double(hits) / double(queries) : 0.0;
  }

  /// The processes' logs, and the TLS test's certificates.
  static inline std::optional<scratch_dir> dir_;
  static inline std::vector<process> engines_;
  static inline std::vector<uint16_t> ports_;
  static inline process cache_aware_, round_robin_, reference_;
  static inline uint16_t cache_aware_port_ = 0, round_robin_port_ = 0, reference_port_ = 0;
};

TEST_F(cluster, cache_aware_routing_hits_the_prefix_cache_more_than_round_robin) {
  constexpr size_t per_policy = 500;
  const double cache_aware = hit_rate_of(cache_aware_port_, per_policy, 1);
  const double round_robin = hit_rate_of(round_robin_port_, per_policy, 2);
  std::printf("prefix-cache hit rate over %zu streamed requests on %zu engines: cache-aware %.3f, round-robin %.3f\n",
              per_policy, num_engines, cache_aware, round_robin);
  RecordProperty("hit_rate_cache_aware", std::to_string(cache_aware));
  RecordProperty("hit_rate_round_robin", std::to_string(round_robin));
  EXPECT_GT(cache_aware, round_robin + 0.2);
}

/// The failover test's requests: greedy and seeded, one and two choices, long enough to be cut.
struct failover_case {
  std::string prompt, fields;
};

std::vector<failover_case> failover_cases() {
  std::vector<failover_case> cases;
  for (int i = 0; i < 18; ++i) {
    failover_case c;
    c.prompt = "failover " + std::to_string(i) + " shared opening words of the story";
    const std::string common = "\"max_tokens\":" + std::to_string(300 + 20 * i) + ",\"ignore_eos\":true";
    if (i % 3 == 0)
      c.fields = common + ",\"temperature\":0";
    else if (i % 3 == 1)
      c.fields = common + ",\"temperature\":0.9,\"seed\":" + std::to_string(100 + i);
    else
      c.fields = common + ",\"temperature\":1.0,\"top_p\":0.95,\"seed\":" + std::to_string(200 + i) + ",\"n\":2";
    cases.push_back(c);
  }
  return cases;
}

TEST_F(cluster, a_killed_engine_s_streams_complete_as_an_uninterrupted_run_and_it_rejoins) {
  const auto cases = failover_cases();
  std::vector<stream_result> expected(cases.size()), got(cases.size());
  run_parallel(cases.size(), 6, [&](size_t i) {
    expected[i] = stream_completion(reference_port_, cases[i].prompt, cases[i].fields);
  });
  const size_t victim = 1;
  const int64_t resubmitted_before = health_of(cache_aware_port_)[victim].requests_resubmitted;
  std::thread clients([&] {
    run_parallel(cases.size(), cases.size(),
                 [&](size_t i) { got[i] = stream_completion(cache_aware_port_, cases[i].prompt, cases[i].fields); });
  });
  // Kill it while it runs streams (as its last load report shows).
  EXPECT_TRUE(eventually([&] { return health_of(cache_aware_port_)[victim].running >= 2; }, 30s));
  engines_[victim].kill_now();
  clients.join();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(got[i], expected[i]) << "request " << i << " (" << cases[i].fields << ")";
    EXPECT_EQ(got[i].status, 200);
    EXPECT_TRUE(got[i].done);
  }
  auto h = health_of(cache_aware_port_);
  EXPECT_FALSE(h[victim].up);
  EXPECT_GT(h[victim].requests_resubmitted, resubmitted_before) << "the victim held streams when it died";
  // /metrics has the victim's series, and it is down.
  const auto page = http_call(cache_aware_port_, "GET", "/metrics").body;
  const std::string label = "engine=\"127.0.0.1:" + std::to_string(ports_[victim]) + "\"}";
  std::istringstream lines(page);
  std::string up_line;
  for (std::string l; std::getline(lines, l);)
    if (l.starts_with("actorserve:engine_up{") && l.find(label) != std::string::npos) up_line = l;
  EXPECT_TRUE(up_line.ends_with("} 0")) << "engine_up of the victim: '" << up_line << "'";
  std::printf("engine killed mid-stream: %lld requests moved, %zu streams identical to the single engine\n",
              static_cast<long long>(h[victim].requests_resubmitted - resubmitted_before), cases.size());

  // Restarted on its port, it rejoins both front ends and takes load.
  restart_engine(victim);
  const int64_t routed_before = health_of(round_robin_port_)[victim].requests_routed;
  run_parallel(9, 3, [&](size_t i) {
    const auto r = stream_completion(round_robin_port_, "after the restart " + std::to_string(i),
                                     "\"max_tokens\":8,\"temperature\":0");
    EXPECT_EQ(r.status, 200);
    EXPECT_TRUE(r.done);
  });
  EXPECT_GE(health_of(round_robin_port_)[victim].requests_routed - routed_before, 3);
}

TEST_F(cluster, an_engine_stopped_with_sigterm_hands_its_streams_to_the_others) {
  const auto all = failover_cases();
  const std::vector<failover_case> cases(all.begin(), all.begin() + 9);
  std::vector<stream_result> expected(cases.size()), got(cases.size());
  run_parallel(cases.size(), 3, [&](size_t i) {
    expected[i] = stream_completion(reference_port_, cases[i].prompt, cases[i].fields);
  });
  const size_t victim = 2;
  std::thread clients([&] {
    run_parallel(cases.size(), cases.size(),
                 [&](size_t i) { got[i] = stream_completion(round_robin_port_, cases[i].prompt, cases[i].fields); });
  });
  EXPECT_TRUE(eventually([&] { return health_of(round_robin_port_)[victim].running >= 1; }, 30s));
  engines_[victim].terminate();
  EXPECT_TRUE(engines_[victim].wait_exit(30s)) << "it stops by itself; " << engines_[victim].log();
  clients.join();
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "request " << i;
  restart_engine(victim);
}

TEST_F(cluster, a_killed_front_end_s_requests_are_freed_on_the_engines_and_others_go_on) {
  uint16_t doomed_port = 0;
  process doomed = start_front("round-robin", "front-doomed", &doomed_port);
  ASSERT_TRUE(engines_idle(cache_aware_port_));
  int64_t cancelled_before = 0;
  for (const auto& e : health_of(cache_aware_port_)) cancelled_before += e.requests_cancelled;
  constexpr size_t num_doomed = 6;
  std::vector<stream_result> cut(num_doomed);
  std::thread doomed_clients([&] {
    run_parallel(num_doomed, num_doomed, [&](size_t i) {
      cut[i] = stream_completion(doomed_port, "doomed " + std::to_string(i),
                                 "\"max_tokens\":2000,\"ignore_eos\":true,\"temperature\":0");
    });
  });
  // Another front end's streams run beside them and must not notice.
  std::vector<stream_result> others(4), others_expected(4);
  run_parallel(4, 4, [&](size_t i) {
    others_expected[i] = stream_completion(reference_port_, "bystander " + std::to_string(i),
                                           "\"max_tokens\":400,\"ignore_eos\":true,\"temperature\":0");
  });
  std::thread other_clients([&] {
    run_parallel(4, 4, [&](size_t i) {
      others[i] = stream_completion(cache_aware_port_, "bystander " + std::to_string(i),
                                    "\"max_tokens\":400,\"ignore_eos\":true,\"temperature\":0");
    });
  });
  // Every doomed request reached an engine (its front end routed it, and the engines run at least
  // that many).
  EXPECT_TRUE(eventually(
      [&] {
        int64_t routed = 0, running = 0;
        for (const auto& e : health_of(doomed_port)) routed += e.requests_routed;
        for (const auto& e : health_of(cache_aware_port_)) running += e.running + e.waiting;
        return routed >= static_cast<int64_t>(num_doomed) && running >= static_cast<int64_t>(num_doomed);
      },
      30s));
  doomed.kill_now();
  doomed_clients.join();
  for (const auto& r : cut) EXPECT_FALSE(r.done) << "a client of the killed front end sees its stream cut";
  other_clients.join();
  for (size_t i = 0; i < others.size(); ++i) EXPECT_EQ(others[i], others_expected[i]) << "bystander " << i;
  // The engines noticed (monitors) and freed every block of the dead front end's requests.
  EXPECT_TRUE(eventually(
      [&] {
        int64_t cancelled = 0;
        for (const auto& e : health_of(cache_aware_port_)) cancelled += e.requests_cancelled;
        return cancelled - cancelled_before >= static_cast<int64_t>(num_doomed);
      },
      10s));
  EXPECT_TRUE(engines_idle(cache_aware_port_));
}

TEST_F(cluster, streams_wait_for_their_only_engine_to_come_back) {
  process lone(engine_args(0), (*dir_ / "engine-lone.log").string());
  const auto line = lone.wait_for_line("engine listening on", 60s);
  ASSERT_FALSE(line.empty()) << lone.log();
  const uint16_t port = port_in(line, "listening on");
  process front({"serve", "--model", model_dir("llama-tiny"), "--port", "0", "--engines",
                 "127.0.0.1:" + std::to_string(port), "--disable-log-stats"},
                (*dir_ / "front-lone.log").string());
  const auto ready = front.wait_for_line("listening on http", 60s);
  ASSERT_FALSE(ready.empty()) << front.log();
  const uint16_t front_port = port_in(ready, "http://");
  const auto cases = failover_cases();
  const std::vector<failover_case> some(cases.begin(), cases.begin() + 3);
  std::vector<stream_result> expected(some.size()), got(some.size());
  for (size_t i = 0; i < some.size(); ++i) expected[i] = stream_completion(reference_port_, some[i].prompt, some[i].fields);
  std::thread clients([&] {
    run_parallel(some.size(), some.size(),
                 [&](size_t i) { got[i] = stream_completion(front_port, some[i].prompt, some[i].fields); });
  });
  EXPECT_TRUE(eventually([&] { return health_of(front_port)[0].running >= 1; }, 30s));
  lone.kill_now();
  EXPECT_TRUE(eventually([&] { return !health_of(front_port)[0].up; }, 10s));
  lone = process(engine_args(port), (*dir_ / "engine-lone-again.log").string());
  ASSERT_FALSE(lone.wait_for_line("engine listening on", 60s).empty()) << lone.log();
  clients.join();
  for (size_t i = 0; i < some.size(); ++i) EXPECT_EQ(got[i], expected[i]) << "request " << i;
}

/// Makes a CA and a certificate it signs, with the openssl command; false if it cannot.
bool make_certs(const fs::path& dir, const std::string& name) {
  const std::string d = dir.string() + "/" + name;
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + d + "-ca.key -out " + d + "-ca.pem -days 2 -subj " +
      "/CN=" + name + "-ca >/dev/null 2>&1 && openssl req -newkey rsa:2048 -nodes -keyout " + d + ".key -out " + d +
      ".csr -subj /CN=" + name + " >/dev/null 2>&1 && openssl x509 -req -in " + d + ".csr -CA " + d + "-ca.pem -CAkey " +
      d + "-ca.key -CAcreateserial -out " + d + ".pem -days 2 >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

TEST_F(cluster, with_tls_a_front_end_without_a_valid_certificate_is_refused) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) GTEST_SKIP() << "no openssl command";
  ASSERT_TRUE(make_certs(dir_->path(), "good"));
  ASSERT_TRUE(make_certs(dir_->path(), "rogue"));
  auto tls = [&](const std::string& name, const std::string& ca) {
    return std::vector<std::string>{"--tls-cert", (*dir_ / (name + ".pem")).string(), "--tls-key",
                                    (*dir_ / (name + ".key")).string(), "--tls-ca", (*dir_ / (ca + "-ca.pem")).string()};
  };
  process engine(engine_args(0, tls("good", "good")), (*dir_ / "engine-tls.log").string());
  const auto line = engine.wait_for_line("engine listening on", 60s);
  ASSERT_FALSE(line.empty()) << engine.log();
  EXPECT_NE(line.find("with TLS"), std::string::npos);
  const uint16_t port = port_in(line, "listening on");
  auto args = [&](std::vector<std::string> extra, const char* timeout_s = "3") {
    std::vector<std::string> a = {"serve", "--model", model_dir("llama-tiny"), "--port", "0", "--engines",
                                  "127.0.0.1:" + std::to_string(port), "--engine-connect-timeout", timeout_s,
                                  "--disable-log-stats"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // A certificate from another CA, and no TLS at all: refused, the front end does not start.
  for (auto [name, extra] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"rogue", tls("rogue", "good")}, {"plain", {}}}) {
    process front(args(extra), (*dir_ / ("front-tls-" + name + ".log")).string());
    const auto exit_status = front.wait_exit(30s);
    ASSERT_TRUE(exit_status) << name << ": still running; " << front.log();
    EXPECT_NE(*exit_status, 0) << name << ": " << front.log();
    EXPECT_FALSE(front.wait_for_line("no engine of", 1s).empty()) << name << ": " << front.log();
  }
  // A certificate the engine's CA signed: served.
  process front(args(tls("good", "good"), "30"), (*dir_ / "front-tls-good.log").string());
  const auto ready = front.wait_for_line("listening on http", 60s);
  ASSERT_FALSE(ready.empty()) << front.log();
  const auto r = stream_completion(port_in(ready, "http://"), "over TLS", "\"max_tokens\":8,\"temperature\":0");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.completion_tokens, 8);
}

}  // namespace
}  // namespace actorserve::testing
