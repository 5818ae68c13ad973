#pragma once
/// Command lines of the benchmark programs: each program declares its own options as plain
/// pointers; engine flags (--model, --device, --max-num-seqs, ...) are whatever
/// `actorserve serve` accepts (config/cli.hpp), so a benchmark runs the engine exactly as the
/// server would. CLI11 lives in bench_cli.cpp alone.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "config/engine_config.hpp"
#include "config/error.hpp"

namespace actorserve::bench {

/// One program-specific option; the pointee holds the default and receives the value.
struct bench_option {
  std::string name;                                       ///< e.g. "--input-len"
  std::string help;
  std::variant<int64_t*, double*, bool*, std::string*> target;  ///< bool: a flag
};

struct bench_command_line {
  engine_config engine;                                   ///< when parsed with engine flags
  bool exit_now = false;                                  ///< --help: print `output`, exit 0
  std::string output;
};

/// Parses `own` options and, when `with_engine`, every `actorserve serve` flag; errors name the flag.
result<bench_command_line> parse_bench_command_line(const std::string& description, const std::vector<bench_option>& own,
                                                    bool with_engine, int argc, const char* const* argv);

/// The argv of this process as one shell-quoted line (for result headers).
std::string command_line_text(int argc, const char* const* argv);

}  // namespace actorserve::bench
