// The fast BPE paths (word cache, cuts at boundaries no merge can cross, linear merging of short
// words) give exactly what Hugging Face's heap algorithm gives on the whole word.
#include <random>

#include "protocol/tokenizer/tokenizer_impl.hpp"
#include "tokenizer_fixture.hpp"

namespace actorserve::testing {
namespace {

class bpe_model_paths : public ::testing::TestWithParam<std::string> {};

TEST_P(bpe_model_paths, fast_paths_equal_the_reference_algorithm) {
  auto tok = load_fixture_tokenizer(GetParam());
  const auto& model = tok.impl().model;
  // Words assembled from fixture texts, model-space spaces and odd bytes, short and very long.
  std::vector<std::string> parts;
  for (const auto& c : load_cases(GetParam())) parts.push_back(c.text);
  for (const char* p : {"\xE2\x96\x81", " ", "\n", "ing", "\xE2\x96\x81the", "\xFF", "\xE6\x97", "\xF0\x9F\x9A\x80"})
    parts.emplace_back(p);
  std::mt19937 rng(5);
  for (int round = 0; round < 400; ++round) {
    std::string word;
    size_t target = round % 4 == 0 ? 2000 : rng() % 80;
    while (word.size() < target) {
      const std::string& p = parts[rng() % parts.size()];
      size_t from = rng() % (p.size() + 1);
      word += p.substr(from, rng() % 12);
    }
    if (word.empty()) continue;
    std::vector<int32_t> fast, reference;
    model.encode_word(word, fast);
    model.encode_word(word, fast);  // second time through the cache
    model.encode_word_reference(word, reference);
    model.encode_word_reference(word, reference);
    ASSERT_EQ(fast, reference) << "round " << round << " word size " << word.size();
  }
}

INSTANTIATE_TEST_SUITE_P(fixtures, bpe_model_paths, ::testing::ValuesIn(fixture_names()));

TEST(bpe_merge, linear_and_heap_merging_agree_on_random_symbol_strings) {
  auto tok = load_fixture_tokenizer("bytelevel");
  const auto& model = tok.impl().model;
  std::mt19937 rng(11);
  for (int round = 0; round < 2000; ++round) {
    std::vector<int32_t> symbols(rng() % 48 + 1);
    // Few distinct byte symbols, so that many merges apply and ranks tie.
    for (auto& s : symbols) s = model.byte_id[static_cast<uint8_t>("aab e\xC4\xA0th"[rng() % 9])];
    auto heap = symbols;
    protocol::detail::bpe_merge(symbols, model.merges);
    protocol::detail::bpe_merge_heap(heap, model.merges);
    ASSERT_EQ(symbols, heap) << "round " << round;
  }
}

}  // namespace
}  // namespace actorserve::testing
