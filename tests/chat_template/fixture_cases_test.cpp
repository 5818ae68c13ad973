/// Every reference case in tests/data/chat_templates/cases.json (rendered by Python jinja2 in
/// transformers' environment) must come out byte for byte, or fail where jinja2 raised.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "json_input.hpp"
#include "protocol/chat_template/chat_template.hpp"
#include "test_data.hpp"

using namespace actorserve;
using namespace actorserve::protocol;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string fixture_dir() { return actorserve::testing::test_data_dir() + "/chat_templates"; }

const chat_value& cases() {
  static const chat_value all = actorserve::testing::parse_json(read_file(fixture_dir() + "/cases.json"));
  return all;
}

std::string field(const chat_value& c, const char* key) {
  const chat_value* v = c.find(key);
  return v && v->is_string() ? v->as_string() : std::string();
}

class FixtureCase : public ::testing::TestWithParam<std::size_t> {};

TEST_P(FixtureCase, RendersLikeTransformers) {
  const chat_value& c = cases().as_array().at(GetParam());
  SCOPED_TRACE(field(c, "template") + " / " + field(c, "case"));
  const std::string source = read_file(fixture_dir() + "/templates/" + field(c, "template") + ".jinja");
  ASSERT_FALSE(source.empty());
  auto tpl = chat_template::parse(source);
  ASSERT_TRUE(tpl.ok()) << tpl.err().message;

  chat_template_inputs in;
  in.messages = c.find("messages")->as_array();
  in.add_generation_prompt = c.find("add_generation_prompt")->as_bool();
  if (const chat_value* bos = c.find("bos_token"); bos && bos->is_string()) in.bos_token = bos->as_string();
  if (const chat_value* eos = c.find("eos_token"); eos && eos->is_string()) in.eos_token = eos->as_string();
  if (const chat_value* tools = c.find("tools")) in.tools = *tools;
  in.fixed_time = 1721952000;  // the reference's fixed strftime_now date, 2024-07-26
  auto out = apply_chat_template(*tpl, in);

  if (const chat_value* err = c.find("error"); err && err->as_bool()) {
    ASSERT_FALSE(out.ok()) << "rendered instead of raising: " << *out;
    std::string expected = field(c, "error_message");
    const std::string prefix = "TemplateError: ";
    if (expected.rfind(prefix, 0) == 0) expected = expected.substr(prefix.size());
    EXPECT_EQ(out.err().message, expected);
    EXPECT_EQ(out.err().code, error_code::invalid_argument);
    return;
  }
  ASSERT_TRUE(out.ok()) << out.err().message;
  EXPECT_EQ(*out, field(c, "rendered"));
}

std::vector<std::size_t> case_indices() {
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < cases().as_array().size(); ++i) idx.push_back(i);
  return idx;
}

std::string case_name(const ::testing::TestParamInfo<std::size_t>& info) {
  const chat_value& c = cases().as_array().at(info.param);
  std::string name = field(c, "template") + "_" + field(c, "case");
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(ChatTemplates, FixtureCase, ::testing::ValuesIn(case_indices()), case_name);

TEST(FixtureCases, AllFifteenArePresent) { EXPECT_EQ(cases().as_array().size(), 15u); }

}  // namespace
