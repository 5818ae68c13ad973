// Grammars and token streams through the grammar engine (grammar/): the first byte picks what
// the text is (a JSON schema, a regex, a grammar in EBNF, a list of choices), the text runs up to
// the first NUL, and the bytes after it pick tokens from each step's mask over a small
// JSON-like vocabulary (every byte plus common multi-byte tokens). Checks: compiling never
// crashes or hangs (refusals are errors); every mask equals a brute force over the vocabulary;
// every token of a mask is accepted; a state that may go on or end allows some token; a
// completed output is a sentence of the grammar read at once, is one of the choices, and for a
// schema parses and validates (tests/grammar/json_validator.hpp; oneOf read as anyOf, patterns
// unchecked, as documented). A matcher that gave up on a closure too large (overflowed(): the
// generation then ends in an error) ends the input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fuzz_util.hpp"
#include "grammar/constraint.hpp"
#include "grammar/ebnf.hpp"
#include "grammar/json_validator.hpp"
#include "grammar/matcher.hpp"

namespace gr = actorserve::grammar;
using actorserve::fuzz::as_text;

namespace {

constexpr size_t max_text = 4096;
constexpr size_t max_steps = 64;

std::shared_ptr<const gr::vocabulary> vocab() {
  static const auto v = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
    for (const char* s : {"{\"", "\":", "\": ", "\",", "\", \"", "\"}", "\"]", "},", "}}", "]}", "[{", "[\"", ", ",
                          ": ", "null", "true", "false", "12", "345", "0.", "-1", "e+", "abc", " the", "name", "\\n",
                          "\\\"", "\\u00", "\xC3\xA9", "\xE6\x97\xA5", "  ", "\",\"", "\":\"", "\"\"", "a\"", "1,", "2]"})
      t.emplace_back(s);
    const int32_t eos = static_cast<int32_t>(t.size());
    t.emplace_back("");
    std::vector<uint8_t> excluded(t.size(), 0);
    excluded.back() = 1;
    const auto n = static_cast<int32_t>(t.size());
    return std::make_shared<const gr::vocabulary>(n, std::move(t), std::move(excluded), std::vector<int32_t>{eos});
  }();
  return v;
}

bool allowed(const std::vector<uint32_t>& words, int32_t id) { return (words[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 4;
  const auto parts = actorserve::fuzz::split_nul(as_text(data + 1, size - 1), 2);
  const std::string_view text = parts.empty() ? std::string_view() : parts[0];
  const std::string_view picks = parts.size() > 1 ? parts[1] : std::string_view();
  if (text.size() > max_text) return 0;

  gr::constraint_spec spec;
  spec.field = "fuzz";
  spec.text = std::string(text);
  actorserve::result<gr::grammar> g = actorserve::make_error(actorserve::error_code::internal, "");
  switch (mode) {
    case 0: spec.type = gr::constraint_spec::kind::json_schema; g = gr::constraint_grammar(spec); break;
    case 1: spec.type = gr::constraint_spec::kind::regex; g = gr::constraint_grammar(spec); break;
    case 2: g = gr::parse_ebnf(text); break;
    default: {
      spec.type = gr::constraint_spec::kind::choice;
      size_t start = 0;
      for (size_t i = 0; i <= text.size(); ++i)
        if (i == text.size() || text[i] == '\n') {
          spec.choices.emplace_back(text.substr(start, i - start));
          start = i + 1;
        }
      g = gr::constraint_grammar(spec);
    }
  }
  if (!g.ok()) {
    FUZZ_CHECK(!g.err().message.empty(), "an error without a message");
    return 0;
  }
  const auto compiled = gr::compiled_grammar::compile(std::move(*g), vocab());
  const gr::vocabulary& v = compiled->vocab();
  gr::matcher m(compiled);
  std::vector<uint32_t> words(v.mask_words());
  std::string out;
  bool finished = false;
  for (size_t step = 0; step < max_steps && step < picks.size(); ++step) {
    m.fill_next_token_bitmask(words);
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < v.size(); ++id) {
      bool ok = false;
      if (v.allowed(id)) ok = m.accepts(v.bytes(id));
      if (id == v.terminators()[0]) ok = m.is_complete();
      if (m.overflowed()) return 0;  // too ambiguous to follow: the generation ends in an error
      FUZZ_CHECK(ok == allowed(words, id), "token %d: mask says %d, its bytes say %d (after %zu bytes)", id,
                 allowed(words, id), ok, out.size());
      if (ok) ids.push_back(id);
    }
    FUZZ_CHECK(!ids.empty() || (!m.can_continue() && !m.is_complete()), "no token allowed where the output may go on");
    if (ids.empty()) break;
    const int32_t id = ids[static_cast<uint8_t>(picks[step]) % ids.size()];
    if (id == v.terminators()[0]) {
      finished = true;
      break;
    }
    FUZZ_CHECK(m.accept_token(id), "token %d of the mask rejected", id);
    out += v.bytes(id);
    if (m.is_complete() && !m.can_continue()) {
      finished = true;
      break;
    }
  }
  if (!finished) return 0;
  gr::matcher whole(compiled);
  FUZZ_CHECK(whole.accept_bytes(out) && whole.is_complete(), "the output read at once is no sentence");
  if (mode == 3) {
    bool listed = false;
    for (const auto& c : spec.choices) listed = listed || c == out;
    FUZZ_CHECK(listed, "the output is none of the choices");
  }
  if (mode == 0) {
    // Integers beyond what a double holds exactly and exponents beyond its range are valid JSON
    // the validator (simdjson) cannot read.
    size_t run = 0, longest = 0, exponent = 0;
    bool in_exponent = false;
    for (char c : out) {
      const bool digit = c >= '0' && c <= '9';
      longest = std::max(longest, run = digit ? run + 1 : 0);
      if (c == 'e' || c == 'E') in_exponent = true;
      else if (!digit && c != '+' && c != '-') in_exponent = false;
      if (in_exponent && digit) exponent = std::max(exponent, run);
    }
    if (longest < 16 && exponent < 3) {
      gr::testing::json_validator::options o;
      o.one_of_as_any_of = true;
      o.check_patterns = false;
      gr::testing::json_validator validator(text, o);
      std::string why;
      FUZZ_CHECK(validator.valid(out, &why), "the output does not validate: %s\n  output: %s", why.c_str(), out.c_str());
    }
  }
  return 0;
}
