#pragma once
/// vLLM `serve` flags that mean nothing to this server, so that a vLLM launch line starts here:
/// each is accepted with one warning naming why it has no effect; a value that would change
/// behaviour here (e.g. --pipeline-parallel-size 2) is refused, naming the flag.
#include <string>
#include <vector>

namespace CLI { class App; }

namespace actorserve {

/// Adds the flags to `app`; each one given appends its warning to `warnings` while parsing.
void add_vllm_flags_without_effect(CLI::App& app, std::vector<std::string>& warnings);

}  // namespace actorserve
