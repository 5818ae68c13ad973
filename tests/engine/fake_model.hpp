#pragma once
// A fake model for scheduler tests: it keeps a token-valued "KV cache" per block, writes each
// step's new tokens through the block tables, applies copy-on-write copies, and samples the next
// token as a hash of the tokens it READS BACK from the blocks. Wrong block tables, lost copies or
// bad prefix hits therefore change the output, as they would with a real model.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <vector>

#include "actors/block_pool.hpp"
#include "actors/scheduler_policy.hpp"

namespace actorserve::actors::testing {

inline int32_t next_token_of(const std::vector<int32_t>& context) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : context) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ull;
  return 2 + static_cast<int32_t>(h % 500);
}

class fake_model {
 public:
  fake_model(int32_t num_blocks, int32_t block_size)
      : bs_(block_size), kv_(static_cast<size_t>(num_blocks), std::vector<int32_t>(static_cast<size_t>(block_size), -1)) {}

  gpu::step_result run(const gpu::step_batch& b) {
    gpu::step_result r;
    r.step_id = b.step_id;
    for (auto [src, dst] : b.block_copies) kv_[static_cast<size_t>(dst)] = kv_[static_cast<size_t>(src)];
    for (const auto& s : b.seqs) {
      for (size_t j = 0; j < s.new_tokens.size(); ++j) slot(s, s.num_computed + static_cast<int32_t>(j)) = s.new_tokens[j];
    }
    for (const auto& s : b.seqs) {
      if (!s.sample) continue;
      std::vector<int32_t> context;
      const int32_t end = s.num_computed + static_cast<int32_t>(s.new_tokens.size());
      for (int32_t p = 0; p < end; ++p) {
        const int32_t t = slot(s, p);
        EXPECT_GE(t, 0) << "seq " << s.seq_id << " reads an unwritten slot at position " << p;
        context.push_back(t);
      }
      gpu::sampled_token tok;
      tok.seq_id = s.seq_id;
      tok.token_id = next_token_of(context) + static_cast<int32_t>(s.seed % 7);
      r.tokens.push_back(tok);
    }
    return r;
  }

 private:
  int32_t& slot(const gpu::step_sequence& s, int32_t pos) {
    const auto blk = s.block_table.at(static_cast<size_t>(pos / bs_));
    return kv_[static_cast<size_t>(blk)][static_cast<size_t>(pos % bs_)];
  }
  int32_t bs_;
  std::vector<std::vector<int32_t>> kv_;
};

/// A scheduler, a pool and the fake model wired together with plain calls.
struct harness {
  harness(scheduler_config cfg, int32_t num_blocks, scheduler_clock clock = steady_clock_us)
      : sched(cfg, std::move(clock)), pool(num_blocks, cfg.block_size, cfg.enable_prefix_caching), model(num_blocks, cfg.block_size),
        cfg_(cfg) {}

  /// One step; false when there was nothing to do.
  bool step() {
    auto r = sched.plan();
    if (!r) return false;
    while (true) {
      auto ans = pool.reserve(*r);
      auto d = sched.on_answer(ans);
      for (auto& f : d.failed) failed.push_back(f);
      if (d.retry) {
        r = std::move(d.retry);
        continue;
      }
      if (d.step) {
        int32_t tokens = 0;
        for (const auto& s : d.step->seqs) tokens += static_cast<int32_t>(s.new_tokens.size());
        step_tokens.push_back(tokens);
        step_seqs.push_back(static_cast<int32_t>(d.step->seqs.size()));
        if (on_step) on_step(*d.step);
        for (auto& o : sched.on_step_done(model.run(*d.step))) {
          if (o.has_token) outputs[{o.group_id, o.index}].push_back(o.token.token_id);
          if (o.finish != seq_finish::none) finished[{o.group_id, o.index}] = o.finish;
          last_output[{o.group_id, o.index}] = o;
        }
      }
      return true;
    }
  }
  /// Steps until idle (at most `limit` steps); returns the number of steps.
  int run(int limit = 100000) {
    int n = 0;
    while (n < limit && step()) ++n;
    return n;
  }

  /// The tokens of choice `index` of request `group`.
  std::vector<int32_t> out(uint64_t group, int32_t index) { return outputs[{group, index}]; }

  scheduler_policy sched;
  block_pool pool;
  fake_model model;
  scheduler_config cfg_;
  std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>> outputs;
  std::map<std::pair<uint64_t, int32_t>, seq_finish> finished;
  std::map<std::pair<uint64_t, int32_t>, seq_output> last_output;   ///< each choice's latest output
  std::vector<seq_output> failed;
  std::vector<int32_t> step_tokens, step_seqs;
  std::function<void(const gpu::step_batch&)> on_step;
};

/// A scheduler with a token budget, a sequence cap, chunked prefill and EOS id 1.
inline scheduler_config config(int32_t budget, int32_t max_seqs, int32_t block_size = 16) {
  scheduler_config c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.block_size = block_size;
  c.eos_token_ids = {1};
  return c;
}

inline std::shared_ptr<const sampling_params> params(int32_t max_tokens, int32_t n = 1) {
  auto p = std::make_shared<sampling_params>();
  p->max_tokens = max_tokens;
  p->n = n;
  p->temperature = 0.0f;
  return p;
}

inline std::vector<int32_t> prompt_of(int32_t len, int32_t salt) {
  std::vector<int32_t> t;
  for (int32_t i = 0; i < len; ++i) t.push_back(3 + (i * 7 + salt * 13) % 900);
  return t;
}

}  // namespace actorserve::actors::testing
