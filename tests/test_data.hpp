#pragma once
/// Where the test fixtures live: $ACTORSERVE_TEST_DATA (the GPU bundle sets it) or the source tree.
#include <cstdlib>
#include <string>

namespace actorserve::testing {
inline std::string test_data_dir() {
  if (const char* env = std::getenv("ACTORSERVE_TEST_DATA"); env && *env) return env;
  return ACTORSERVE_TEST_DATA_DEFAULT;
}
inline std::string model_dir(const std::string& name) { return test_data_dir() + "/models/" + name; }
}  // namespace actorserve::testing
