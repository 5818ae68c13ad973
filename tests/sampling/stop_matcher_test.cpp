#include "protocol/stop/stop_matcher.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace actorserve::testing {
namespace {

using protocol::stop_matcher;

/// The expected emitted text, computed on the whole text directly: cut at the stop occurrence
/// that ends first (for equal ends, the one that starts first).
std::string cut_at_first_stop(const std::string& text, const std::vector<std::string>& stops) {
  size_t best_start = text.size();
  size_t best_end = std::string::npos;
  for (size_t end = 1; end <= text.size() && best_end == std::string::npos; ++end) {
    for (const std::string& stop : stops) {
      if (stop.empty() || stop.size() > end) continue;
      if (text.compare(end - stop.size(), stop.size(), stop) == 0 &&
          end - stop.size() < best_start) {
        best_start = end - stop.size();
        best_end = end;
      }
    }
  }
  return text.substr(0, best_start);
}

/// True when `s` is a sequence of whole UTF-8 characters.
bool whole_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    size_t len = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3
               : (lead & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

struct streamed {
  std::string text;
  bool stopped = false;
  std::vector<std::string> pieces;  ///< every non-empty emitted piece
};

/// Pushes `chunks` in order, then flushes when no stop matched.
streamed stream(const std::vector<std::string>& stops, const std::vector<std::string>& chunks) {
  stop_matcher m(stops);
  streamed out;
  for (const std::string& chunk : chunks) {
    auto o = m.push(chunk);
    if (!o.text_to_emit.empty()) out.pieces.push_back(o.text_to_emit);
    out.text += o.text_to_emit;
    if (o.stopped) out.stopped = true;
  }
  std::string rest = m.flush();
  if (!rest.empty()) out.pieces.push_back(rest);
  out.text += rest;
  return out;
}

struct stop_case {
  const char* name;
  std::vector<std::string> stops;
  std::vector<std::string> chunks;
  std::string expected;
  bool stopped;
};

TEST(StopMatcher, TableOfSplits) {
  const std::vector<stop_case> cases = {
      {"no stops", {}, {"Hello", " world"}, "Hello world", false},
      {"stop inside one chunk", {"STOP"}, {"abcSTOPdef"}, "abc", true},
      {"stop split across chunks", {"STOP"}, {"abcS", "T", "OPdef"}, "abc", true},
      {"stop at the very start", {"##"}, {"#", "#tail"}, "", true},
      {"partial that does not complete", {"STOP"}, {"abST", "Xyz"}, "abSTXyz", false},
      {"partial left at the end is flushed", {"STOP"}, {"abc", "STO"}, "abcSTO", false},
      {"earliest of two stops wins", {"world", "lo"}, {"Hel", "lo world"}, "Hel", true},
      {"the stop that completes first wins", {"abcd", "bc"}, {"xab", "cd"}, "xa", true},
      {"equal ends: the longer stop wins", {"bc", "abc"}, {"xa", "bcd"}, "x", true},
      {"a longer stop still pending does not block", {"abcX", "cd"}, {"ab", "c", "d"}, "ab", true},
      {"stop inside a longer partial", {"aab"}, {"a", "a", "a", "b"}, "a", true},
      {"empty stop strings are ignored", {"", "END"}, {"one", "", "two END"}, "onetwo ", true},
      {"empty pushes", {"x"}, {"", "", "ab", "", "cx", ""}, "abc", true},
      {"text after the stop is dropped", {"\n"}, {"line1\nline2"}, "line1", true},
  };
  for (const stop_case& c : cases) {
    const streamed s = stream(c.stops, c.chunks);
    EXPECT_EQ(s.text, c.expected) << c.name;
    EXPECT_EQ(s.stopped, c.stopped) << c.name;
  }
}

TEST(StopMatcher, HoldsBackOnlyWhatCouldStartAStop) {
  stop_matcher m({"</s>", "STOP"});
  auto o = m.push("Hello <");
  EXPECT_EQ(o.text_to_emit, "Hello ");
  EXPECT_EQ(m.held_back(), 1u);
  o = m.push("/");
  EXPECT_EQ(o.text_to_emit, "");
  o = m.push("x> ST");
  EXPECT_EQ(o.text_to_emit, "</x> ");
  EXPECT_EQ(m.held_back(), 2u);
  o = m.push("OP more");
  EXPECT_EQ(o.text_to_emit, "");
  EXPECT_TRUE(o.stopped);
  EXPECT_TRUE(m.push("later").stopped);
  EXPECT_EQ(m.push("later").text_to_emit, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, MultiByteStopsAreCaughtAcrossByteSplits) {
  const std::string text = "naïve café — fin. 終わり 🙂 tail";
  const std::vector<std::string> stops = {"終わり"};
  const std::string expected = "naïve café — fin. ";
  for (size_t split = 0; split <= text.size(); ++split) {
    const streamed s = stream(stops, {text.substr(0, split), text.substr(split)});
    ASSERT_EQ(s.text, expected) << "split at byte " << split;
    ASSERT_TRUE(s.stopped);
    for (const std::string& piece : s.pieces) ASSERT_TRUE(whole_utf8(piece)) << split;
  }
}

TEST(StopMatcher, NeverEmitsPartOfACharacter) {
  const std::string text = "日本語テキスト🙂é";
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const streamed s = stream({"xyz"}, bytes);
  EXPECT_EQ(s.text, text);
  for (const std::string& piece : s.pieces) EXPECT_TRUE(whole_utf8(piece)) << piece;
  EXPECT_EQ(s.pieces.size(), 9u);  // one piece per character
}

TEST(StopMatcher, RandomSplitsMatchTheWholeText) {
  std::mt19937 gen(2024);
  const std::vector<std::string> alphabet = {"a", "b", "c", " ", "é", "終", "🙂", "\n"};
  const std::vector<std::vector<std::string>> stop_sets = {
      {"abc"}, {"ab", "bca"}, {"aaa", "aab"}, {"é終"}, {"🙂\n", "c c"}, {"cab", "b", "zzz"},
      {"\n\n"}, {"abcab", "ca"}, {"a a", " a", "aa"}, {}};
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int len = std::uniform_int_distribution<int>(0, 30)(gen);
    for (int i = 0; i < len; ++i)
      text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(gen)];
    const auto& stops = stop_sets[static_cast<size_t>(trial) % stop_sets.size()];
    std::vector<std::string> chunks;
    for (size_t pos = 0; pos < text.size();) {  // byte-level splits, empty chunks included
      const size_t n = std::uniform_int_distribution<size_t>(0, 5)(gen);
      chunks.push_back(text.substr(pos, n));
      pos += n;
    }
    const std::string expected = cut_at_first_stop(text, stops);
    const streamed s = stream(stops, chunks);
    ASSERT_EQ(s.text, expected) << "text '" << text << "' trial " << trial;
    ASSERT_EQ(s.stopped, expected.size() < text.size()) << trial;
    for (const std::string& piece : s.pieces) ASSERT_TRUE(whole_utf8(piece)) << trial;
  }
}

TEST(StopMatcher, EverySplitOfATextAgrees) {
  const std::string text = "the cat sat on the mat; the end";
  const std::vector<std::string> stops = {"the e", "mat;", "at o"};
  const std::string expected = cut_at_first_stop(text, stops);
  ASSERT_EQ(expected, "the cat s");
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); ++j) {
      const streamed s =
          stream(stops, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
      ASSERT_EQ(s.text, expected) << i << "," << j;
    }
  }
}

}  // namespace
}  // namespace actorserve::testing
