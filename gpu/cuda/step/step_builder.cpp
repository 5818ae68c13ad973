#include "gpu/cuda/step/step_builder.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/sampling/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

namespace actorserve::gpu::cuda {
namespace {

constexpr float kGreedyBelow = 1e-5f;

error bad_step(const std::string& what) { return make_error(error_code::invalid_argument, what); }

/// Unique ids of a history with their output counts (prompt_len splits prompt from output).
void penalty_entries(const step_sequence& s, std::vector<penalty_token>& out) {
  std::vector<std::pair<int32_t, int32_t>> toks;  // (id, is_output)
  toks.reserve(s.history->size());
  for (size_t i = 0; i < s.history->size(); ++i)
    toks.emplace_back((*s.history)[i], int32_t(i) >= s.prompt_len ? 1 : 0);
  std::sort(toks.begin(), toks.end());
  for (size_t i = 0; i < toks.size();) {
    penalty_token e;
    e.id = toks[i].first;
    e.in_history = 1;
    size_t j = i;
    for (; j < toks.size() && toks[j].first == e.id; ++j) e.output_count += toks[j].second;
    out.push_back(e);
    i = j;
  }
}

}  // namespace

int decode_bucket(int batch) {
  if (batch <= 0) return 0;
  if (batch <= 16) {
    int b = 1;
    while (b < batch) b *= 2;
    return b;
  }
  return batch > 256 ? 0 : (batch + 7) / 8 * 8;
}

step_builder::step_builder(step_limits limits, const attention_backend& attention)
    : limits_(std::move(limits)), attention_(&attention) {}

status step_builder::build(const step_batch& b, std::span<const std::pair<uint64_t, int32_t>> previous_rows,
                           staged_step& out) const {
  const step_limits& L = limits_;
  const int nseq = static_cast<int>(b.seqs.size());
  if (nseq > L.max_rows)
    return bad_step(fmt::format("step has {} sequences, over --max-num-seqs {}", nseq, L.max_rows));
  int ntok = 0;
  bool all_decode = nseq > 0;
  for (const step_sequence& s : b.seqs) {
    ntok += static_cast<int>(s.new_tokens.size());
    all_decode = all_decode && s.new_tokens.size() == 1;
  }
  if (ntok > L.max_tokens)
    return bad_step(fmt::format("step has {} tokens, over --max-num-batched-tokens {}", ntok, L.max_tokens));
  int bucket = 0;
  if (!L.enforce_eager && all_decode && b.block_copies.empty()) {
    bucket = decode_bucket(nseq);
    if (bucket > std::min(L.max_rows, L.max_tokens)) bucket = 0;
  }
  out.num_seqs = nseq;
  out.num_tokens = ntok;
  out.all_decode = all_decode;
  out.bucket = bucket;
  out.rows = bucket ? bucket : ntok;
  stage_sampling(b, out);
  if (out.masks.size() > L.mask_capacity) return bad_step("too many EOS/stop token ids to suppress in one step");
  // A prefill-carrying step: past its K/V writes, the last layer needs only the sampled rows
  // (outside a graph bucket sample_seqs holds one entry per sampled sequence).
  out.sampled_only = !bucket && !L.last_layer_all_rows && ntok > 1 && int(out.sample_seqs.size()) < ntok;
  if (auto st = stage_tokens(b, previous_rows, out); !st) return st;
  if (auto st = stage_attention(b, out); !st) return st;
  out.copy_pairs.clear();
  for (const auto& [src, dst] : b.block_copies) {
    if (src < 0 || src >= L.num_blocks || dst < 0 || dst >= L.num_blocks)
      return bad_step(fmt::format("block copy {} -> {} outside the pool of {}", src, dst, L.num_blocks));
    out.copy_pairs.push_back(src);
    out.copy_pairs.push_back(dst);
  }
  return {};
}

void step_builder::stage_sampling(const step_batch& b, staged_step& out) const {
  out.penalties.clear();
  out.masks.clear();
  out.grammar.clear();
  out.sample_seqs.clear();
  for (const step_sequence& s : b.seqs) {
    sample_seq x;
    if (s.sample) {
      const sampling_params& sp = s.params;
      x.temperature = sp.temperature < kGreedyBelow ? 0.0f : sp.temperature;
      x.top_p = sp.top_p;
      x.top_k = sp.top_k;
      x.min_p = sp.min_p;
      x.repetition_penalty = sp.repetition_penalty;
      x.presence_penalty = sp.presence_penalty;
      x.frequency_penalty = sp.frequency_penalty;
      x.num_logprobs = std::clamp(sp.num_logprobs, 0, max_top_logprobs);
      x.seed = s.seed;
      x.counter = static_cast<uint64_t>(s.num_generated);
      x.penalty_begin = static_cast<int32_t>(out.penalties.size());
      if (sp.uses_penalties() && s.history) penalty_entries(s, out.penalties);
      x.penalty_count = static_cast<int32_t>(out.penalties.size()) - x.penalty_begin;
      x.mask_begin = static_cast<int32_t>(out.masks.size());
      if (s.suppress_eos) {
        out.masks.insert(out.masks.end(), limits_.eos_token_ids.begin(), limits_.eos_token_ids.end());
        out.masks.insert(out.masks.end(), sp.stop_token_ids.begin(), sp.stop_token_ids.end());
      }
      x.mask_count = static_cast<int32_t>(out.masks.size()) - x.mask_begin;
      if (s.allowed_tokens) {
        x.grammar_row = static_cast<int32_t>(out.grammar.size());
        out.grammar.push_back(s.allowed_tokens);
      }
    }
    if (out.bucket || s.sample) out.sample_seqs.push_back(x);
  }
}

status step_builder::stage_tokens(const step_batch& b, std::span<const std::pair<uint64_t, int32_t>> previous_rows,
                                  staged_step& out) const {
  const step_limits& L = limits_;
  const int bs = L.block_size, rows = out.rows;
  out.ids.assign(size_t(rows), 0);
  out.positions.assign(size_t(rows), 0);
  out.slots.assign(size_t(rows), -1);
  out.token_seqs.assign(size_t(rows), -1);
  out.q32.assign(size_t(rows), 1);  // graph padding rows: computed, never written to the cache
  out.block_tables.clear();
  out.seqs.clear();
  out.up_projected.clear();
  out.sample_rows.clear();
  out.previous.clear();
  out.seq_ids.clear();
  out.out_rows.clear();
  out.num_top.clear();
  int tok = 0;
  for (int i = 0; i < out.num_seqs; ++i) {
    const step_sequence& s = b.seqs[i];
    const int q = static_cast<int>(s.new_tokens.size());
    const int64_t ctx = int64_t(s.num_computed) + q;
    if (s.num_computed < 0 || ctx > L.max_model_len)
      return bad_step(fmt::format("sequence {}: {} tokens exceed --max-model-len {}", s.seq_id, ctx, L.max_model_len));
    const size_t need = static_cast<size_t>((ctx + bs - 1) / bs);
    if (s.block_table.size() < need)
      return bad_step(fmt::format("sequence {}: block table has {} blocks for {} tokens", s.seq_id,
                                  s.block_table.size(), ctx));
    const size_t bt_used = out.block_tables.size();
    if (bt_used + need > L.block_table_capacity) return bad_step("block tables exceed their staging capacity");
    for (size_t k = 0; k < need; ++k) {
      const int32_t blk = s.block_table[k];
      if (blk < 0 || blk >= L.num_blocks)
        return bad_step(fmt::format("sequence {}: block id {} outside the pool of {}", s.seq_id, blk, L.num_blocks));
      out.block_tables.push_back(blk);
    }
    attn_seq a;
    a.q_start = tok;
    a.q_len = q;
    a.context_len = static_cast<int32_t>(ctx);
    a.bt_offset = static_cast<int32_t>(bt_used);
    out.seqs.push_back(a);
    const bool up_projected = L.latent_attention && q > 1;
    if (up_projected) out.up_projected.push_back(a);
    for (int k = 0; k < q; ++k, ++tok) {
      int32_t id = s.new_tokens[k];
      if (id == previous_token && q == 1) {
        // Resolved on the device from the sampler output of the step launched before this one.
        const auto it = std::lower_bound(previous_rows.begin(), previous_rows.end(),
                                         std::make_pair(s.seq_id, INT32_MIN));
        if (it == previous_rows.end() || it->first != s.seq_id)
          return bad_step(fmt::format("sequence {}: no token sampled in the previous step", s.seq_id));
        out.previous.push_back(tok);
        out.previous.push_back(it->second);
        id = 0;
      }
      if (id < 0 || id >= L.vocab_size)
        return bad_step(fmt::format("sequence {}: token id {} outside the vocabulary", s.seq_id, id));
      const int32_t position = s.num_computed + k;
      out.ids[tok] = id;
      out.token_seqs[tok] = up_projected ? -1 : i;
      out.positions[tok] = position;
      out.slots[tok] = s.block_table[position / bs] * bs + position % bs;
      // A decode token's attention reads the fp32 q, and so does the last layer's of a sampled
      // prompt's last token when that layer runs on the sampled rows only.
      out.q32[tok] = q == 1 || (out.sampled_only && s.sample && k == q - 1);
    }
    if (q == 0 && s.sample) return bad_step(fmt::format("sequence {}: asked to sample with no new tokens", s.seq_id));
    const int32_t num_top = std::clamp(s.params.num_logprobs, 0, max_top_logprobs);
    if (out.bucket) {
      out.sample_rows.push_back(i);
      if (s.sample) {
        out.seq_ids.push_back(s.seq_id);
        out.out_rows.push_back(i);
        out.num_top.push_back(num_top);
      }
    } else if (s.sample) {
      out.out_rows.push_back(static_cast<int32_t>(out.sample_rows.size()));
      out.sample_rows.push_back(tok - 1);
      out.seq_ids.push_back(s.seq_id);
      out.num_top.push_back(num_top);
    }
  }
  out.absorbed_rows = rows;
  for (auto it = out.up_projected.rbegin(); it != out.up_projected.rend(); ++it)
    if (it->q_start + it->q_len == out.absorbed_rows) out.absorbed_rows = it->q_start;
  for (int i = out.num_seqs; i < out.bucket; ++i) {
    out.sample_rows.push_back(i);
    out.sample_seqs.push_back(sample_seq{});
  }
  return {};
}

cascade_plan step_builder::plan_cascade_step(const step_batch& b) const {
  if (!limits_.cascade || !attention_->takes_cascade()) return {};
  std::vector<cascade_input> in;
  in.reserve(b.seqs.size());
  for (const step_sequence& s : b.seqs)
    in.push_back({s.block_table, s.num_computed, static_cast<int32_t>(s.new_tokens.size())});
  return plan_cascade(in, limits_.block_size, limits_.cascade_costs);
}

status step_builder::stage_attention(const step_batch& b, staged_step& out) const {
  const step_limits& L = limits_;
  out.plan = attention_->plan(out.seqs, plan_cascade_step(b));
  out.cascade = !out.plan.prefix_items.empty();
  if (out.plan.items.size() + out.plan.prefix_items.size() > L.item_capacity ||
      out.plan.prefix_rows.size() > L.prefix_row_capacity)
    return bad_step("attention work exceeds its staging capacity");
  set_first_blocks(out.plan, out.block_tables, L.block_size);
  // The last layer's attention over the sampled rows: one query per sampled sequence (row r of
  // the gathered rows), over all of its keys.
  out.last_plan = attention_plan{};
  out.last_seqs.clear();
  if (!out.sampled_only) return {};
  for (int i = 0; i < out.num_seqs; ++i) {
    if (!b.seqs[i].sample) continue;
    attn_seq a = out.seqs[i];
    a.q_start = static_cast<int32_t>(out.last_seqs.size());
    a.q_len = 1;
    out.last_seqs.push_back(a);
  }
  out.last_plan = attention_->plan(out.last_seqs);
  if (out.last_plan.items.size() > L.last_item_capacity)
    return bad_step("last-layer attention work exceeds its staging capacity");
  set_first_blocks(out.last_plan, out.block_tables, L.block_size);
  return {};
}

}  // namespace actorserve::gpu::cuda
