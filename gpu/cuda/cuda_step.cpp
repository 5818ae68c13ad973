// One step of the CUDA executor: validation, staging into pinned memory, the forward pass
// (eager, or a CUDA graph per decode bucket), output copies and the completion callback.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "config/log.hpp"
#include "gpu/cuda/cuda_executor_impl.hpp"
#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/gemv_kernel.hpp"
#include "gpu/cuda/step_inputs.hpp"

namespace actorserve::gpu::cuda {
namespace {

constexpr float kGreedyBelow = 1e-5f;

template <class T>
T* at(char* base, size_t offset) { return reinterpret_cast<T*>(base + offset); }

error bad_step(const std::string& what) { return make_error(error_code::invalid_argument, what); }

/// Where one attention work list sits in the metadata: the step's, or the last layer's.
struct work_list_at {
  size_t seqs, items, combines, counts;
};

/// Copies `plan` into the staging area `h` at `w` (the sequences are copied by the caller).
void stage_plan(char* h, const work_list_at& w, const attention_plan& plan) {
  std::memcpy(h + w.items, plan.items.data(), plan.items.size() * sizeof(attn_item));
  std::memcpy(h + w.combines, plan.combines.data(), plan.combines.size() * sizeof(attn_combine));
  int32_t* counts = at<int32_t>(h, w.counts);
  counts[0] = static_cast<int32_t>(plan.items.size()) - plan.num_decode_items;
  counts[1] = static_cast<int32_t>(plan.combines.size());
  counts[2] = plan.num_decode_items;
  counts[3] = 0;
}

/// Points `a` at a staged work list on the device and sizes its launches.
void use_plan(attn_launch& a, char* meta, const work_list_at& w, const attention_grids& g) {
  a.seqs = at<attn_seq>(meta, w.seqs);
  a.items = at<attn_item>(meta, w.items);
  a.combines = at<attn_combine>(meta, w.combines);
  a.counts = at<int32_t>(meta, w.counts);
  a.prefill_grid = g.prefill;
  a.decode_grid = g.decode;
  a.combine_grid = g.combine;
}

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

work_list_at step_work(const meta_layout& L) { return {L.seqs, L.items, L.combines, L.counts}; }
work_list_at last_layer_work(const meta_layout& L) { return {L.last_seqs, L.last_items, L.last_combines, L.last_counts}; }

}  // namespace

void cuda_executor::submit(step_batch batch, done_fn done) {
  std::lock_guard submit_lock(submit_mu_);
  const int slot_index = next_slot_;
  next_slot_ ^= 1;
  auto owned = std::make_unique<pending_step>();
  pending_step* p = owned.get();
  p->owner = this;
  p->step_id = batch.step_id;
  p->done = std::move(done);
  p->slot = slot_index;
  {
    std::unique_lock lock(mu_);
    // Back-pressure only: the slot's previous step (two steps ago) must have completed.
    cv_.wait(lock, [&] { return !slots_[slot_index].busy; });
    slots_[slot_index].busy = true;
    pending_.push_back(std::move(owned));
  }
  if (status st = stage_and_launch(batch, slots_[slot_index], *p); !st) {
    prev_rows_.clear();  // the next step's placeholders have nothing to resolve to
    last_mark_ = -1;
    {
      std::lock_guard lock(mu_);
      p->outcome = st;
      p->ready = true;
    }
    cv_.notify_all();
    return;
  }
  {
    std::lock_guard lock(mu_);
    p->launched = true;  // the worker may now wait for slot.end
  }
  cv_.notify_all();
}

status cuda_executor::stage_and_launch(const step_batch& b, host_slot& slot, pending_step& p) {
  p.owner = this;
  const model_config& c = model_->cfg;
  const int V = info_.vocab_size, bs = info_.block_size, nseq = static_cast<int>(b.seqs.size());
  if (nseq > max_rows_) return bad_step(fmt::format("step has {} sequences, over --max-num-seqs {}", nseq, max_rows_));
  int ntok = 0;
  bool all_decode = nseq > 0;
  for (const step_sequence& s : b.seqs) {
    ntok += static_cast<int>(s.new_tokens.size());
    all_decode = all_decode && s.new_tokens.size() == 1;
  }
  if (ntok > max_tokens_)
    return bad_step(fmt::format("step has {} tokens, over --max-num-batched-tokens {}", ntok, max_tokens_));
  int bucket = 0;
  if (!opts_.enforce_eager && all_decode && b.block_copies.empty()) {
    bucket = decode_bucket(nseq);
    if (bucket > std::min(max_rows_, max_tokens_)) bucket = 0;
  }
  const int rows_tok = bucket ? bucket : ntok;
  // Variable-size tail first, to size the buffers. The scratch vectors keep their capacity.
  std::vector<penalty_token>& pens = pens_;
  std::vector<int32_t>& masks = masks_;
  std::vector<sample_seq>& sseqs = sseqs_;
  std::vector<int32_t>& sample_rows = sample_rows_;
  std::vector<attn_seq>& aseqs = aseqs_;
  std::vector<int32_t>& previous = previous_pairs_;
  pens.clear();
  masks.clear();
  sseqs.clear();
  sample_rows.clear();
  aseqs.clear();
  previous.clear();
  p.seq_ids.clear();
  p.out_rows.clear();
  p.num_top.clear();
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
      x.penalty_begin = static_cast<int32_t>(pens.size());
      if (sp.uses_penalties() && s.history) penalty_entries(s, pens);
      x.penalty_count = static_cast<int32_t>(pens.size()) - x.penalty_begin;
      x.mask_begin = static_cast<int32_t>(masks.size());
      if (s.suppress_eos) {
        masks.insert(masks.end(), info_.eos_token_ids.begin(), info_.eos_token_ids.end());
        masks.insert(masks.end(), sp.stop_token_ids.begin(), sp.stop_token_ids.end());
      }
      x.mask_count = static_cast<int32_t>(masks.size()) - x.mask_begin;
    }
    if (bucket || s.sample) sseqs.push_back(x);
  }
  if (masks.size() > layout_.mask_capacity) return bad_step("too many EOS/stop token ids to suppress in one step");
  // A prefill-carrying step: past its K/V writes, the last layer needs only the sampled rows
  // (outside a graph bucket sseqs holds one entry per sampled sequence).
  const bool sampled_only = !bucket && !opts_.tuning.last_layer_all_rows && ntok > 1 && int(sseqs.size()) < ntok;
  const size_t pairs_offset = (layout_.penalties + pens.size() * sizeof(penalty_token) + 15) & ~size_t(15);
  const size_t total = pairs_offset + b.block_copies.size() * 2 * sizeof(int32_t);
  if (auto st = ensure_meta_capacity(slot, total); !st) return st;
  if (total > meta_capacity_) {
    AS_CUDA_TRY(cudaFreeAsync(meta_, stream_));
    meta_capacity_ = std::max(total, meta_capacity_ * 2);
    AS_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&meta_), meta_capacity_, stream_));
    for (auto& [bk, g] : graphs_) cudaGraphExecDestroy(g);  // they captured the old buffer
    graphs_.clear();
  }
  char* h = slot.meta;
  int32_t* ids = at<int32_t>(h, layout_.ids);
  int32_t* pos = at<int32_t>(h, layout_.positions);
  int32_t* slots = at<int32_t>(h, layout_.slots);
  int32_t* q32 = at<int32_t>(h, layout_.q32);
  int32_t* bt = at<int32_t>(h, layout_.block_tables);
  size_t bt_used = 0;
  int tok = 0;
  for (int i = 0; i < nseq; ++i) {
    const step_sequence& s = b.seqs[i];
    const int q = static_cast<int>(s.new_tokens.size());
    const int64_t ctx = int64_t(s.num_computed) + q;
    if (s.num_computed < 0 || ctx > info_.max_model_len)
      return bad_step(fmt::format("sequence {}: {} tokens exceed --max-model-len {}", s.seq_id, ctx, info_.max_model_len));
    const size_t need = static_cast<size_t>((ctx + bs - 1) / bs);
    if (s.block_table.size() < need)
      return bad_step(fmt::format("sequence {}: block table has {} blocks for {} tokens", s.seq_id,
                                  s.block_table.size(), ctx));
    if (bt_used + need > layout_.block_table_capacity) return bad_step("block tables exceed their staging capacity");
    for (size_t k = 0; k < need; ++k) {
      const int32_t blk = s.block_table[k];
      if (blk < 0 || blk >= info_.num_blocks)
        return bad_step(fmt::format("sequence {}: block id {} outside the pool of {}", s.seq_id, blk, info_.num_blocks));
      bt[bt_used + k] = blk;
    }
    attn_seq a;
    a.q_start = tok;
    a.q_len = q;
    a.context_len = static_cast<int32_t>(ctx);
    a.bt_offset = static_cast<int32_t>(bt_used);
    aseqs.push_back(a);
    bt_used += need;
    for (int k = 0; k < q; ++k, ++tok) {
      int32_t id = s.new_tokens[k];
      if (id == previous_token && q == 1) {
        // Resolved on the device from the sampler output of the step launched before this one.
        const auto it = std::lower_bound(prev_rows_.begin(), prev_rows_.end(), std::make_pair(s.seq_id, INT32_MIN));
        if (it == prev_rows_.end() || it->first != s.seq_id)
          return bad_step(fmt::format("sequence {}: no token sampled in the previous step", s.seq_id));
        previous.push_back(tok);
        previous.push_back(it->second);
        id = 0;
      }
      if (id < 0 || id >= V) return bad_step(fmt::format("sequence {}: token id {} outside the vocabulary", s.seq_id, id));
      const int32_t position = s.num_computed + k;
      ids[tok] = id;
      pos[tok] = position;
      slots[tok] = s.block_table[position / bs] * bs + position % bs;
      // A decode token's attention reads the fp32 q, and so does the last layer's of a sampled
      // prompt's last token when that layer runs on the sampled rows only.
      q32[tok] = q == 1 || (sampled_only && s.sample && k == q - 1);
    }
    if (q == 0 && s.sample) return bad_step(fmt::format("sequence {}: asked to sample with no new tokens", s.seq_id));
    if (bucket) {
      sample_rows.push_back(i);
      if (s.sample) {
        p.seq_ids.push_back(s.seq_id);
        p.out_rows.push_back(i);
        p.num_top.push_back(std::clamp(s.params.num_logprobs, 0, max_top_logprobs));
      }
    } else if (s.sample) {
      p.out_rows.push_back(static_cast<int32_t>(sample_rows.size()));
      sample_rows.push_back(tok - 1);
      p.seq_ids.push_back(s.seq_id);
      p.num_top.push_back(std::clamp(s.params.num_logprobs, 0, max_top_logprobs));
    }
  }
  for (; tok < rows_tok; ++tok) {  // graph padding rows: computed, never written to the cache
    ids[tok] = 0;
    pos[tok] = 0;
    slots[tok] = -1;
    q32[tok] = 1;
  }
  for (int i = nseq; i < bucket; ++i) {
    sample_rows.push_back(i);
    sseqs.push_back(sample_seq{});
  }
  attention_plan plan = attention_->plan(aseqs);
  if (plan.items.size() > layout_.item_capacity) return bad_step("attention work exceeds its staging capacity");
  set_first_blocks(plan, {bt, bt_used}, bs);
  std::memcpy(at<char>(h, layout_.seqs), aseqs.data(), aseqs.size() * sizeof(attn_seq));
  stage_plan(h, step_work(layout_), plan);
  // The last layer's attention over the sampled rows: one query per sampled sequence (row r of
  // the gathered rows), over all of its keys.
  attention_plan last_plan;
  last_seqs_.clear();
  if (sampled_only) {
    for (int i = 0; i < nseq; ++i) {
      if (!b.seqs[i].sample) continue;
      attn_seq a = aseqs[i];
      a.q_start = static_cast<int32_t>(last_seqs_.size());
      a.q_len = 1;
      last_seqs_.push_back(a);
    }
    last_plan = attention_->plan(last_seqs_);
    if (last_plan.items.size() > layout_.last_item_capacity)
      return bad_step("last-layer attention work exceeds its staging capacity");
    std::memcpy(at<char>(h, layout_.last_seqs), last_seqs_.data(), last_seqs_.size() * sizeof(attn_seq));
    set_first_blocks(last_plan, {bt, bt_used}, bs);
    stage_plan(h, last_layer_work(layout_), last_plan);
  }
  std::memcpy(at<char>(h, layout_.sample_rows), sample_rows.data(), sample_rows.size() * 4);
  std::memcpy(at<char>(h, layout_.sample_seqs), sseqs.data(), sseqs.size() * sizeof(sample_seq));
  std::memcpy(at<char>(h, layout_.masks), masks.data(), masks.size() * 4);
  std::memcpy(at<char>(h, layout_.penalties), pens.data(), pens.size() * sizeof(penalty_token));
  std::memcpy(at<char>(h, layout_.previous), previous.data(), previous.size() * 4);
  int32_t* pairs = at<int32_t>(h, pairs_offset);
  for (size_t i = 0; i < b.block_copies.size(); ++i) {
    const auto [src, dst] = b.block_copies[i];
    if (src < 0 || src >= info_.num_blocks || dst < 0 || dst >= info_.num_blocks)
      return bad_step(fmt::format("block copy {} -> {} outside the pool of {}", src, dst, info_.num_blocks));
    pairs[2 * i] = src;
    pairs[2 * i + 1] = dst;
  }
  // Copy the used part of each array.
  const std::pair<size_t, size_t> ranges[] = {
      {layout_.ids, size_t(rows_tok) * 4},
      {layout_.positions, size_t(rows_tok) * 4},
      {layout_.slots, size_t(rows_tok) * 4},
      {layout_.q32, bucket ? 0 : size_t(rows_tok) * 4},
      {layout_.sample_rows, sample_rows.size() * 4},
      {layout_.seqs, aseqs.size() * sizeof(attn_seq)},
      {layout_.counts, 16},
      {layout_.items, plan.items.size() * sizeof(attn_item)},
      {layout_.combines, plan.combines.size() * sizeof(attn_combine)},
      {layout_.last_seqs, last_seqs_.size() * sizeof(attn_seq)},
      {layout_.last_counts, sampled_only ? 16u : 0u},
      {layout_.last_items, last_plan.items.size() * sizeof(attn_item)},
      {layout_.last_combines, last_plan.combines.size() * sizeof(attn_combine)},
      {layout_.sample_seqs, sseqs.size() * sizeof(sample_seq)},
      {layout_.block_tables, bt_used * 4},
      {layout_.masks, masks.size() * 4},
      {layout_.previous, previous.size() * 4},
      {layout_.penalties, total - layout_.penalties},
  };
  AS_CUDA_TRY(cudaEventRecord(slot.start, stream_));
  if (!bucket) {
    profile_.begin(p.slot, rows_tok, all_decode);
    profile_.mark(step_op::inputs, stream_);
  }
  for (const auto& [off, len] : ranges)
    if (len) AS_CUDA_TRY(cudaMemcpyAsync(meta_ + off, h + off, len, cudaMemcpyHostToDevice, stream_));
  if (!b.block_copies.empty())
    AS_CUDA_TRY(copy_kv_blocks(kv_pool_, at<int32_t>(meta_, pairs_offset), static_cast<int>(b.block_copies.size()),
                               static_cast<int>(2 * c.num_layers), cache_stride_, block_bytes_, stream_));
  AS_CUDA_TRY(resolve_previous_tokens(at<int32_t>(meta_, layout_.ids), out_, at<int32_t>(meta_, layout_.previous),
                                      static_cast<int>(previous.size() / 2), stream_));
  launch_shape shape;
  shape.tokens = rows_tok;
  shape.sample_rows = static_cast<int>(sample_rows.size());
  shape.sampled_only = sampled_only;
  if (sampled_only) shape.last_attn = attention_->grids(last_plan);
  if (bucket) {
    shape.attn = attention_->decode_graph_grids(bucket);
    profile_.disarm();
    if (auto st = launch_decode_graph(bucket, shape); !st) return st;
  } else {
    shape.attn = attention_->grids(plan);
    if (auto st = enqueue_forward(shape); !st) return st;
    profile_.mark(step_op::outputs, stream_);
    if (sampled_only) sampled_only_steps_.fetch_add(1);
  }
  if (shape.sample_rows > 0) {
    AS_CUDA_TRY(cudaMemcpyAsync(slot.out, out_, size_t(shape.sample_rows) * sizeof(sample_out),
                                cudaMemcpyDeviceToHost, stream_));
    if (opts_.keep_logits)
      AS_CUDA_TRY(cudaMemcpyAsync(slot.logits, kept_logits_, size_t(shape.sample_rows) * V * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_));
  }
  profile_.end(stream_);
  AS_CUDA_TRY(cudaEventRecord(slot.end, stream_));
  const int mark = static_cast<int>(launches_++ % kMarks);
  AS_CUDA_TRY(cudaEventRecord(end_marks_[mark], stream_));
  p.prev_mark = last_mark_;
  p.mark = mark;
  last_mark_ = mark;
  // What the next step's placeholders resolve to: this step's sampler rows.
  cur_rows_.clear();
  for (size_t i = 0; i < p.seq_ids.size(); ++i) cur_rows_.emplace_back(p.seq_ids[i], p.out_rows[i]);
  std::sort(cur_rows_.begin(), cur_rows_.end());
  prev_rows_.swap(cur_rows_);
  return {};
}

status cuda_executor::enqueue_forward(const launch_shape& shape) {
  const model_config& c = model_->cfg;
  const device_model& m = *model_;
  const int n = shape.tokens, H = int(c.num_heads), KVH = int(c.num_kv_heads), D = int(c.head_dim);
  const int hidden = int(c.hidden_size), inter = int(c.intermediate_size), V = info_.vocab_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto* ids = at<int32_t>(meta_, layout_.ids);
  const auto mark = [&](step_op op) { profile_.mark(op, stream_); };
  const auto run_attention = [&](const attn_launch& a) {
    if (!profile_.on()) return attention_->run(a, stream_);
    return attention_->run_marked(a, stream_, [&] { mark(step_op::attention_decode); });
  };
  mark(step_op::embed);
  AS_CUDA_TRY(embedding_gather(dt_, m.embed, ids, n, hidden, residual_, stream_));
  attn_launch aa;
  aa.q = qkv_;
  aa.q_stride = qkv_width_;
  aa.block_tables = at<int32_t>(meta_, layout_.block_tables);
  use_plan(aa, meta_, step_work(layout_), shape.attn);
  aa.partial_o = partial_acc_;
  aa.partial_lse = partial_ml_;
  aa.out = attn_;
  aa.num_heads = H;
  aa.num_kv_heads = KVH;
  aa.head_dim = D;
  aa.block_size = info_.block_size;
  aa.scale = 1.0f / std::sqrt(static_cast<float>(D));
  rope_kv_args ra;
  ra.qkv = qkv_;
  ra.positions = at<int32_t>(meta_, layout_.positions);
  ra.slots = at<int32_t>(meta_, layout_.slots);
  ra.inv_freq = m.inv_freq;
  ra.n = n;
  ra.num_heads = H;
  ra.num_kv_heads = KVH;
  ra.head_dim = D;
  const cuda_tuning& tuning = opts_.tuning;
  // One token: the qkv and gate/up projections fuse the element-wise kernel after them.
  const bool fused = n == 1 && tuning.fused_decode && hidden % 8 == 0;
  // Prefill tiles copy rope's 16-bit queries in; then rope writes the fp32 q of decode tokens
  // only, and reads the QKV GEMM's output rounded to the activation dtype (half the bytes).
  bool qkv16 = false;
  if (q16_ && !fused && shape.attn.prefill > 0) {
    ra.q16 = q16_;
    ra.q16_scale = prefill_q_scale(aa.scale);
    aa.q16 = q16_;
    if (tuning.q32_decode_only) ra.q32 = at<int32_t>(meta_, layout_.q32);
    qkv16 = qkv16_ != nullptr && !gemm_.uses_gemv(n);
    if (qkv16) ra.qkv16 = qkv16_;
  }
  const int rows_gate_up = gemm_.gemv_rows_for(2 * inter);
  // Batched rows (cuBLAS): o (without a bias) and down add into the residual in the epilogue.
  const bool add_in_gemm = !fused && !gemm_.uses_gemv(n) && tuning.residual_gemm;
  // What add_rmsnorm adds to the residual after the MLP (the down projection's output).
  float* const delta = add_in_gemm ? nullptr : delta_;
  // The last layer of a sampled_only step: attention as a decode of the gathered sampled rows.
  attn_launch last_aa = aa;
  if (shape.sampled_only) {
    last_aa.q = rows_q_;
    last_aa.q_stride = H * D;
    last_aa.q16 = nullptr;
    use_plan(last_aa, meta_, last_layer_work(layout_), shape.last_attn);
  }
  const int32_t* sample_row_ids = at<int32_t>(meta_, layout_.sample_rows);
  float* residual = residual_;  // the rows past attention: all, or the sampled ones gathered
  int rows_on = n;
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const device_layer& w = m.layers[l];
    char* k_cache = static_cast<char*>(kv_pool_) + (2 * l) * cache_stride_;
    char* v_cache = k_cache + cache_stride_;
    ra.bias = w.qkv_bias;
    ra.k_cache = k_cache;
    ra.v_cache = v_cache;
    aa.k_cache = k_cache;
    aa.v_cache = v_cache;
    // The previous layer's MLP output joins the residual here (none before the first layer).
    mark(step_op::norm);
    AS_CUDA_TRY(add_rmsnorm(dt_, residual_, l == 0 ? nullptr : delta, nullptr, w.input_norm, eps, nullptr, n, hidden,
                            x_, stream_));
    if (fused) {
      mark(step_op::qkv);
      AS_CUDA_TRY(gemv_qkv_rope(dt_, x_, hidden, w.qkv, ra, stream_, tuning.bulk));
    } else {
      mark(step_op::qkv);
      if (qkv16) {
        if (auto st = gemm_.run_act(dt_, x_, n, hidden, w.qkv, qkv_width_, qkv16_); !st) return st;
      } else if (auto st = gemm_.run(dt_, x_, n, hidden, w.qkv, qkv_width_, qkv_); !st) {
        return st;
      }
      mark(step_op::rope);
      AS_CUDA_TRY(rope_kv_write(dt_, ra, stream_));
    }
    const bool last = l + 1 == m.layers.size();
    if (last && shape.sampled_only) {
      rows_on = shape.sample_rows;
      if (rows_on == 0) break;  // the K/V writes were all this step needed of the last layer
      mark(step_op::norm);
      AS_CUDA_TRY(gather_rows(residual_, hidden, sample_row_ids, rows_on, hidden, rows_residual_, stream_));
      AS_CUDA_TRY(gather_rows(qkv_, qkv_width_, sample_row_ids, rows_on, H * D, rows_q_, stream_));
      residual = rows_residual_;
      last_aa.k_cache = k_cache;
      last_aa.v_cache = v_cache;
    }
    mark(step_op::attention);
    AS_CUDA_TRY(run_attention(last && shape.sampled_only ? last_aa : aa));
    if (add_in_gemm && !w.o_bias) {
      mark(step_op::o);
      if (auto st = gemm_.run(dt_, attn_, rows_on, H * D, w.o, hidden, residual, 1.0f); !st) return st;
      mark(step_op::norm);
      AS_CUDA_TRY(add_rmsnorm(dt_, residual, nullptr, nullptr, w.post_norm, eps, nullptr, rows_on, hidden, x_, stream_));
    } else {
      mark(step_op::o);
      if (auto st = gemm_.run(dt_, attn_, rows_on, H * D, w.o, hidden, delta_); !st) return st;
      mark(step_op::norm);
      AS_CUDA_TRY(add_rmsnorm(dt_, residual, delta_, w.o_bias, w.post_norm, eps, nullptr, rows_on, hidden, x_, stream_));
    }
    if (fused) {
      mark(step_op::gate_up);
      AS_CUDA_TRY(gemv_gate_up_silu(dt_, x_, hidden, w.gate_up, inter, act_, rows_gate_up, stream_, tuning.bulk));
    } else if (gemm_.uses_gemv(rows_on) || !tuning.gate_up_16bit) {
      mark(step_op::gate_up);
      if (auto st = gemm_.run(dt_, x_, rows_on, hidden, w.gate_up, 2 * inter, gate_up_); !st) return st;
      mark(step_op::silu);
      AS_CUDA_TRY(silu_and_mul(dt_, gate_up_, rows_on, inter, act_, stream_));
    } else {  // cuBLAS writes gate_up in dt: half the bytes of fp32 (cuda_tuning::gate_up_16bit)
      mark(step_op::gate_up);
      if (auto st = gemm_.run_act(dt_, x_, rows_on, hidden, w.gate_up, 2 * inter, gate_up_); !st) return st;
      mark(step_op::silu);
      AS_CUDA_TRY(silu_and_mul_act(dt_, gate_up_, rows_on, inter, act_, stream_));
    }
    mark(step_op::down);
    if (auto st = gemm_.run(dt_, act_, rows_on, inter, w.down, hidden, add_in_gemm ? residual : delta_,
                            add_in_gemm ? 1.0f : 0.0f);
        !st) {
      return st;
    }
  }
  const int rows = shape.sample_rows;
  if (rows == 0) return {};
  mark(step_op::norm);
  // The sampled rows: gathered already (sampled_only), else picked from every row's residual.
  AS_CUDA_TRY(add_rmsnorm(dt_, residual, delta, nullptr, m.final_norm, eps,
                          shape.sampled_only ? nullptr : sample_row_ids, rows, hidden, x_, stream_));
  mark(step_op::lm_head);
  if (auto st = gemm_.run(dt_, x_, rows, hidden, m.lm_head, V, logits_); !st) return st;
  if (opts_.keep_logits)
    AS_CUDA_TRY(cudaMemcpyAsync(kept_logits_, logits_, size_t(rows) * V * sizeof(float), cudaMemcpyDeviceToDevice,
                                stream_));
  mark(step_op::sample);
  AS_CUDA_TRY(sample_tokens(logits_, rows, V, at<sample_seq>(meta_, layout_.sample_seqs),
                            at<penalty_token>(meta_, layout_.penalties), at<int32_t>(meta_, layout_.masks), out_,
                            stream_));
  return {};
}

status cuda_executor::launch_decode_graph(int bucket, const launch_shape& shape) {
  auto it = graphs_.find(bucket);
  if (it == graphs_.end()) {
    AS_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    const status st = enqueue_forward(shape);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (!st) {
      if (graph) cudaGraphDestroy(graph);
      return st;
    }
    AS_CUDA_TRY(end);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    AS_CUDA_TRY(inst);
    it = graphs_.emplace(bucket, exec).first;
    log::debug("captured a CUDA graph for decode batch {}", bucket);
  }
  AS_CUDA_TRY(cudaGraphLaunch(it->second, stream_));
  graph_replays_.fetch_add(1);
  return {};
}

}  // namespace actorserve::gpu::cuda
