#pragma once
// Helpers of the grammar tests: small vocabularies, a brute-force mask to compare against, and
// random walks through a grammar by tokens.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.hpp"
#include "grammar/matcher.hpp"
#include "grammar/vocabulary.hpp"

namespace actorserve::grammar::testing {

/// A vocabulary of the given byte strings (ids in order) plus one terminator (EOS) at the end.
inline std::shared_ptr<const vocabulary> make_vocab(std::vector<std::string> tokens) {
  const int32_t eos = static_cast<int32_t>(tokens.size());
  tokens.push_back("");  // the EOS id: no bytes
  std::vector<uint8_t> excluded(tokens.size(), 0);
  excluded.back() = 1;
  const int32_t size = static_cast<int32_t>(tokens.size());
  return std::make_shared<const vocabulary>(size, std::move(tokens), std::move(excluded), std::vector<int32_t>{eos});
}

/// Every single byte, plus assorted multi-byte tokens typical of JSON and byte-level BPE.
inline std::vector<std::string> json_like_tokens() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
  for (const char* s : {"{\"", "\":", "\": ", "\",", "\", \"", "\"}", "\"]", "},", "}}", "]}", "[{", "[\"", ", ", ": ",
                        "null", "true", "false", "nu", "ll", "tr", "ue", "12", "345", "0.", "-1", "e+", "1e", "abc",
                        " the", "name", "\"name\"", "age", "\\n", "\\\"", "\\u00", "é", "\xC3", "\xA9", "日本", "\xE6",
                        "  ", "\n", "\",\"", "\":\"", "\"},{\"", "[]", "{}", "\"\"", "a\"", "ab\",", "1,", "2]", "3}"})
    t.emplace_back(s);
  return t;
}

/// The mask computed by trying every token's bytes on a copy of the matcher.
inline std::vector<uint32_t> brute_force_mask(matcher& m) {
  const vocabulary& v = m.compiled().vocab();
  std::vector<uint32_t> words(v.mask_words(), 0);
  for (int32_t id = 0; id < v.size(); ++id) {
    bool ok = false;
    if (v.allowed(id)) ok = m.accepts(v.bytes(id));
    for (int32_t t : v.terminators())
      if (t == id) ok = m.is_complete();
    if (ok) words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  }
  return words;
}

inline std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& words, int32_t size) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < size; ++id)
    if (words[static_cast<size_t>(id) >> 5] >> (id & 31) & 1) ids.push_back(id);
  return ids;
}

/// Walks `steps` random tokens from the mask, checking the mask against the brute force at each
/// step; returns the bytes generated. Stops at a terminator or when nothing is allowed.
inline std::string checked_walk(const std::shared_ptr<const compiled_grammar>& g, std::mt19937& rng, int steps,
                                bool* finished = nullptr) {
  matcher m(g);
  const vocabulary& v = g->vocab();
  std::vector<uint32_t> words(v.mask_words());
  std::string out;
  if (finished) *finished = false;
  for (int s = 0; s < steps; ++s) {
    m.fill_next_token_bitmask(words);
    const auto expect = brute_force_mask(m);
    const auto got_ids = allowed_ids(words, v.size());
    const auto want_ids = allowed_ids(expect, v.size());
    EXPECT_EQ(got_ids, want_ids) << "after " << ::testing::PrintToString(out);
    if (got_ids != want_ids || got_ids.empty()) break;
    const int32_t id = got_ids[std::uniform_int_distribution<size_t>(0, got_ids.size() - 1)(rng)];
    const auto& term = v.terminators();
    if (std::find(term.begin(), term.end(), id) != term.end()) {
      if (finished) *finished = true;
      break;
    }
    EXPECT_TRUE(m.accept_token(id));
    out += v.bytes(id);
  }
  return out;
}

}  // namespace actorserve::grammar::testing
