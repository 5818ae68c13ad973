#pragma once
/// Shared helpers of the model tests: reading reference.json and driving a cpu_executor through
/// the paged path (prefill, then one decode step at a time).
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/cpu/cpu_executor.hpp"

namespace actorserve::testing {

struct reference_case {
  std::vector<int32_t> prompt_ids;
  std::vector<float> last_logits;
  std::vector<int32_t> greedy_ids;
  std::vector<double> greedy_top2_margins;
};

/// The cases of models/<name>/reference.json; fails the current test on a parse error.
std::vector<reference_case> load_reference(const std::string& model_name);

/// max |a - b| / max |b|.
double relative_error(const std::vector<float>& a, const std::vector<float>& b);

/// A greedy step_sequence: `tokens` at positions num_computed..., blocks from `blocks`.
gpu::step_sequence greedy_seq(uint64_t seq_id, int32_t num_computed, std::vector<int32_t> tokens,
                              std::vector<int32_t> blocks, bool sample = true);

/// Runs one sequence through `ex`: the prompt in prefill chunks of `chunk` tokens (0: whole),
/// then `num_decode` greedy decode steps. Returns the logits at the prompt's last token and the
/// generated ids.
struct generation {
  std::vector<float> prompt_logits;
  std::vector<int32_t> tokens;
};
generation run_greedy(gpu::cpu_executor& ex, const std::vector<int32_t>& prompt, const std::vector<int32_t>& blocks,
                      int32_t chunk, int32_t num_decode);

/// The CPU executor's shards of `model_dir` as make_cpu_executor groups them (a group of one at
/// opts.tensor_parallel_size 1), every shard keeping its last logits; fails the test on an error.
std::unique_ptr<gpu::executor_group> make_cpu_group(const std::string& model_dir, const gpu::cpu_executor_options& opts);

/// Submits `batch` to `group` and waits for its result (failing the test after 60 s); when
/// `last_logits` is set it receives shard 0's raw logits per sequence of the batch.
gpu::step_result run_group_step(gpu::executor_group& group, const gpu::step_batch& batch,
                                std::vector<std::vector<float>>* last_logits = nullptr);

/// The error a CPU executor's start gives for the model directory `dir` (the test fails when it loads).
std::string cpu_load_error(const std::string& dir);

/// Fails the current test for each of `needles` that `msg` lacks.
void expect_has(const std::string& msg, const std::vector<std::string>& needles);

/// Block ids [first, first + n).
std::vector<int32_t> block_range(int32_t first, int32_t n);

}  // namespace actorserve::testing
