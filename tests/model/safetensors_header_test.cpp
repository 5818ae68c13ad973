// safetensors header validation: every inconsistency is an error naming file and tensor, and
// arbitrary bytes never crash the parser.
#include <gtest/gtest.h>

#include <random>

#include "config/safetensors_header.hpp"
#include "model/safetensors_test_util.hpp"
#include "test_data.hpp"

namespace actorserve::testing {
namespace {

result<safetensors_header> parse_file(const std::string& bytes) {
  return parse_safetensors_header(bytes, bytes.size(), "x.safetensors");
}

std::string file_with(const std::string& header, size_t data_bytes) {
  return join_safetensors(header, std::string(data_bytes, '\x01'));
}

void expect_error(const std::string& bytes, const std::vector<std::string>& needles) {
  auto r = parse_file(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, error_code::malformed_file);
  EXPECT_NE(r.err().message.find("x.safetensors"), std::string::npos) << r.err().message;
  for (const auto& n : needles) EXPECT_NE(r.err().message.find(n), std::string::npos) << r.err().message;
}

TEST(safetensors_header, parses_tensors_and_metadata) {
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "b": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [16, 28]},)"
      R"( "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "e": {"dtype": "I8", "shape": [0],)"
      R"( "data_offsets": [28, 28]}}   )";
  auto r = parse_file(file_with(header, 28));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->header_size, header.size());
  EXPECT_EQ(r->data_offset, 8 + header.size());
  ASSERT_EQ(r->tensors.size(), 3u);
  EXPECT_EQ(r->tensors[0].name, "b");
  EXPECT_EQ(r->tensors[0].dtype, st_dtype::bf16);
  EXPECT_EQ(r->tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r->tensors[0].begin, 16u);
  EXPECT_EQ(r->tensors[0].end, 28u);
  EXPECT_EQ(r->tensors[1].num_elements(), 4u);
  ASSERT_EQ(r->metadata.size(), 1u);
  EXPECT_EQ(r->metadata[0], (std::pair<std::string, std::string>{"format", "pt"}));
}

TEST(safetensors_header, reads_the_fixture_file) {
  const std::string bytes = read_file(model_dir("llama-tiny") + "/model.safetensors");
  auto r = parse_safetensors_header(bytes, bytes.size(), "llama-tiny");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->tensors.size(), 1u + 2 * 9 + 2);   // embed, 2 layers x 9, norm, lm_head
}

TEST(safetensors_header, rejects_inconsistent_headers) {
  const std::string ok = R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  EXPECT_TRUE(parse_file(file_with(ok, 8)).ok());
  std::string too_long = file_with(ok, 8);
  too_long[0] = static_cast<char>(0xff);
  expect_error(too_long, {"header length", "exceeds"});
  expect_error(std::string("\x05\x00\x00", 3), {"shorter"});
  expect_error(file_with("{not json", 0), {"not a JSON object"});
  expect_error(file_with("[1, 2]", 0), {"not a JSON object"});
  expect_error(file_with(R"({"t": {"dtype": "F7", "shape": [2], "data_offsets": [0, 8]}})", 8), {"'t'", "F7"});
  expect_error(file_with(R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8), {"'t'", "need 12"});
  expect_error(file_with(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 8),
               {"'t'", "outside the data section"});
  expect_error(file_with(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8), {"'t'", "reversed"});
  expect_error(file_with(R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8), {"'t'", "shape"});
  expect_error(file_with(R"({"t": {"dtype": "F32", "shape": [2]}})", 8), {"'t'", "data_offsets"});
  expect_error(file_with(R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296, 16],)"
                         R"( "data_offsets": [0, 8]}})", 8),
               {"'t'", "2^64"});
  expect_error(file_with(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                         R"( "u": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12),
               {"overlaps", "'u'", "'t'"});
  expect_error(file_with(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                         R"( "t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 16),
               {"'t'", "twice"});
  expect_error(file_with(R"({"__metadata__": {"k": 3}})", 0), {"__metadata__"});
  // The caller hands fewer bytes than the header claims (a truncated read).
  const std::string full = file_with(ok, 8);
  auto r = parse_safetensors_header(std::string_view(full).substr(0, 20), full.size(), "x.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("truncated"), std::string::npos);
}

TEST(safetensors_header, survives_truncation_and_random_bytes) {
  const std::string bytes = read_file(model_dir("llama-tiny") + "/model.safetensors");
  const auto parts = split_safetensors(bytes);
  const std::string small = join_safetensors(parts.header, std::string(64, '\0'));
  // Any prefix is a truncated file: its header or its tensors no longer fit.
  for (size_t n = 0; n < small.size(); ++n) EXPECT_FALSE(parse_file(small.substr(0, n)).ok()) << n;
  EXPECT_FALSE(parse_file(small).ok());
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string mutated = bytes.substr(0, 8 + parts.header.size());
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) mutated[rng() % mutated.size()] = static_cast<char>(rng() & 0xff);
    (void)parse_safetensors_header(mutated, bytes.size(), "fuzz");
    std::string random(rng() % 64, '\0');
    for (char& c : random) c = static_cast<char>(rng() & 0xff);
    (void)parse_safetensors_header(random, random.size() + rng() % 100, "fuzz");
  }
}

TEST(safetensors_index, reads_weight_map) {
  auto r = parse_safetensors_index(
      R"({"metadata": {"total_size": 10}, "weight_map": {"a": "m-1.safetensors", "b": "m-2.safetensors",)"
      R"( "c": "m-1.safetensors"}})",
      "idx.json");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->weight_map.size(), 3u);
  EXPECT_EQ(r->shard_files(), (std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"}));
  auto bad = parse_safetensors_index(R"({"weight_map": {"a": "../etc/passwd"}})", "idx.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("'a'"), std::string::npos);
  EXPECT_FALSE(parse_safetensors_index(R"({"nothing": 1})", "idx.json").ok());
  EXPECT_FALSE(parse_safetensors_index("", "idx.json").ok());
}

}  // namespace
}  // namespace actorserve::testing
