// Tokenizer encode throughput, single thread: MB/s and tokens/s of the byte-level and the
// sentencepiece fixture tokenizers on a few MB of deterministic English-like text (or on the
// file given as argv[1]), as one call and as ~4 KiB prompts; median of several runs.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "protocol/tokenizer/tokenizer.hpp"

namespace {

using actorserve::protocol::tokenizer;

/// ~`bytes` of English-like prose: sentences of common words, punctuation, numbers, paragraphs.
std::string generate_text(size_t bytes) {
  static const char* words[] = {
      "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
      "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
      "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would", "who",
      "so", "no", "model", "server", "request", "token", "inference", "memory", "schedule", "throughput", "latency",
      "question", "answer", "government", "history", "language", "between", "different", "important", "because",
      "people", "through", "however", "information", "development", "everything", "Tuesday", "London", "Python"};
  constexpr size_t num_words = sizeof(words) / sizeof(words[0]);
  uint64_t state = 0x9E3779B97F4A7C15ULL;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  std::string text;
  text.reserve(bytes + 256);
  while (text.size() < bytes) {
    size_t sentence_len = 6 + next() % 18;
    for (size_t i = 0; i < sentence_len; ++i) {
      std::string w = words[next() % num_words];
      if (i == 0) w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
      text += w;
      uint64_t r = next() % 100;
      if (r < 4) text += ",";
      if (r == 5) text += " " + std::to_string(next() % 10000);
      if (r == 6) text += "'s";
      text += i + 1 < sentence_len ? " " : "";
    }
    text += next() % 6 == 0 ? ".\n\n" : ". ";
  }
  return text;
}

/// Splits into chunks of about `size` bytes at spaces (prompt-sized requests).
std::vector<std::string> chunks(const std::string& text, size_t size) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = std::min(text.size(), pos + size);
    while (end < text.size() && text[end] != ' ') ++end;
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

struct measurement {
  double seconds = 0;
  size_t tokens = 0;
};

template <class F>
measurement median_of(int runs, F&& f) {
  std::vector<measurement> m;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    size_t tokens = f();
    std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    m.push_back({dt.count(), tokens});
  }
  std::sort(m.begin(), m.end(), [](auto& a, auto& b) { return a.seconds < b.seconds; });
  return m[m.size() / 2];
}

void report(const char* name, const char* mode, size_t bytes, measurement m) {
  std::printf("%-14s %-16s %8.1f MB/s %12.0f tokens/s  (%zu tokens, %.3f s median)\n", name, mode,
              static_cast<double>(bytes) / 1e6 / m.seconds, static_cast<double>(m.tokens) / m.seconds, m.tokens,
              m.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  std::string text;
  if (argc > 1) {
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", argv[1]);
      return 1;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  } else {
    text = generate_text(4 << 20);
  }
  // Fixtures: $ACTORSERVE_TEST_DATA, else tests/data beside this source file.
  std::string data_dir = __FILE__;
  data_dir = data_dir.substr(0, data_dir.rfind('/')) + "/../tests/data";
  if (const char* env = std::getenv("ACTORSERVE_TEST_DATA"); env && *env) data_dir = env;
  std::printf("text: %zu bytes; single thread; median of 5 runs\n", text.size());
  auto docs = chunks(text, 4096);
  for (const char* name : {"bytelevel", "sentencepiece"}) {
    auto tok = tokenizer::from_files(data_dir + "/tokenizers/" + name + "/tokenizer.json", "");
    if (!tok) {
      std::fprintf(stderr, "%s\n", tok.err().message.c_str());
      return 1;
    }
    report(name, "whole text", text.size(), median_of(5, [&] { return tok->encode(text, false).size(); }));
    report(name, "4 KiB prompts", text.size(), median_of(5, [&] {
             size_t n = 0;
             for (const auto& d : docs) n += tok->encode(d, true).size();
             return n;
           }));
  }
  return 0;
}
