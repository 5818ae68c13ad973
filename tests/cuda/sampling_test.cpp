// The device sampler against the CPU sampler (gpu/sampling/): greedy, temperature, top-k, top-p,
// min-p, penalties, suppressed EOS, per-request seeds and top-k logprobs, batch 257; logits
// with thousands of exact ties, whose crowded buckets take the sampler's fallback path; grammar
// masks (a bitmask per row) that force the token into the allowed ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>

#include "cuda_test_util.hpp"
#include "gpu/sampling/cpu_sampler.hpp"
#include "gpu/cuda/sampling/sampler.hpp"

namespace actorserve::testing {
namespace {

struct sampler_run {
  std::vector<cuda::sample_out> out;
};

/// Samples every row of `logits` with `seqs` on the device (the engine's staging, done by hand).
sampler_run run_device(const std::vector<float>& logits, int vocab, const std::vector<gpu::step_sequence>& seqs,
                       const std::vector<int32_t>& eos) {
  std::vector<cuda::sample_seq> ss;
  std::vector<cuda::penalty_token> pens;
  std::vector<int32_t> masks;
  std::vector<uint32_t> grammar;  // rows of grammar_mask_words(vocab), in order of grammar_row
  const size_t words = size_t(cuda::grammar_mask_words(vocab));
  for (const auto& s : seqs) {
    cuda::sample_seq x;
    x.temperature = s.params.temperature;
    x.top_p = s.params.top_p;
    x.top_k = s.params.top_k;
    x.min_p = s.params.min_p;
    x.repetition_penalty = s.params.repetition_penalty;
    x.presence_penalty = s.params.presence_penalty;
    x.frequency_penalty = s.params.frequency_penalty;
    x.num_logprobs = std::max(0, s.params.num_logprobs);
    x.seed = s.seed;
    x.counter = uint64_t(s.num_generated);
    x.penalty_begin = int32_t(pens.size());
    if (s.params.uses_penalties() && s.history) {
      std::map<int32_t, std::pair<int, int>> m;
      for (size_t i = 0; i < s.history->size(); ++i) {
        auto& e = m[(*s.history)[i]];
        e.first = 1;
        if (int(i) >= s.prompt_len) ++e.second;
      }
      for (auto& [id, e] : m) pens.push_back({id, e.first, e.second});
    }
    x.penalty_count = int32_t(pens.size()) - x.penalty_begin;
    x.mask_begin = int32_t(masks.size());
    if (s.suppress_eos) {
      masks.insert(masks.end(), eos.begin(), eos.end());
      masks.insert(masks.end(), s.params.stop_token_ids.begin(), s.params.stop_token_ids.end());
    }
    x.mask_count = int32_t(masks.size()) - x.mask_begin;
    if (s.allowed_tokens) {  // filled by the test before it samples
      const std::vector<uint32_t>* w = s.allowed_tokens->wait();
      x.grammar_row = int32_t(grammar.size() / words);
      grammar.resize(grammar.size() + words, w ? 0u : ~0u);
      if (w) std::copy(w->begin(), w->begin() + std::min(w->size(), words), grammar.end() - words);
    }
    ss.push_back(x);
  }
  if (pens.empty()) pens.push_back({});
  if (masks.empty()) masks.push_back(0);
  if (grammar.empty()) grammar.push_back(0);
  dev_vec<float> d_logits(logits);
  dev_vec<cuda::sample_seq> d_ss(ss);
  dev_vec<cuda::penalty_token> d_pens(pens);
  dev_vec<int32_t> d_masks(masks);
  dev_vec<uint32_t> d_grammar(grammar);
  dev_vec<cuda::sample_out> d_out(seqs.size());
  d_out.poison();
  EXPECT_EQ(cuda::sample_tokens(d_logits.get(), int(seqs.size()), vocab, d_ss.get(), d_pens.get(), d_masks.get(),
                                d_grammar.get(), d_out.get(), nullptr), 0);
  return {d_out.download()};
}

/// Row i of the parameter grid: greedy, temperature, top-k, top-p, min-p, penalties over a
/// history of ids below 200, suppressed EOS (ids 1, 2 and stop id 5), logprobs, by i % 8 and i % 3.
gpu::step_sequence grid_sequence(int i, int vocab, std::mt19937& rng, float frequency_penalty) {
  gpu::step_sequence s;
  s.seq_id = uint64_t(i);
  s.seed = rng();
  s.num_generated = int32_t(rng() % 50);
  auto& p = s.params;
  const int kind = i % 8;
  p.temperature = kind == 0 ? 0.0f : 0.5f + float(i % 5) * 0.3f;
  if (kind == 2 || kind == 6) p.top_k = 1 + int(rng() % 100);
  if (kind == 3 || kind == 6) p.top_p = 0.5f + 0.1f * float(i % 5);
  if (kind == 4) p.min_p = 0.05f;
  if (kind == 5 || kind == 7) {
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = frequency_penalty;
    auto h = std::make_shared<std::vector<int32_t>>();
    for (int k = 0; k < 40; ++k) h->push_back(int32_t(rng() % std::min(vocab, 200)));
    s.history = h;
    s.prompt_len = 25;
  }
  if (kind == 7) {
    s.suppress_eos = true;
    p.stop_token_ids = {5};
  }
  p.num_logprobs = i % 3 == 0 ? 5 : (i % 3 == 1 ? 0 : -1);
  return s;
}

/// Each device row against the CPU sampler on the same logits: greedy tokens and every top
/// logprob equal, sampled tokens equal but for at most one draw within rounding of a boundary.
void expect_cpu_agreement(const std::vector<float>& logits, int vocab, const std::vector<gpu::step_sequence>& seqs,
                          const std::vector<int32_t>& eos, const sampler_run& dev, const char* what) {
  const int batch = int(seqs.size());
  int matched = 0, greedy = 0;
  double max_lp_err = 0;
  for (int i = 0; i < batch; ++i) {
    std::vector<float> row(logits.begin() + size_t(i) * vocab, logits.begin() + size_t(i + 1) * vocab);
    auto ref = gpu::sample_token(row, seqs[i], eos);
    const auto& got = dev.out[i];
    if (seqs[i].params.greedy()) {
      ++greedy;
      EXPECT_EQ(got.token, ref.token_id) << what << ": greedy row " << i;
    }
    matched += got.token == ref.token_id;
    if (got.token == ref.token_id) max_lp_err = std::max(max_lp_err, double(std::abs(got.logprob - ref.logprob)));
    for (size_t k = 0; k < ref.top_logprobs.size(); ++k) {
      EXPECT_EQ(got.top_ids[k], ref.top_logprobs[k].token_id) << what << ": row " << i << " rank " << k;
      if (std::isfinite(ref.top_logprobs[k].logprob)) {  // masked ids: -inf on both
        EXPECT_NEAR(got.top_logprobs[k], ref.top_logprobs[k].logprob, 1e-4) << what << ": row " << i << " rank " << k;
      } else {
        EXPECT_EQ(got.top_logprobs[k], ref.top_logprobs[k].logprob) << what << ": row " << i << " rank " << k;
      }
    }
  }
  std::printf("%s, vocab %d batch %d: %d/%d tokens identical to the CPU sampler (%d greedy); max logprob diff %.3g\n",
              what, vocab, batch, matched, batch, greedy, max_lp_err);
  EXPECT_GE(matched, batch - 1) << what;  // a draw landing within rounding of a boundary may differ
  EXPECT_LT(max_lp_err, 1e-4) << what;
}

class CudaSampler : public ::testing::Test {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
};

TEST_F(CudaSampler, MatchesCpuSamplerOverParameterGrid) {
  const std::vector<int32_t> eos = {1, 2};
  for (int vocab : {1000, 32000, 151936}) {
    const int batch = vocab == 151936 ? 64 : 257;
    std::mt19937 rng{static_cast<uint32_t>(vocab)};
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> logits(size_t(batch) * vocab);
    for (auto& x : logits) x = nd(rng);
    std::vector<gpu::step_sequence> seqs(batch);
    for (int i = 0; i < batch; ++i) {
      seqs[i] = grid_sequence(i, vocab, rng, 0.25f);
      if (seqs[i].suppress_eos)
        for (int id : {1, 2, 5}) logits[size_t(i) * vocab + id] = 30.0f;  // would win unless masked
    }
    auto dev = run_device(logits, vocab, seqs, eos);
    for (int i = 0; i < batch; ++i) {
      if (seqs[i].suppress_eos) {
        EXPECT_TRUE(dev.out[i].token != 1 && dev.out[i].token != 2 && dev.out[i].token != 5) << i;
      }
    }
    expect_cpu_agreement(logits, vocab, seqs, eos, dev, "sampler");
  }
}

TEST_F(CudaSampler, ManyTiedLogitsMatchTheCpuOrder) {
  // Logits on a 0.5 grid: every level holds up to thousands of ids, more than a bucket compacts.
  const int vocab = 32000, batch = 96;
  std::mt19937 rng{11};
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(size_t(batch) * vocab);
  for (auto& x : logits) x = std::round(nd(rng) * 2.0f) / 2.0f;
  std::vector<gpu::step_sequence> seqs(batch);
  for (int i = 0; i < batch; ++i) {
    auto& p = seqs[i].params;
    seqs[i].seed = rng();
    seqs[i].num_generated = i;
    p.temperature = i % 6 == 0 ? 0.0f : 0.4f + 0.2f * float(i % 5);
    if (i % 3 != 0) p.top_k = i % 3 == 1 ? 1 + int(rng() % 40) : 500 + int(rng() % 9000);
    if (i % 2 == 1) p.top_p = 0.3f + 0.1f * float(i % 7);
    if (i % 8 == 5) p.min_p = 0.1f;
    p.num_logprobs = i % 4 == 0 ? 20 : 3;
  }
  auto dev = run_device(logits, vocab, seqs, {});
  int matched = 0;
  for (int i = 0; i < batch; ++i) {
    std::vector<float> row(logits.begin() + size_t(i) * vocab, logits.begin() + size_t(i + 1) * vocab);
    auto ref = gpu::sample_token(row, seqs[i], {});
    const auto& got = dev.out[i];
    if (seqs[i].params.greedy()) {
      ASSERT_EQ(got.token, ref.token_id) << "greedy row " << i;
    }
    matched += got.token == ref.token_id;
    ASSERT_EQ(ref.top_logprobs.size(), size_t(seqs[i].params.num_logprobs));
    for (size_t k = 0; k < ref.top_logprobs.size(); ++k) {
      EXPECT_EQ(got.top_ids[k], ref.top_logprobs[k].token_id) << "row " << i << " rank " << k;
      EXPECT_NEAR(got.top_logprobs[k], ref.top_logprobs[k].logprob, 1e-4) << "row " << i << " rank " << k;
    }
  }
  std::printf("sampler with tied logits: %d/%d tokens identical to the CPU sampler\n", matched, batch);
  EXPECT_GE(matched, batch - 1);
}

TEST_F(CudaSampler, SeedsAreReproducibleAndSpread) {
  const int vocab = 64, batch = 256;
  std::vector<float> row(vocab, 0.0f);  // uniform: draws spread over the vocab
  std::vector<float> logits;
  std::vector<gpu::step_sequence> seqs(batch);
  for (int i = 0; i < batch; ++i) {
    logits.insert(logits.end(), row.begin(), row.end());
    seqs[i].params.temperature = 1.0f;
    seqs[i].seed = uint64_t(i / 2);  // pairs share a seed and a counter
    seqs[i].num_generated = 3;
  }
  auto dev = run_device(logits, vocab, seqs, {});
  std::vector<int> hist(vocab);
  for (int i = 0; i < batch; i += 2) {
    EXPECT_EQ(dev.out[i].token, dev.out[i + 1].token);
    ASSERT_GE(dev.out[i].token, 0);
    ASSERT_LT(dev.out[i].token, vocab);
    ++hist[dev.out[i].token];
  }
  EXPECT_GT(std::count_if(hist.begin(), hist.end(), [](int c) { return c > 0; }), 40);
}

/// A filled grammar mask allowing exactly `ids` over `vocab` tokens.
std::shared_ptr<gpu::token_mask> mask_of(const std::vector<int32_t>& ids, int vocab) {
  std::vector<uint32_t> words(size_t(cuda::grammar_mask_words(vocab)), 0u);
  for (int32_t id : ids) words[size_t(id) >> 5] |= 1u << (id & 31);
  auto m = std::make_shared<gpu::token_mask>();
  m->fill(std::move(words));
  return m;
}

TEST_F(CudaSampler, GrammarMaskForcesTheTokenIntoItsIds) {
  // The allowed ids have the lowest logits of their rows: only the mask can pick them.
  const int vocab = 32000, batch = 64;
  const std::vector<int32_t> allowed = {7, 123, 4000, 31999};
  std::mt19937 rng{5};
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(size_t(batch) * vocab);
  for (auto& x : logits) x = nd(rng);
  std::vector<gpu::step_sequence> seqs(batch);
  for (int i = 0; i < batch; ++i) {
    for (int32_t id : allowed) logits[size_t(i) * vocab + id] = -20.0f - float(id % 5);
    auto& s = seqs[i];
    s.seed = rng();
    s.num_generated = i;
    s.params.temperature = i % 4 == 0 ? 0.0f : 1.0f;  // greedy and random draws
    if (i % 4 == 2) s.params.top_k = 2;
    if (i % 4 == 3) s.params.top_p = 0.9f;
    s.params.num_logprobs = i % 2 == 0 ? 3 : 0;
    s.allowed_tokens = mask_of(allowed, vocab);
  }
  auto dev = run_device(logits, vocab, seqs, {});
  std::map<int32_t, int> seen;
  for (int i = 0; i < batch; ++i) {
    const auto& got = dev.out[i];
    ASSERT_NE(std::find(allowed.begin(), allowed.end(), got.token), allowed.end()) << "row " << i << " sampled "
                                                                                  << got.token;
    ++seen[got.token];
    EXPECT_TRUE(std::isfinite(got.logprob)) << i;
    EXPECT_LE(got.logprob, 0.0f) << i;
    for (int k = 0; k < seqs[i].params.num_logprobs; ++k) {  // the allowed ids come first
      EXPECT_NE(std::find(allowed.begin(), allowed.end(), got.top_ids[k]), allowed.end()) << i;
    }
    if (seqs[i].params.greedy()) {
      EXPECT_EQ(got.token, 4000) << "greedy row " << i;  // -20: the best allowed
    }
  }
  EXPECT_GE(seen.size(), 2u) << "random rows should spread over the allowed ids";
}

TEST_F(CudaSampler, GrammarMasksMatchTheCpuSampler) {
  // The CPU sampler's order: mask, penalties, suppressed EOS, logprobs, temperature/top-k/top-p/
  // min-p. Masks of a few ids, of a tenth of the vocabulary, and rows without one.
  const std::vector<int32_t> eos = {1, 2};
  for (int vocab : {1000, 151936}) {
    const int batch = vocab == 151936 ? 48 : 160;
    std::mt19937 rng{static_cast<uint32_t>(vocab + 1)};
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> logits(size_t(batch) * vocab);
    for (auto& x : logits) x = nd(rng);
    std::vector<gpu::step_sequence> seqs(batch);
    for (int i = 0; i < batch; ++i) {
      auto& s = seqs[i];
      s = grid_sequence(i, vocab, rng, -0.25f);  // negative: a masked -inf must stay -inf
      const int shape = (i / 8) % 3;  // a few ids, a tenth of the vocabulary, no mask
      if (shape == 2) continue;
      std::vector<int32_t> ids;
      if (shape == 0) {
        for (int k = 0; k < 6; ++k) ids.push_back(int32_t(rng() % 200));  // where penalties act
        ids.push_back(1);                                                  // EOS: suppressed in kind 7
      } else {
        for (int id = 0; id < vocab; ++id)
          if (rng() % 10 == 0) ids.push_back(id);
      }
      s.allowed_tokens = mask_of(ids, vocab);
    }
    auto dev = run_device(logits, vocab, seqs, eos);
    for (int i = 0; i < batch; ++i) {
      if (!seqs[i].allowed_tokens) continue;
      const int32_t t = dev.out[i].token;
      const auto& words = *seqs[i].allowed_tokens->wait();
      EXPECT_TRUE((words[size_t(t) >> 5] >> (t & 31)) & 1u) << "row " << i << " token " << t;
    }
    expect_cpu_agreement(logits, vocab, seqs, eos, dev, "sampler with grammar masks");
  }
}

}  // namespace
}  // namespace actorserve::testing
