#pragma once
/// `actorserve generate`: many prompts at once through the engine (continuous batching), results
/// printed as one JSON array in input order.
#include <string>

#include "config/cli.hpp"
#include "config/error.hpp"

namespace actorserve::server {

/// Runs the generate command; prints the JSON to stdout, errors to stderr. Returns the exit code.
int run_generate(const command_line& cl);

/// What run_generate prints, and whether every request succeeded.
struct generate_output {
  std::string json;
  bool all_ok = true;
};

/// The work of run_generate (tests call this directly).
result<generate_output> generate_json(const command_line& cl);

}  // namespace actorserve::server
