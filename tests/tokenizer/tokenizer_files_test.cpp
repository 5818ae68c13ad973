// Loading: tokenizer_config.json / generation_config.json fields, added-token options, and
// clear errors (naming the file and the field) for missing, malformed or unsupported files.
#include <fstream>

#include "scratch_dir.hpp"
#include "tokenizer_fixture.hpp"

namespace actorserve::testing {
namespace {

using protocol::tokenizer;

/// A fresh directory named for the running test, removed at the end of the test.
class temp_dir {
 public:
  std::string file(const std::string& name, const std::string& content) const {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::string path() const { return dir_.path().string(); }

 private:
  scratch_dir dir_{std::string("tok_test_") + ::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  size_t pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << "fixture text not found: " << from;
  if (pos != std::string::npos) s.replace(pos, from.size(), to);
  return s;
}

std::string bytelevel_json() { return read_file(tokenizer_dir("bytelevel") + "/tokenizer.json"); }

TEST(tokenizer_files, config_gives_bos_eos_and_chat_template) {
  temp_dir dir;
  dir.file("tokenizer.json", bytelevel_json());
  dir.file("tokenizer_config.json", R"({
    "bos_token": "<|begin_of_text|>",
    "eos_token": {"content": "<|eot_id|>", "special": true},
    "add_bos_token": true,
    "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ messages }}"}]
  })");
  dir.file("generation_config.json", R"({"bos_token_id": 0, "eos_token_id": [1, 4]})");
  auto tok = tokenizer::from_model_dir(dir.path());
  ASSERT_TRUE(tok) << tok.err().message;
  EXPECT_EQ(tok->bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(tok->bos_token_id(), 0);
  EXPECT_EQ(tok->eos_token(), "<|eot_id|>");
  EXPECT_EQ(tok->eos_token_ids(), (std::vector<int32_t>{4, 1}));
  EXPECT_EQ(tok->add_bos_token(), true);
  EXPECT_EQ(tok->chat_template(), "{{ messages }}");
  ASSERT_NE(tok->chat_template("tool_use"), nullptr);
  EXPECT_EQ(*tok->chat_template("tool_use"), "T");
  EXPECT_EQ(tok->chat_template("rag"), nullptr);
}

TEST(tokenizer_files, chat_template_jinja_and_additional_templates_load) {
  temp_dir dir;
  dir.file("tokenizer.json", bytelevel_json());
  dir.file("tokenizer_config.json", R"({"chat_template": "old"})");
  dir.file("chat_template.jinja", "{{ messages[0].content }}\n");
  std::filesystem::create_directories(dir.path() + "/additional_chat_templates");
  dir.file("additional_chat_templates/tool_use.jinja", "{{ tools }}");
  auto tok = tokenizer::from_model_dir(dir.path());
  ASSERT_TRUE(tok) << tok.err().message;
  EXPECT_EQ(tok->chat_template(), "{{ messages[0].content }}\n");  // the file wins, as in transformers
  ASSERT_NE(tok->chat_template("tool_use"), nullptr);
  EXPECT_EQ(*tok->chat_template("tool_use"), "{{ tools }}");
}

TEST(tokenizer_files, config_may_be_missing_or_empty_path) {
  auto a = tokenizer::from_files(tokenizer_dir("bytelevel") + "/tokenizer.json", "");
  auto b = tokenizer::from_files(tokenizer_dir("bytelevel") + "/tokenizer.json", "/nonexistent/tokenizer_config.json");
  ASSERT_TRUE(a);
  ASSERT_TRUE(b);
  EXPECT_EQ(a->chat_template(), "");
  EXPECT_EQ(a->add_bos_token(), std::nullopt);
}

TEST(tokenizer_files, missing_tokenizer_json_is_not_found_naming_the_file) {
  auto t = tokenizer::from_files("/nonexistent/dir/tokenizer.json", "");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.err().code, error_code::not_found);
  EXPECT_NE(t.err().message.find("/nonexistent/dir/tokenizer.json"), std::string::npos) << t.err().message;
}

TEST(tokenizer_files, malformed_json_names_the_file) {
  temp_dir dir;
  std::string p = dir.file("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0,)");
  auto t = tokenizer::from_files(p, "");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.err().code, error_code::malformed_file);
  EXPECT_NE(t.err().message.find(p), std::string::npos) << t.err().message;
}

TEST(tokenizer_files, malformed_config_names_the_config_file) {
  temp_dir dir;
  dir.file("tokenizer.json", bytelevel_json());
  std::string cfg = dir.file("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  auto t = tokenizer::from_model_dir(dir.path());
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().message.find(cfg), std::string::npos) << t.err().message;
  EXPECT_NE(t.err().message.find("add_bos_token"), std::string::npos) << t.err().message;
}

TEST(tokenizer_files, unknown_model_type_is_unsupported_naming_file_and_field) {
  temp_dir dir;
  std::string p = dir.file("tokenizer.json", replace_once(bytelevel_json(), "\"type\": \"BPE\"", "\"type\": \"Unigram\""));
  auto t = tokenizer::from_files(p, "");
  ASSERT_FALSE(t);
  EXPECT_EQ(t.err().code, error_code::unsupported);
  EXPECT_NE(t.err().message.find(p), std::string::npos) << t.err().message;
  EXPECT_NE(t.err().message.find("model.type"), std::string::npos) << t.err().message;
  EXPECT_NE(t.err().message.find("Unigram"), std::string::npos) << t.err().message;
}

TEST(tokenizer_files, missing_model_section_names_the_field) {
  temp_dir dir;
  std::string p = dir.file("tokenizer.json", R"({"added_tokens": []})");
  auto t = tokenizer::from_files(p, "");
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().message.find("'model'"), std::string::npos) << t.err().message;
}

TEST(tokenizer_files, merge_of_unknown_tokens_names_the_merge) {
  temp_dir dir;
  std::string p = dir.file("tokenizer.json", replace_once(bytelevel_json(), "\"Ġ\",\n        \"Ġ\"", "\"Ġ\",\n        \"nope\""));
  auto t = tokenizer::from_files(p, "");
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().message.find("model.merges[0]"), std::string::npos) << t.err().message;
}

TEST(tokenizer_files, bad_split_regex_names_the_pattern) {
  temp_dir dir;
  std::string json = bytelevel_json();
  size_t pos = json.find("\"Regex\": \"");
  ASSERT_NE(pos, std::string::npos);
  json.insert(pos + 10, "(");
  std::string p = dir.file("tokenizer.json", json);
  auto t = tokenizer::from_files(p, "");
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().message.find("pre_tokenizer.pretokenizers[0].pattern"), std::string::npos) << t.err().message;
}

TEST(tokenizer_files, lstrip_and_rstrip_added_tokens_absorb_surrounding_spaces) {
  temp_dir dir;
  std::string json = replace_once(bytelevel_json(),
                                  "\"content\": \"<|eot_id|>\",\n      \"single_word\": false,\n      \"lstrip\": false,\n"
                                  "      \"rstrip\": false",
                                  "\"content\": \"<|eot_id|>\",\n      \"single_word\": false,\n      \"lstrip\": true,\n"
                                  "      \"rstrip\": true");
  auto plain = load_fixture_tokenizer("bytelevel");
  auto tok = tokenizer::from_files(dir.file("tokenizer.json", json), "");
  ASSERT_TRUE(tok) << tok.err().message;
  auto expected = plain.encode("ab", false);
  expected.push_back(4);
  auto cd = plain.encode("cd", false);
  expected.insert(expected.end(), cd.begin(), cd.end());
  EXPECT_EQ(tok->encode("ab  <|eot_id|>\t cd", false), expected);
  // Without the flags the spaces stay text.
  EXPECT_NE(plain.encode("ab  <|eot_id|>\t cd", false), expected);
}

TEST(tokenizer_files, added_tokens_match_longest_first) {
  temp_dir dir;
  // Add "<|eot" as a second added token; "<|eot_id|>" must still win where it matches.
  std::string json = replace_once(bytelevel_json(), "\"added_tokens\": [",
                                  "\"added_tokens\": [\n    {\"id\": 900, \"content\": \"<|eot\", \"single_word\": false, "
                                  "\"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true},");
  auto tok = tokenizer::from_files(dir.file("tokenizer.json", json), "");
  ASSERT_TRUE(tok) << tok.err().message;
  EXPECT_EQ(tok->encode("<|eot_id|><|eot", false), (std::vector<int32_t>{4, 900}));
  EXPECT_TRUE(tok->is_special(900));
}

TEST(tokenizer_files, metaspace_pre_tokenizer_equals_the_prepend_replace_normalizer) {
  // Newer Llama-2/Mistral files express the "▁" handling as a Metaspace pre-tokenizer
  // (prepend_scheme "first", split false) and a Metaspace decoder; both forms must agree.
  temp_dir dir;
  std::string json = read_file(tokenizer_dir("sentencepiece") + "/tokenizer.json");
  size_t n0 = json.find("\"normalizer\": {");
  size_t n1 = json.find("\"pre_tokenizer\": null");
  ASSERT_NE(n0, std::string::npos);
  ASSERT_NE(n1, std::string::npos);
  json.replace(n0, n1 + std::string("\"pre_tokenizer\": null").size() - n0,
               "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
               "\"prepend_scheme\": \"first\", \"split\": false}");
  size_t d0 = json.find("\"decoder\": {");
  size_t d1 = json.find("\"model\": {");
  ASSERT_NE(d0, std::string::npos);
  ASSERT_LT(d0, d1);
  json.replace(d0, d1 - d0,
               "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, "
               "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"first\", "
               "\"split\": false}]},\n  ");
  auto meta = tokenizer::from_files(dir.file("tokenizer.json", json), "");
  ASSERT_TRUE(meta) << meta.err().message;
  int num_leading_space = 0;
  for (const auto& c : load_cases("sentencepiece")) {
    EXPECT_EQ(meta->decode(c.ids, true), c.decoded_skip_special) << c.text;
    if (c.text.empty() || c.text[0] != ' ') {
      EXPECT_EQ(meta->encode(c.text, true), c.ids) << c.text;
      continue;
    }
    // Metaspace does not prepend to text that already starts with a space: one "▁" fewer.
    ++num_leading_space;
    auto ids = meta->encode(c.text, true);
    auto plain = load_fixture_tokenizer("sentencepiece");
    auto reference = plain.encode(c.text.substr(1), true);
    EXPECT_EQ(ids, reference) << c.text;
  }
  EXPECT_EQ(num_leading_space, 1);
}

}  // namespace
}  // namespace actorserve::testing

namespace actorserve::testing {
namespace {
// Found by fuzzing: a TemplateProcessing special token whose id is outside the vocabulary must be
// refused at load, not emitted by encode().
TEST(tokenizer_files, template_special_token_outside_vocabulary_names_the_field) {
  temp_dir dir;
  std::string p = dir.file("tokenizer.json", replace_once(bytelevel_json(), "\"ids\": [\n          0\n        ]",
                                                          "\"ids\": [\n          999999\n        ]"));
  auto t = tokenizer::from_files(p, "");
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().message.find("special_tokens"), std::string::npos) << t.err().message;
  EXPECT_NE(t.err().message.find("999999"), std::string::npos) << t.err().message;
}
}  // namespace
}  // namespace actorserve::testing

namespace actorserve::testing {
namespace {
// Fuzz finding 8: token ids index a dense table, so an id far past the declared entries (here
// 60,000,000 in a vocabulary of 3) is refused at load instead of allocating gigabytes.
TEST(tokenizer_files, token_id_far_beyond_the_vocabulary_is_refused) {
  temp_dir dir;
  const std::string json =
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 60000000}, "merges": []}, "added_tokens": []})";
  auto t = tokenizer::from_files(dir.file("tokenizer.json", json), "");
  ASSERT_FALSE(t);
  EXPECT_NE(t.err().message.find("model.vocab"), std::string::npos) << t.err().message;
  EXPECT_NE(t.err().message.find("3 entries"), std::string::npos) << t.err().message;
  // A two-token vocabulary plus one added token of id `id`.
  const auto with_added_token = [](const char* id) {
    return std::string(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
          "added_tokens": [{"id": )") + id + R"(, "content": "<x>", "single_word": false, "lstrip": false,
                            "rstrip": false, "normalized": false, "special": true}]})";
  };
  auto u = tokenizer::from_files(dir.file("tokenizer.json", with_added_token("50000000")), "");
  ASSERT_FALSE(u);
  EXPECT_NE(u.err().message.find("added_tokens[0]"), std::string::npos) << u.err().message;
  // A dense vocabulary with added tokens right after it (Llama 3: 128000 + 256) still loads.
  auto v = tokenizer::from_files(dir.file("tokenizer.json", with_added_token("2")), "");
  ASSERT_TRUE(v) << v.err().message;
  EXPECT_EQ(v->vocab_size(), 3);
}
}  // namespace
}  // namespace actorserve::testing
