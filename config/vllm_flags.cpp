#include "config/vllm_flags.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>

namespace actorserve {
namespace {

/// One vLLM flag: `accepted` lists the values that are harmless here (empty: any value; a flag
/// without a value has none), `why` ends "ignored: ...".
struct vllm_flag {
  std::string_view name;
  bool takes_value;
  std::array<std::string_view, 3> accepted;
  std::string_view why;
};

constexpr std::array<vllm_flag, 12> kFlags{{
    {"--trust-remote-code", false, {}, "models run on this server's own code; no remote code is loaded"},
    {"--disable-log-requests", false, {}, "requests are logged only with --enable-log-requests"},
    {"--disable-frontend-multiprocessing", false, {}, "the API server and the engine share one process"},
    {"--disable-custom-all-reduce", false, {}, "the CPU executor's shards sum in memory; no GPU all-reduce exists"},
    {"--disable-uvicorn-access-log", false, {}, "the access log is --enable-log-requests"},
    {"--tokenizer-mode", true, {"auto", "hf"}, "the model's tokenizer.json is always used"},
    {"--pipeline-parallel-size", true, {"1"}, "one GPU per server"},
    {"--swap-space", true, {}, "preemption recomputes; nothing is swapped to host memory"},
    {"--distributed-executor-backend", true, {}, "one process per server"},
    {"--uvicorn-log-level", true, {}, "set the log level with --log-level"},
    {"--max-log-len", true, {}, "request logs never hold prompt text"},
}};

}  // namespace

void add_vllm_flags_without_effect(CLI::App& app, std::vector<std::string>& warnings) {
  for (const auto& f : kFlags) {
    const std::string name(f.name);
    if (!f.takes_value) {
      app.add_flag_callback(name, [&warnings, &f, name] {
        warnings.push_back(fmt::format("{} (a vLLM flag) is ignored: {}", name, f.why));
      }, fmt::format("vLLM compatibility; ignored: {}", f.why))->group("vLLM flags without effect");
      continue;
    }
    app.add_option_function<std::string>(name, [&warnings, &f, name](const std::string& value) {
      const bool any = f.accepted[0].empty();
      const bool harmless =
          any || (!value.empty() && std::find(f.accepted.begin(), f.accepted.end(), value) != f.accepted.end());
      if (!harmless)
        throw CLI::ValidationError(name, fmt::format("'{}' is not supported ({})", value, f.why));
      warnings.push_back(fmt::format("{} {} (a vLLM flag) is ignored: {}", name, value, f.why));
    }, fmt::format("vLLM compatibility; ignored: {}", f.why))->group("vLLM flags without effect");
  }
}

}  // namespace actorserve
