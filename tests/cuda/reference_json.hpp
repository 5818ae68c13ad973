#pragma once
// Reads tests/data/models/<name>/reference.json (a small JSON subset: objects, arrays, numbers,
// strings, null) without a JSON library, for the executor tests.
#include <cstdint>
#include <string>
#include <vector>

namespace actorserve::testing {

struct ref_case {
  std::vector<int32_t> prompt_ids;
  std::vector<float> last_logits;
  std::vector<int32_t> greedy_ids;
  std::vector<double> margins;
};

/// The cases of the model's reference.json; empty when the file is missing or malformed.
std::vector<ref_case> read_reference(const std::string& model_dir);

}  // namespace actorserve::testing
