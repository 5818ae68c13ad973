#pragma once
/// Runs a set of generation requests through the actor engine and times them: every request is
/// submitted at once (the engine batches them continuously) and the call returns when all have
/// finished. Used by bench_throughput and bench_latency.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine.hpp"
#include "config/error.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::bench {

/// What happened to one request; times are seconds since the run started.
struct request_record {
  std::string request_id;
  int64_t prompt_len = 0;
  int64_t output_len = 0;                 ///< tokens generated
  double first_token_s = -1;              ///< arrival of the first generated token
  double finish_s = -1;
  std::vector<double> token_times_s;      ///< arrival time of each generated token (deltas may carry several)
  std::vector<int32_t> output_ids;        ///< when kept
  std::optional<actors::finish_reason> finish;
  std::string error;                      ///< submit or engine error, empty if none
  actors::usage_counts usage;
};

struct run_report {
  std::vector<request_record> requests;   ///< in submission order
  double elapsed_s = 0;                   ///< first submit to last finish
  actors::engine_stats before, after;     ///< engine counters around the run
  int64_t peak_kv_blocks_used = 0;        ///< sampled every few milliseconds
  int64_t peak_running = 0;
  int64_t num_failed = 0;                 ///< finished with an error or cancelled
  bool timed_out = false;                 ///< the timeout cancelled what was left
};

/// Submits every request (`one_by_one`: through submit, each one an arrival of its own; else one
/// submit_batch) and waits for all to finish. At `timeout_s` the unfinished ones are cancelled and
/// the report (timed_out) covers the tokens generated until then.
result<run_report> run_requests(actors::engine& eng, std::vector<actors::generation_request> reqs, bool keep_outputs,
                                double timeout_s, bool one_by_one = false);

/// What the first failed request of `rep` reports: its error, else how it finished.
std::string first_failure(const run_report& rep);

/// The step-timing line for the steps between two stats snapshots, e.g.
/// `GPU idle between steps: 1.2 % (busy 950.0 ms of 961.6 ms, 100 steps, batch mean 256.0)`
/// over decode steps, then the same over all steps run back to back.
std::string gpu_idle_lines(const actors::engine_stats& before, const actors::engine_stats& after);

/// The step split of issue #8's offline analysis, over the steps between two snapshots:
///   `Decode-only steps:        4039 of 13.98 ms mean, batch mean 249.5 (56.47 s busy)`
///   `Prefill-carrying steps:   76 of 53.27 ms mean, 1843.2 tokens mean (4.05 s busy)`
/// (device busy time per step; the tokens of a prefill-carrying step include its decode rows).
std::string step_phase_lines(const actors::engine_stats& before, const actors::engine_stats& after);

/// The part of a run's elapsed time (first submit to last finish) in no step's busy time nor in
/// the device's idle time between timed steps: host work before the first step (admission,
/// scheduling) and the gaps before untimed steps.
///   `Outside the steps:        0.00 s of the 0.61 s elapsed (0.61 s busy in steps, 0.00 s idle between timed steps)`
std::string outside_steps_line(const actors::engine_stats& before, const actors::engine_stats& after, double elapsed_s);

/// Starts an engine, timing the start; logs the error (naming the flag or file) on failure.
result<std::unique_ptr<actors::engine>> start_engine(const engine_config& cfg, double& seconds);
/// The same, the executor made with the CUDA kernel choices `tuning` (bench/common/tuning_args.hpp).
result<std::unique_ptr<actors::engine>> start_engine(const engine_config& cfg, const gpu::cuda_tuning& tuning,
                                                     double& seconds);

}  // namespace actorserve::bench
