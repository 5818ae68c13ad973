// Grammar mask time per decoding step and sequence: the time `matcher::fill_next_token_bitmask`
// takes (the tokens a constrained sequence may sample next, as a bitmask over the vocabulary),
// single thread, at a 128k vocabulary, for the JSON grammar (response_format json_object) and a
// json_schema. Also prints each grammar's compile time and table sizes.
//
// The vocabulary is synthesised (no 128k tokenizer ships with the fixtures): 128,256 ids shaped
// like a byte-level BPE vocabulary (Llama 3's size): the 256 bytes, English-like words with and
// without a leading space, digit groups of 1-3, punctuation runs (with the JSON-ish ones such as
// `",` `":` `"}` `{"`), whitespace runs, CJK / Cyrillic / accented words, partial UTF-8 sequences,
// long runs of '=' '-' ' ', and 256 special tokens (never allowed inside a grammar).
// `--tokenizer FILE` uses a real tokenizer.json instead.
//
// Each grammar is walked by random sequences: at each step the mask is computed (timed), a token
// is drawn from it (uniformly, or among structural tokens with probability 1/4, so that objects
// open and close), and the matcher advances (timed separately). A walk ends when the grammar is
// complete and nothing may follow, or after --steps tokens. Times are wall clock and, beside
// them, the thread's CPU time (CLOCK_THREAD_CPUTIME_ID: what the step cost without the time the
// thread was descheduled on a shared machine).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "grammar/constraint.hpp"
#include "grammar/matcher.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

namespace {

using namespace actorserve;
using clock_type = std::chrono::steady_clock;

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) s.push_back(static_cast<char>(cp));
  else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

/// A byte-level-BPE-shaped vocabulary of `size` ids (see the file comment); the last 256 are
/// special tokens, the very last of them EOS.
std::shared_ptr<const grammar::vocabulary> synthetic_vocab(int32_t size) {
  std::mt19937 rng(12345);
  std::set<std::string> seen;
  std::vector<std::string> toks;
  auto add = [&](std::string s) {
    if (!s.empty() && static_cast<int32_t>(toks.size()) < size - 256 && seen.insert(s).second) toks.push_back(std::move(s));
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  const char* punct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  const std::string p(punct);
  for (char a : p)
    for (char b : p) {
      add(std::string{a, b});
      add(std::string(" ") + a + b);
    }
  for (char a : p) {
    add(std::string(" ") + a);
    add(std::string(1, a) + "\n");
    add(std::string(1, a) + "\n\n");
  }
  for (const char* s : {"\",", "\":", "\"}", "\"]", "{\"", "[\"", "\",\"", "\":\"", "\"},", "\"],", "\"}]", "\"},{\"",
                        "\": \"", "\", \"", "\": {", "\": [", "}}", "]}", "}]", "},\n", "\":[", "\":{", "\"]}", "\"))",
                        "\");", "\")", "\"/>", "\">", "='", "=\"", "\"\"", "\"\"\"", "\\\"", "\\n", "\\\\", "\\u"})
    add(s);
  for (int i = 0; i < 6000; ++i) {
    std::string s;
    const int len = 3 + static_cast<int>(rng() % 2);
    for (int k = 0; k < len; ++k) s.push_back(p[rng() % p.size()]);
    add(rng() % 3 == 0 ? " " + s : s);
  }
  for (int n = 0; n < 1000; ++n) {
    add(std::to_string(n));
    if (n < 100) add(n < 10 ? "0" + std::to_string(n) : std::to_string(n));
  }
  for (int n = 1; n <= 64; ++n) {
    add(std::string(static_cast<size_t>(n), ' '));
    add(std::string(static_cast<size_t>(n), '='));
    add(std::string(static_cast<size_t>(n), '-'));
    add(std::string(static_cast<size_t>(n), '\t'));
    add("\n" + std::string(static_cast<size_t>(n), ' '));
  }
  for (const char* s : {"\n\n", "\n\n\n", " \n", "\r\n", "\t\n", ",\n", ";\n"}) add(s);
  // Partial UTF-8 sequences (the first bytes of 3-byte characters), as byte-level BPE has them.
  for (uint32_t cp = 0x4E00; cp < 0x9FFF; cp += 64) add(utf8(cp).substr(0, 2));
  // CJK characters and pairs, Cyrillic and accented words.
  for (uint32_t cp = 0x4E00; cp < 0x4E00 + 9000; ++cp) add(utf8(cp));
  for (int i = 0; i < 6000; ++i) add(utf8(0x4E00 + rng() % 6000) + utf8(0x4E00 + rng() % 6000));
  const std::vector<std::string> cyr = {"а", "б", "в", "г", "д", "е", "ж", "з", "и", "к", "л", "м", "н", "о", "п", "р",
                                        "с", "т", "у", "ф", "х", "ц", "ч", "ш", "ы", "я"};
  for (int i = 0; i < 5000; ++i) {
    std::string s = rng() % 2 ? " " : "";
    const int len = 2 + static_cast<int>(rng() % 6);
    for (int k = 0; k < len; ++k) s += cyr[rng() % cyr.size()];
    add(s);
  }
  const std::vector<std::string> acc = {"é", "è", "à", "ü", "ö", "ñ", "ç", "ß", "ø", "å"};
  // English-like words: syllables, with and without a leading space and capitalised.
  const std::vector<std::string> onsets = {"", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s",
                                           "t", "v", "w", "st", "tr", "pr", "ch", "sh", "th", "bl", "gr", "str", "qu"};
  const std::vector<std::string> vowels = {"a", "e", "i", "o", "u", "ea", "ou", "io", "ai", "ee", "y"};
  const std::vector<std::string> codas = {"", "", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "ck", "tion", "ment"};
  while (static_cast<int32_t>(toks.size()) < size - 256) {
    std::string w;
    const int syl = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < syl; ++k)
      w += onsets[rng() % onsets.size()] + vowels[rng() % vowels.size()] + codas[rng() % codas.size()];
    if (rng() % 20 == 0) w += acc[rng() % acc.size()];
    const uint32_t form = rng() % 6;
    if (form == 0) w[0] = static_cast<char>(w[0] - 32 * (w[0] >= 'a' && w[0] <= 'z'));
    if (form <= 3) w = " " + w;
    if (form == 5) w = "_" + w;
    add(w);
  }
  std::vector<uint8_t> excluded(toks.size(), 0);
  for (int i = 0; i < 256; ++i) {
    toks.push_back("<|special_" + std::to_string(i) + "|>");
    excluded.push_back(1);
  }
  const int32_t eos = static_cast<int32_t>(toks.size()) - 1;
  return std::make_shared<const grammar::vocabulary>(static_cast<int32_t>(toks.size()), std::move(toks),
                                                     std::move(excluded), std::vector<int32_t>{eos});
}

std::shared_ptr<const grammar::vocabulary> tokenizer_vocab(const std::string& path) {
  auto tok = protocol::tokenizer::from_files(path, "");
  if (!tok) {
    std::fprintf(stderr, "bench_grammar_mask: %s\n", tok.err().message.c_str());
    std::exit(1);
  }
  const int32_t n = tok->vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<uint8_t> excluded(static_cast<size_t>(n), 0);
  for (int32_t id = 0; id < n; ++id) {
    if (auto b = tok->token_bytes(id)) bytes[static_cast<size_t>(id)] = *b;
    excluded[static_cast<size_t>(id)] = tok->is_special(id);
  }
  return std::make_shared<const grammar::vocabulary>(n, std::move(bytes), std::move(excluded), tok->eos_token_ids());
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

double thread_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

struct walk_stats {
  std::vector<double> mask_us, mask_cpu_us, accept_us;
  int64_t allowed_total = 0;
  int completed = 0, walks = 0;
};

void walk(const std::shared_ptr<const grammar::compiled_grammar>& g, int num_walks, int steps, std::mt19937& rng,
          walk_stats& st) {
  const grammar::vocabulary& v = g->vocab();
  std::vector<uint32_t> words(v.mask_words());
  std::vector<uint8_t> structural_token(static_cast<size_t>(v.size()), 0);
  for (int32_t id = 0; id < v.size(); ++id)
    structural_token[static_cast<size_t>(id)] = v.bytes(id).find_first_of("{}[],:\"") != std::string_view::npos;
  std::vector<int32_t> allowed, structural;
  for (int w = 0; w < num_walks; ++w) {
    grammar::matcher m(g);
    ++st.walks;
    for (int s = 0; s < steps; ++s) {
      const double c0 = thread_cpu_us();
      const auto t0 = clock_type::now();
      const int64_t n = m.fill_next_token_bitmask(words);
      const auto t1 = clock_type::now();
      st.mask_cpu_us.push_back(thread_cpu_us() - c0);
      st.mask_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      st.allowed_total += n;
      allowed.clear();
      structural.clear();
      for (size_t i = 0; i < words.size(); ++i) {
        for (uint32_t bits = words[i]; bits != 0; bits &= bits - 1) {
          const int32_t id = static_cast<int32_t>(i * 32 + static_cast<size_t>(__builtin_ctz(bits)));
          allowed.push_back(id);
          if (structural_token[static_cast<size_t>(id)]) structural.push_back(id);
        }
      }
      if (allowed.empty()) break;
      const auto& from = !structural.empty() && rng() % 4 == 0 ? structural : allowed;
      const int32_t id = from[rng() % from.size()];
      if (std::find(v.terminators().begin(), v.terminators().end(), id) != v.terminators().end()) {
        ++st.completed;
        break;
      }
      const auto t2 = clock_type::now();
      if (!m.accept_token(id)) {
        std::fprintf(stderr, "bench_grammar_mask: the matcher rejected a token of its own mask (id %d)\n", id);
        std::exit(1);
      }
      st.accept_us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t2).count());
      if (m.is_complete() && !m.can_continue()) {
        ++st.completed;
        break;
      }
    }
  }
}

const char* schema_text = R"json({
  "type": "object",
  "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 100000},
    "name": {"type": "string", "maxLength": 40},
    "email": {"type": "string", "format": "email"},
    "created": {"type": "string", "format": "date-time"},
    "score": {"type": "number", "minimum": 0, "maximum": 100},
    "status": {"enum": ["active", "suspended", "deleted"]},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
      "required": ["street", "city"], "additionalProperties": false},
    "notes": {"anyOf": [{"type": "string"}, {"type": "null"}]}
  },
  "required": ["id", "name", "status", "tags"],
  "additionalProperties": false
})json";

}  // namespace

int main(int argc, char** argv) {
  int32_t vocab_size = 128256;
  int walks = 40, steps = 300;
  std::string tokenizer_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--vocab-size") vocab_size = std::atoi(next().c_str());
    else if (a == "--walks") walks = std::atoi(next().c_str());
    else if (a == "--steps") steps = std::atoi(next().c_str());
    else if (a == "--tokenizer") tokenizer_path = next();
    else {
      std::printf("usage: bench_grammar_mask [--vocab-size N] [--walks N] [--steps N] [--tokenizer tokenizer.json]\n");
      return a == "--help" ? 0 : 2;
    }
  }
  const auto tv0 = clock_type::now();
  auto vocab = tokenizer_path.empty() ? synthetic_vocab(vocab_size) : tokenizer_vocab(tokenizer_path);
  const double vocab_ms = std::chrono::duration<double, std::milli>(clock_type::now() - tv0).count();
  std::printf("vocabulary: %d ids (%s), longest token %u bytes, trie %u nodes, built in %.0f ms\n", vocab->size(),
              tokenizer_path.empty() ? "synthetic byte-level BPE shape" : tokenizer_path.c_str(),
              vocab->max_token_bytes(), vocab->trie().num_nodes(), vocab_ms);

  grammar::grammar_compiler compiler(vocab);
  struct job {
    const char* name;
    grammar::constraint_spec spec;
  };
  std::vector<job> jobs;
  jobs.push_back({"json_object", {}});
  grammar::constraint_spec schema;
  schema.type = grammar::constraint_spec::kind::json_schema;
  schema.text = schema_text;
  schema.field = "json_schema";
  jobs.push_back({"json_schema (user record)", schema});
  grammar::constraint_spec no_lengths = schema;
  no_lengths.text = schema_text;
  no_lengths.text.replace(no_lengths.text.find(", \"maxLength\": 40"), 17, "");
  jobs.push_back({"json_schema, no maxLength", no_lengths});

  std::printf("\nmask time per step and sequence (us): wall clock, and the thread's CPU time\n");
  std::printf("%-32s %10s %7s %9s %6s %8s %8s %8s %8s %8s %8s %9s\n", "grammar", "compile ms", "tables", "uncertain",
              "steps", "p50", "p99", "max", "cpu p50", "cpu p99", "cpu max", "accept p50");
  std::mt19937 rng(2024);
  for (const auto& j : jobs) {
    auto g = compiler.compile(j.spec);
    if (!g) {
      std::fprintf(stderr, "bench_grammar_mask: %s\n", g.err().message.c_str());
      return 1;
    }
    const auto& cs = (*g)->stats();
    // cold: the grammar's first generations (its merged tables are built as states are met);
    // warm: the same number of generations again, as a grammar in steady use.
    for (const char* pass : {"cold", "warm"}) {
      walk_stats st;
      walk(*g, walks, steps, rng, st);
      auto max_of = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
      const std::string name = std::string(j.name) + ", " + pass;
      std::printf("%-32s %10.0f %7u %9llu %6zu %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %9.1f\n", name.c_str(),
                  cs.milliseconds, cs.num_tables, static_cast<unsigned long long>(cs.num_uncertain), st.mask_us.size(),
                  percentile(st.mask_us, 0.5), percentile(st.mask_us, 0.99), max_of(st.mask_us),
                  percentile(st.mask_cpu_us, 0.5), percentile(st.mask_cpu_us, 0.99), max_of(st.mask_cpu_us),
                  percentile(st.accept_us, 0.5));
      std::printf("%-32s walks %d, completed %d, mean allowed tokens per step %.0f\n", "", st.walks, st.completed,
                  static_cast<double>(st.allowed_total) / std::max<size_t>(1, st.mask_us.size()));
    }
    std::printf("%-32s %u positions, %u stack sets met while compiling\n", "", cs.num_positions, cs.num_states);
  }
  return 0;
}
