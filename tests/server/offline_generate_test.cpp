// `actorserve generate` through the engine: input order, per-line sampling fields, logprobs, and
// greedy tokens equal to the Hugging Face reference of the llama-tiny fixture.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>
#include <fstream>

#include "scratch_dir.hpp"
#include "server/offline_generate.hpp"
#include "test_data.hpp"

namespace actorserve::server {
namespace {

struct reference_case {
  std::vector<int64_t> prompt, greedy;
};

std::vector<reference_case> load_reference(size_t count) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(actorserve::testing::model_dir("llama-tiny") + "/reference.json");
  std::vector<reference_case> out;
  for (auto c : doc["cases"].get_array()) {
    if (out.size() == count) break;
    reference_case r;
    for (auto x : c["prompt_ids"].get_array()) r.prompt.push_back(int64_t(x));
    for (auto x : c["greedy_ids"].get_array()) r.greedy.push_back(int64_t(x));
    out.push_back(std::move(r));
  }
  return out;
}

std::string join(const std::vector<int64_t>& ids) {
  std::string s;
  for (auto id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

std::vector<int64_t> ids_of(simdjson::dom::element e) {
  std::vector<int64_t> out;
  for (auto x : e.get_array()) out.push_back(int64_t(x));
  return out;
}

TEST(offline_generate, batches_prompts_and_prints_results_in_input_order) {
  const auto cases = load_reference(3);
  ASSERT_EQ(cases.size(), 3u);
  const actorserve::testing::scratch_dir dir("offline_generate");
  const auto file = dir / "requests.jsonl";
  {
    std::ofstream out(file);
    out << "{\"prompt_ids\": [" << join(cases[1].prompt) << "], \"max_tokens\": 24}\n";
    out << "\n{\"prompt\": \"hello world\", \"max_tokens\": 3, \"logprobs\": 2}\n";
    out << "{\"prompt_ids\": [" << join(cases[2].prompt) << "], \"max_tokens\": 5, \"temperature\": 0.9, \"seed\": 7}\n";
  }
  const std::string model = actorserve::testing::model_dir("llama-tiny");
  const std::string first = join(cases[0].prompt);
  const char* argv[] = {"actorserve", "generate", "--model", model.c_str(), "--device", "cpu", "--cpu-threads", "1",
                        "--num-gpu-blocks-override", "64", "--prompt-ids", first.c_str(), "--requests",
                        file.c_str(), "--max-tokens", "24", "--temperature", "0", "--ignore-eos"};
  auto cl = parse_command_line(static_cast<int>(std::size(argv)), argv);
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  auto out = generate_json(*cl);
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_TRUE(out->all_ok);

  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_FALSE(parser.parse(out->json).get(doc)) << out->json;
  simdjson::dom::array results = doc.get_array();
  ASSERT_EQ(results.size(), 4u);
  // --prompt-ids first, then the file's lines in order.
  EXPECT_EQ(ids_of(results.at(0)["token_ids"]), cases[0].greedy);
  EXPECT_EQ(ids_of(results.at(1)["token_ids"]), cases[1].greedy);
  EXPECT_EQ(std::string_view(results.at(0)["finish_reason"]), "length");

  auto hello = results.at(2);
  EXPECT_EQ(ids_of(hello["token_ids"]).size(), 3u);
  simdjson::dom::array lps = hello["logprobs"];
  ASSERT_EQ(lps.size(), 3u);
  for (auto step : lps) {
    EXPECT_EQ(step["top_logprobs"].get_array().size(), 2u);
    EXPECT_LE(double(step["logprob"]), 0.0);
  }
  EXPECT_GT(int64_t(hello["prompt_tokens"]), 0);

  auto sampled = results.at(3);
  EXPECT_EQ(ids_of(sampled["token_ids"]).size(), 5u);
  EXPECT_EQ(int64_t(sampled["index"]), 3);
  EXPECT_TRUE(sampled["logprobs"].error()) << "no logprobs unless asked";
}

TEST(offline_generate, a_bad_requests_line_names_the_file_line_and_field) {
  const actorserve::testing::scratch_dir dir("offline_generate_bad");
  const auto file = dir / "requests.jsonl";
  {
    std::ofstream out(file);
    out << "{\"prompt_ids\": [1, 2]}\n{\"prompt\": \"x\", \"top_p\": \"high\"}\n";
  }
  const std::string model = actorserve::testing::model_dir("llama-tiny");
  const char* argv[] = {"actorserve", "generate", "--model", model.c_str(), "--device", "cpu",
                        "--cpu-threads", "1", "--requests", file.c_str()};
  auto cl = parse_command_line(static_cast<int>(std::size(argv)), argv);
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  auto out = generate_json(*cl);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.err().message.find(":2: top_p"), std::string::npos) << out.err().message;
}

}  // namespace
}  // namespace actorserve::server
