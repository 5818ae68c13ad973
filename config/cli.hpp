#pragma once
/// Command-line parsing for the `actorserve` binary (CLI11 lives in cli.cpp alone).
///   actorserve serve    [MODEL | --model DIR] [engine and server flags]
///   actorserve generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3 | --requests FILE) ...
///   actorserve engine   --model DIR --listen HOST:PORT [engine and TLS flags]
#include <cstdint>
#include <string>
#include <vector>

#include "config/engine_config.hpp"
#include "config/error.hpp"
#include "config/sampling_params.hpp"

namespace actorserve {

enum class command { serve, generate, engine };

struct generate_options {
  std::vector<std::string> prompts;                 ///< --prompt (repeatable)
  std::vector<std::vector<int32_t>> prompt_ids;     ///< --prompt-ids 12,7,99 (repeatable)
  std::string requests_file;                        ///< --requests: JSON lines of requests
  sampling_params sampling;                         ///< --max-tokens, --temperature, ...
};

struct command_line {
  command cmd = command::serve;
  engine_config engine;
  generate_options generate;
  std::vector<std::string> warnings;  ///< one per flag accepted without effect (vLLM's), to log at start
  bool exit_now = false;     ///< --help / --version: print `output`, exit with `exit_code`
  int exit_code = 0;
  std::string output;
};

/// Parses and validates. Errors name the flag; --help sets exit_now with the usage text.
result<command_line> parse_command_line(int argc, const char* const* argv);

/// Parses "12,7,99" into token ids; the error names `flag`.
result<std::vector<int32_t>> parse_id_list(std::string_view text, std::string_view flag);

}  // namespace actorserve
