// UTF-8 helpers: lossy decoding replaces each maximal ill-formed subsequence with one U+FFFD
// (expected values from Python's bytes.decode("utf-8", "replace"), which follows the same
// Unicode practice as Rust's from_utf8_lossy), and truncated-tail detection.
#include <gtest/gtest.h>

#include "protocol/tokenizer/utf8.hpp"

namespace actorserve::testing {
namespace {

using namespace protocol::detail;

std::string lossy(std::string_view s) {
  std::string out;
  append_utf8_lossy(out, s);
  return out;
}

TEST(utf8, lossy_decoding_matches_the_maximal_subpart_rule) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(lossy("ab\xFF" "c"), "ab" + r + "c");
  EXPECT_EQ(lossy("\xE6\x97"), r);
  EXPECT_EQ(lossy("\xE6\x97" "a"), r + "a");
  EXPECT_EQ(lossy("\xF0\x9F\x99"), r);
  EXPECT_EQ(lossy("\xF0\x9F\x99\x82"), "\xF0\x9F\x99\x82");
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);  // surrogate
  EXPECT_EQ(lossy("\xC0\xAF"), r + r);          // overlong
  EXPECT_EQ(lossy("\xE0\x80\x80"), r + r + r);
  EXPECT_EQ(lossy("\xF4\x90\x80\x80"), r + r + r + r);  // above U+10FFFF
  EXPECT_EQ(lossy("\x80\x80"), r + r);
  EXPECT_EQ(lossy("a\xF0\x9F" "b\xE6"), "a" + r + "b" + r);
}

TEST(utf8, incomplete_tail_counts_only_completable_bytes) {
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE6"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE6\x97"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE6\x97\xA5"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x99"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\xFF"), 0u);       // never valid
  EXPECT_EQ(utf8_incomplete_tail("\xED\xA0"), 0u);   // surrogate: already invalid
  EXPECT_EQ(utf8_incomplete_tail("\x80"), 0u);       // stray continuation byte
}

TEST(utf8, validity_and_character_length) {
  EXPECT_TRUE(is_valid_utf8("h\xC3\xA9llo \xF0\x9F\x99\x82"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));
  EXPECT_EQ(utf8_char_len("\xE6\x97\xA5", 0), 3u);
  EXPECT_EQ(utf8_char_len("\xE6\x97", 0), 0u);
}

}  // namespace
}  // namespace actorserve::testing
