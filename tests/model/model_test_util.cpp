#include "model/model_test_util.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <future>

#include "test_data.hpp"

namespace actorserve::testing {

std::vector<reference_case> load_reference(const std::string& model_name) {
  std::vector<reference_case> out;
  const std::string path = model_dir(model_name) + "/reference.json";
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.load(path).get(root) != simdjson::SUCCESS) {
    ADD_FAILURE() << "cannot parse " << path;
    return out;
  }
  simdjson::dom::array cases;
  if (root["cases"].get_array().get(cases) != simdjson::SUCCESS) {
    ADD_FAILURE() << path << ": no cases";
    return out;
  }
  for (simdjson::dom::element c : cases) {
    reference_case rc;
    for (simdjson::dom::element v : c["prompt_ids"].get_array()) rc.prompt_ids.push_back(int32_t(int64_t(v)));
    for (simdjson::dom::element v : c["last_logits"].get_array()) rc.last_logits.push_back(float(double(v)));
    for (simdjson::dom::element v : c["greedy_ids"].get_array()) rc.greedy_ids.push_back(int32_t(int64_t(v)));
    for (simdjson::dom::element v : c["greedy_top2_margins"].get_array()) rc.greedy_top2_margins.push_back(double(v));
    out.push_back(std::move(rc));
  }
  return out;
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return INFINITY;
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(double(a[i]) - double(b[i])));
    max_ref = std::max(max_ref, std::abs(double(b[i])));
  }
  return max_diff / max_ref;
}

gpu::step_sequence greedy_seq(uint64_t seq_id, int32_t num_computed, std::vector<int32_t> tokens,
                              std::vector<int32_t> blocks, bool sample) {
  gpu::step_sequence s;
  s.seq_id = seq_id;
  s.num_computed = num_computed;
  s.new_tokens = std::move(tokens);
  s.block_table = std::move(blocks);
  s.sample = sample;
  s.params.temperature = 0.0f;
  s.seed = 1;
  return s;
}

generation run_greedy(gpu::cpu_executor& ex, const std::vector<int32_t>& prompt, const std::vector<int32_t>& blocks,
                      int32_t chunk, int32_t num_decode) {
  generation g;
  const int32_t n = static_cast<int32_t>(prompt.size());
  const int32_t step = chunk > 0 ? chunk : n;
  uint64_t step_id = 0;
  int32_t next = -1;
  for (int32_t done = 0; done < n; done += step) {
    const int32_t end = std::min(n, done + step);
    gpu::step_batch b;
    b.step_id = step_id++;
    b.seqs.push_back(greedy_seq(7, done, {prompt.begin() + done, prompt.begin() + end}, blocks, end == n));
    std::vector<std::vector<float>> logits;
    gpu::step_result r = ex.run_step_sync(b, &logits);
    EXPECT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    if (!r.outcome.ok()) return g;
    if (end == n) {
      g.prompt_logits = logits.at(0);
      next = r.tokens.at(0).token_id;
    }
  }
  for (int32_t i = 0; i < num_decode; ++i) {
    g.tokens.push_back(next);
    if (i + 1 == num_decode) break;
    gpu::step_batch b;
    b.step_id = step_id++;
    b.seqs.push_back(greedy_seq(7, n + i, {next}, blocks));
    gpu::step_result r = ex.run_step_sync(b);
    EXPECT_TRUE(r.outcome.ok()) << r.outcome.err().message;
    if (!r.outcome.ok() || r.tokens.size() != 1) return g;
    next = r.tokens[0].token_id;
  }
  return g;
}

std::vector<int32_t> block_range(int32_t first, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = first + i;
  return v;
}

std::unique_ptr<gpu::executor_group> make_cpu_group(const std::string& model_dir, const gpu::cpu_executor_options& opts) {
  auto group = gpu::make_cpu_executor_group(model_dir, opts);
  EXPECT_TRUE(group.ok()) << model_dir << " tp " << opts.tensor_parallel_size << ": " << group.err().message;
  if (!group.ok()) return nullptr;
  for (int64_t r = 0; r < group.value()->size(); ++r)
    dynamic_cast<gpu::cpu_executor&>(group.value()->shard(r)).keep_last_logits(true);
  return std::move(group).value();
}

gpu::step_result run_group_step(gpu::executor_group& group, const gpu::step_batch& batch,
                                std::vector<std::vector<float>>* last_logits) {
  std::promise<gpu::step_result> done;
  auto result = done.get_future();
  group.submit(batch, [&done](gpu::step_result r) { done.set_value(std::move(r)); });
  if (result.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "step " << batch.step_id << " did not finish";
    std::abort();   // `done` still refers to this frame
  }
  if (last_logits) *last_logits = dynamic_cast<gpu::cpu_executor&>(group.shard(0)).last_logits();
  return result.get();
}

std::string cpu_load_error(const std::string& dir) {
  gpu::cpu_executor_options opts;
  opts.num_blocks = 4;
  opts.threads = 1;
  auto ex = gpu::make_cpu_executor(dir, opts);
  EXPECT_FALSE(ex.ok()) << dir << " loaded";
  return ex.ok() ? std::string() : ex.err().message;
}

void expect_has(const std::string& msg, const std::vector<std::string>& needles) {
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}

}  // namespace actorserve::testing
