#pragma once
// Shared helpers of the tokenizer tests: fixture paths, cases.json reading, loading.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "protocol/tokenizer/tokenizer.hpp"
#include "test_data.hpp"

namespace actorserve::testing {

/// One entry of tests/data/tokenizers/NAME/cases.json.
struct tokenizer_case {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
  std::string decoded_skip_special;
};

inline std::string tokenizer_dir(const std::string& name) { return test_data_dir() + "/tokenizers/" + name; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<tokenizer_case> load_cases(const std::string& name) {
  std::vector<tokenizer_case> out;
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  std::string path = tokenizer_dir(name) + "/cases.json";
  if (parser.load(path).get(root) != simdjson::SUCCESS) {
    ADD_FAILURE() << "cannot parse " << path;
    return out;
  }
  for (simdjson::dom::element c : root["cases"].get_array()) {
    tokenizer_case tc;
    tc.text = std::string(std::string_view(c["text"].get_string()));
    for (simdjson::dom::element id : c["ids"].get_array()) tc.ids.push_back(static_cast<int32_t>(int64_t(id.get_int64())));
    tc.decoded = std::string(std::string_view(c["decoded"].get_string()));
    tc.decoded_skip_special = std::string(std::string_view(c["decoded_skip_special"].get_string()));
    out.push_back(std::move(tc));
  }
  return out;
}

inline protocol::tokenizer load_fixture_tokenizer(const std::string& name) {
  auto t = protocol::tokenizer::from_files(tokenizer_dir(name) + "/tokenizer.json", "");
  if (!t) {
    ADD_FAILURE() << t.err().message;
    std::abort();
  }
  return std::move(t).value();
}

inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names = {"bytelevel", "sentencepiece"};
  return names;
}

}  // namespace actorserve::testing
