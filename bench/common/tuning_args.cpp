#include "bench/common/tuning_args.hpp"

#include "bench/cuda/tuning_flags.hpp"
#include "gpu/executor_factory.hpp"

namespace actorserve::bench {

tuning_args split_tuning_flags(int argc, char** argv) {
  tuning_args t;
  if (argc > 0) t.rest.push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const int at = i;
    if (bench_cuda::parse_tuning_flag(i, argc, argv, t.tuning)) {
      t.flags.emplace_back(argv[at]);
      continue;
    }
    t.rest.push_back(argv[i]);
  }
  return t;
}

std::string tuning_flags_text(const tuning_args& t) {
  std::string s;
  for (const std::string& f : t.flags) s += (s.empty() ? "" : " ") + f;
  return s;
}

status check_tuning_device(const tuning_args& t, const engine_config& cfg) {
  if (t.flags.empty() || gpu::picks_cuda(cfg)) return {};
  return make_error(error_code::invalid_argument,
                    tuning_flags_text(t) + ": CUDA kernel choices need the CUDA executor (--device cuda)");
}

}  // namespace actorserve::bench
