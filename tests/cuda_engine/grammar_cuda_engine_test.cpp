// Grammar-constrained decoding through the engine on the CUDA executor (GPU suite): JSON-schema
// and regex outputs complete and validate, greedy and seeded, with one step in flight and two
// (masks planned ahead, filled when the previous step's token is known), eager and through the
// decode CUDA graphs, and with executor failures (the pending masks abandoned, all recomputed).
// Unconstrained requests run beside them. Skips without a GPU.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "../engine/engine_harness.hpp"
#include "grammar/finite_constraints.hpp"
#include "grammar/json_validator.hpp"
#include "gpu/cuda/device_info.hpp"

namespace actorserve::actors {
namespace {

using namespace actors::testing;
using namespace std::chrono_literals;

using grammar::testing::kRecordRegex;
using grammar::testing::kRecordSchema;

struct variant {
  const char* name;
  bool async, eager;
  std::vector<int64_t> failures;
};

/// 12 constrained requests (even: the regex, odd: the schema; greedy, seeded, n = 2, min_tokens)
/// and 12 unconstrained ones; every constrained output checked.
void run_and_check(const variant& v) {
  auto cfg = tiny_config(4096);
  cfg.executor.device = device_kind::cuda;
  cfg.executor.enforce_eager = v.eager;
  cfg.executor.inject_step_failures = v.failures;
  cfg.cache.gpu_memory_utilization = 0.5;
  cfg.model.max_model_len = 256;
  cfg.scheduler.async_scheduling = v.async;
  auto e = start_engine(cfg);
  ASSERT_NE(e, nullptr) << v.name;
  auto g = e->compile_grammar(grammar::testing::record_schema_spec());
  ASSERT_TRUE(g.ok()) << v.name << ": " << g.err().message;
  auto rg = e->compile_grammar(grammar::testing::record_regex_spec());
  ASSERT_TRUE(rg.ok()) << v.name << ": " << rg.err().message;
  collector c;
  for (int i = 0; i < 12; ++i) {
    sampling_params p;
    p.max_tokens = 150;
    p.temperature = i % 3 == 0 ? 0.0f : 1.0f;
    p.seed = 100 + i;
    p.n = i % 4 == 1 ? 2 : 1;
    p.min_tokens = i % 4 == 2 ? 3 : 0;
    auto req = make_request("s" + std::to_string(i), {1, 2, 3 + i, 4}, p);
    req.grammar = i % 2 ? *g : *rg;
    req.grammar_field = i % 2 ? "guided_json" : "guided_regex";
    auto free_req = make_request("f" + std::to_string(i), {5, 6, 7, 8 + i}, p);
    auto st = e->submit(std::move(req), c.sink(i));
    EXPECT_TRUE(st.ok()) << v.name << ": " << (st.ok() ? "" : st.err().message);
    EXPECT_TRUE(e->submit(std::move(free_req), c.sink(100 + i)).ok()) << v.name;
  }
  ASSERT_TRUE(c.wait()) << v.name;
  const auto stats = e->stats();
  e->shutdown(0ms);
  EXPECT_EQ(stats.executor_restarts, int64_t(v.failures.size())) << v.name;
  grammar::testing::json_validator validator(kRecordSchema);
  int checked = 0;
  for (const auto& [key, choices] : c.results()) {
    if (key >= 100) continue;
    for (const auto& [index, r] : choices) {
      ++checked;
      if (key % 2 == 1) {
        EXPECT_EQ(r.finish, finish_reason::stop) << v.name << ": request " << key << ": " << r.text;
        std::string why;
        EXPECT_TRUE(validator.valid(r.text, &why)) << v.name << ": " << r.text << ": " << why;
      } else {
        EXPECT_TRUE(std::regex_match(r.text, std::regex(kRecordRegex))) << v.name << ": " << r.text;
      }
    }
  }
  EXPECT_EQ(checked, 15) << v.name;  // 12 requests, 3 of them with n = 2
}

TEST(GrammarCudaEngine, ConstrainedOutputsValidateOneAndTwoStepsInFlightEagerGraphsAndFailures) {
  if (gpu::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  for (const variant& v : {variant{"one step, graphs", false, false, {}}, variant{"two steps, graphs", true, false, {}},
                           variant{"two steps, eager", true, true, {}},
                           variant{"two steps, failed steps 4 11 19", true, false, {4, 11, 19}}})
    run_and_check(v);
}

}  // namespace
}  // namespace actorserve::actors
