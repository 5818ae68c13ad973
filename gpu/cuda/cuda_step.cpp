// One step of the CUDA executor: the step staged by step_builder copied into pinned memory and
// to the device, the forward pass (eager, or a CUDA graph per decode bucket), the grammar masks
// (waited for after the forward pass is enqueued) and the sampler, output copies and the
// completion callback.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "config/log.hpp"
#include "gpu/cuda/cuda_executor_impl.hpp"
#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/linear/fp8_gemv_fused.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "gpu/cuda/moe/moe_kernels.hpp"
#include "gpu/cuda/step/step_inputs.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/ops/qk_norm.hpp"
#include "gpu/cuda/parallel/device_collective.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/sampling/sampler.hpp"

namespace actorserve::gpu::cuda {
namespace {

template <class T>
T* at(char* base, size_t offset) { return reinterpret_cast<T*>(base + offset); }

/// Where one attention work list sits in the metadata: the step's, or the last layer's (which
/// has no cascade prefix pieces: prefix_rows 0).
struct work_list_at {
  size_t seqs, items, combines, counts, prefix_rows;
};

/// Copies `plan` into the staging area `h` at `w` (the sequences are copied by the caller): the
/// items, then the cascade prefix pieces after them.
void stage_plan(char* h, const work_list_at& w, const attention_plan& plan) {
  std::memcpy(h + w.items, plan.items.data(), plan.items.size() * sizeof(attn_item));
  if (!plan.prefix_items.empty()) {
    std::memcpy(h + w.items + plan.items.size() * sizeof(attn_item), plan.prefix_items.data(),
                plan.prefix_items.size() * sizeof(attn_item));
    std::memcpy(h + w.prefix_rows, plan.prefix_rows.data(), plan.prefix_rows.size() * sizeof(attn_prefix_row));
  }
  std::memcpy(h + w.combines, plan.combines.data(), plan.combines.size() * sizeof(attn_combine));
  int32_t* counts = at<int32_t>(h, w.counts);
  counts[0] = static_cast<int32_t>(plan.items.size()) - plan.num_decode_items;
  counts[1] = static_cast<int32_t>(plan.combines.size());
  counts[2] = plan.num_decode_items;
  counts[3] = static_cast<int32_t>(plan.prefix_items.size());
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
  a.prefix_rows = w.prefix_rows ? at<attn_prefix_row>(meta, w.prefix_rows) : nullptr;
  a.prefix_grid = w.prefix_rows ? g.prefix : 0;
}

work_list_at step_work(const meta_layout& L) { return {L.seqs, L.items, L.combines, L.counts, L.prefix_rows}; }
work_list_at last_layer_work(const meta_layout& L) {
  return {L.last_seqs, L.last_items, L.last_combines, L.last_counts, 0};
}

}  // namespace

void cuda_executor::submit(step_batch batch, done_fn done) {
  if (!tensor_parallel()) return launch_step(std::move(batch), std::move(done));
  {
    std::lock_guard lock(launch_mu_);
    launch_queue_.emplace_back(std::move(batch), std::move(done));
  }
  launch_cv_.notify_all();
}

void cuda_executor::launcher_loop() {
  for (;;) {
    std::unique_lock lock(launch_mu_);
    launch_cv_.wait(lock, [&] { return launcher_stopping_ || !launch_queue_.empty(); });
    if (launch_queue_.empty()) return;  // stopping, every queued step launched
    auto [batch, done] = std::move(launch_queue_.front());
    launch_queue_.pop_front();
    lock.unlock();
    launch_step(std::move(batch), std::move(done));
  }
}

void cuda_executor::launch_step(step_batch batch, done_fn done) {
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
  // The calling thread's current device becomes this executor's (a tensor-parallel group submits
  // to each shard's device from that shard's thread).
  AS_CUDA_TRY(cudaSetDevice(opts_.device));
  const model_config& c = model_->cfg;
  const int V = info_.vocab_size;
  staged_step& st = staged_;
  if (auto s = builder_->build(b, prev_rows_, st); !s) return s;
  const int bucket = st.bucket, rows_tok = st.rows;
  const bool sampled_only = st.sampled_only;
  p.seq_ids = st.seq_ids;
  p.out_rows = st.out_rows;
  p.num_top = st.num_top;
  p.cascade_seqs = st.plan.cascade_seqs;
  const size_t pairs_offset = (layout_.penalties + st.penalties.size() * sizeof(penalty_token) + 15) & ~size_t(15);
  const size_t total = pairs_offset + st.copy_pairs.size() * sizeof(int32_t);
  if (auto s = ensure_meta_capacity(slot, total); !s) return s;
  if (total > meta_capacity_) {
    AS_CUDA_TRY(cudaFreeAsync(meta_, stream_));
    meta_capacity_ = std::max(total, meta_capacity_ * 2);
    AS_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&meta_), meta_capacity_, stream_));
    for (auto& [bk, g] : graphs_) cudaGraphExecDestroy(g);  // they captured the old buffer
    graphs_.clear();
  }
  char* h = slot.meta;
  const auto put = [&](size_t offset, const auto& v) {
    if (!v.empty()) std::memcpy(h + offset, v.data(), v.size() * sizeof(v[0]));
  };
  put(layout_.ids, st.ids);
  put(layout_.positions, st.positions);
  put(layout_.slots, st.slots);
  put(layout_.token_seqs, st.token_seqs);
  put(layout_.q32, st.q32);
  put(layout_.block_tables, st.block_tables);
  put(layout_.seqs, st.seqs);
  stage_plan(h, step_work(layout_), st.plan);
  if (sampled_only) {
    put(layout_.last_seqs, st.last_seqs);
    stage_plan(h, last_layer_work(layout_), st.last_plan);
  }
  put(layout_.sample_rows, st.sample_rows);
  put(layout_.sample_seqs, st.sample_seqs);
  put(layout_.masks, st.masks);
  put(layout_.penalties, st.penalties);
  put(layout_.previous, st.previous);
  put(pairs_offset, st.copy_pairs);
  const int num_copies = static_cast<int>(st.copy_pairs.size() / 2);
  // Copy the used part of each array.
  const std::pair<size_t, size_t> ranges[] = {
      {layout_.ids, size_t(rows_tok) * 4},
      {layout_.positions, size_t(rows_tok) * 4},
      {layout_.slots, size_t(rows_tok) * 4},
      {layout_.token_seqs, c.mla ? size_t(rows_tok) * 4 : 0},
      {layout_.q32, bucket ? 0 : size_t(rows_tok) * 4},
      {layout_.sample_rows, st.sample_rows.size() * 4},
      {layout_.seqs, st.seqs.size() * sizeof(attn_seq)},
      {layout_.counts, 16},
      {layout_.items, (st.plan.items.size() + st.plan.prefix_items.size()) * sizeof(attn_item)},
      {layout_.prefix_rows, st.plan.prefix_rows.size() * sizeof(attn_prefix_row)},
      {layout_.combines, st.plan.combines.size() * sizeof(attn_combine)},
      {layout_.last_seqs, st.last_seqs.size() * sizeof(attn_seq)},
      {layout_.last_counts, sampled_only ? 16u : 0u},
      {layout_.last_items, st.last_plan.items.size() * sizeof(attn_item)},
      {layout_.last_combines, st.last_plan.combines.size() * sizeof(attn_combine)},
      {layout_.sample_seqs, st.sample_seqs.size() * sizeof(sample_seq)},
      {layout_.block_tables, st.block_tables.size() * 4},
      {layout_.masks, st.masks.size() * 4},
      {layout_.previous, st.previous.size() * 4},
      {layout_.penalties, total - layout_.penalties},
  };
  AS_CUDA_TRY(cudaEventRecord(slot.start, stream_));
  if (!bucket) {
    profile_.begin(p.slot, rows_tok, st.all_decode);
    profile_.mark(step_op::inputs, stream_);
  }
  for (const auto& [off, len] : ranges)
    if (len) AS_CUDA_TRY(cudaMemcpyAsync(meta_ + off, h + off, len, cudaMemcpyHostToDevice, stream_));
  if (num_copies > 0)
    AS_CUDA_TRY(copy_kv_blocks(kv_pool_, at<int32_t>(meta_, pairs_offset), num_copies,
                               num_caches_, cache_stride_, block_bytes_, stream_));
  AS_CUDA_TRY(resolve_previous_tokens(at<int32_t>(meta_, layout_.ids), out_, at<int32_t>(meta_, layout_.previous),
                                      static_cast<int>(st.previous.size() / 2), stream_));
  launch_shape shape;
  shape.sampler = st.grammar.empty();
  shape.tokens = rows_tok;
  shape.absorbed_rows = st.absorbed_rows;
  shape.sample_rows = static_cast<int>(st.sample_rows.size());
  shape.sampled_only = sampled_only;
  if (sampled_only) shape.last_attn = attention_->grids(st.last_plan);
  if (bucket) {
    shape.attn = attention_->decode_graph_grids(bucket, st.cascade);
    profile_.disarm();
    if (auto st = launch_decode_graph(bucket, shape); !st) return st;
  } else {
    shape.attn = attention_->grids(st.plan);
    shape.up_projected = st.up_projected;
    if (auto st = enqueue_forward(shape); !st) return st;
    if (sampled_only) sampled_only_steps_.fetch_add(1);
  }
  if (!shape.sampler && shape.sample_rows > 0)
    if (auto s = enqueue_grammar_sampling(st, slot, shape.sample_rows); !s) return s;
  profile_.mark(step_op::outputs, stream_);
  if (shape.sample_rows > 0) {
    AS_CUDA_TRY(cudaMemcpyAsync(slot.out, out_, size_t(shape.sample_rows) * sizeof(sample_out),
                                cudaMemcpyDeviceToHost, stream_));
    if (opts_.keep_logits)
      AS_CUDA_TRY(cudaMemcpyAsync(slot.logits, kept_logits_, size_t(shape.sample_rows) * V * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_));
  }
  if (slot.expert_counts)
    AS_CUDA_TRY(cudaMemcpyAsync(slot.expert_counts, expert_counts_, expert_counts_seen_.size() * sizeof(uint32_t),
                                cudaMemcpyDeviceToHost, stream_));
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
  aa.partial_o = partial_o_;
  aa.partial_lse = partial_lse_;
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
  ra.attention_factor = m.rope_attention_factor;
  ra.n = n;
  ra.num_heads = H;
  ra.num_kv_heads = KVH;
  ra.head_dim = D;
  ra.kv_fp8 = aa.kv_fp8 = opts_.kv_cache_fp8;
  const cuda_tuning& tuning = opts_.tuning;
  // One token: the qkv and gate/up projections fuse the element-wise kernel after them into their
  // GEMVs (gemv_kernel.hpp for 16-bit weights, fp8_gemv_fused.hpp for FP8 weights with one scale
  // per row), the QKV one writing the 16-bit or FP8 KV cache as rope_kv_write does. A block-scaled
  // FP8 weight (128 x 128 scales) has no fused GEMV, nor has an FP8 weight the FP8 GEMV cannot
  // take (fp8_gemv_supported): their projection (gemm_runner; the block-scaled FP8 GEMV) and the
  // element-wise kernel after it run instead. Qwen3's q/k norm sits between the QKV projection and
  // rope, so its qkv takes the unfused path: the projection into fp32 qkv_, qk_rmsnorm in place
  // (with the bias), then rope_kv_write.
  const bool fused = n == 1 && tuning.fused_decode && hidden % 8 == 0;
  const auto fuses = [&](const device_weight& wt) {  // whether wt's projection takes a fused GEMV
    return !wt.fp8() ||
           (!wt.block_scaled() && fp8_gemv_supported(x_, 1, hidden, static_cast<const uint8_t*>(wt.data)));
  };
  const bool qk_norm = c.qk_norm;
  const bool fused_qkv = fused && !qk_norm && std::all_of(m.layers.begin(), m.layers.end(), [&](const device_layer& l) {
    return l.mla.kv_b_proj != nullptr || fuses(l.qkv);  // latent attention has no qkv
  });
  qk_norm_args na{.qkv = qkv_, .eps = eps, .n = n, .num_heads = H, .num_kv_heads = KVH, .head_dim = D};
  // Prefill tiles copy rope's 16-bit queries in; then rope writes the fp32 q of decode tokens
  // only, and reads the QKV GEMM's output rounded to the activation dtype (half the bytes; not
  // with q/k norm, which normalises the fp32 qkv in place).
  bool qkv16 = false;
  if (q16_ && !fused_qkv && shape.attn.prefill > 0) {
    ra.q16 = q16_;
    ra.q16_scale = prefill_q_scale(aa.scale);
    aa.q16 = q16_;
    if (tuning.q32_decode_only) ra.q32 = at<int32_t>(meta_, layout_.q32);
    qkv16 = qkv16_ != nullptr && !gemm_.uses_gemv(n) && !qk_norm;
    if (qkv16) ra.qkv16 = qkv16_;
  }
  // Batched rows (cuBLAS): o (without a bias) and down add into the residual in the epilogue.
  // Never under tensor parallelism: there o, down and the experts write partial sums, which are
  // summed over the shards (all_reduce below) before they join the residual.
  const bool tp = tensor_parallel();
  const bool add_in_gemm = !tp && !fused && !gemm_.uses_gemv(n) && tuning.residual_gemm;
  // Tensor parallel: delta_'s first `rows` rows become the sum of every shard's, on every shard.
  const auto all_reduce = [&](int rows) -> status {
    if (!tp) return {};
    mark(step_op::all_reduce);
    return opts_.collective->all_reduce_sum(delta_, size_t(rows) * size_t(hidden), stream_);
  };
  // What add_rmsnorm adds to the residual after the MLP (the down projection's output).
  float* const delta = add_in_gemm ? nullptr : delta_;
  // The last layer of a sampled_only step: attention as a decode of the gathered sampled rows.
  attn_launch last_aa = aa;
  if (shape.sampled_only) {
    last_aa.q = rows_q_;
    last_aa.q_stride = H * D;
    last_aa.q16 = nullptr;
    last_aa.older_keys_cached = false;  // a sampled prefill row's keys are all this step's
    use_plan(last_aa, meta_, last_layer_work(layout_), shape.last_attn);
  }
  const int32_t* sample_row_ids = at<int32_t>(meta_, layout_.sample_rows);
  // A dense SwiGLU MLP of width `width` over `rows` rows of x_: out (+)= down(silu(gate) * up).
  const auto dense_mlp = [&](const device_weight& gate_up_w, const device_weight& down_w, int width, int rows,
                             float* out, bool add) -> status {
    if (fused && fuses(gate_up_w)) {
      mark(step_op::gate_up);
      const int per_block = gemm_.gemv_rows_for(2 * width);
      if (gate_up_w.fp8())
        AS_CUDA_TRY(fp8_gemv_gate_up_silu(dt_, x_, hidden, static_cast<const uint8_t*>(gate_up_w.data),
                                          gate_up_w.row_scale, width, act_, per_block, stream_, tuning.bulk));
      else
        AS_CUDA_TRY(gemv_gate_up_silu(dt_, x_, hidden, gate_up_w.data, width, act_, per_block, stream_, tuning.bulk));
      fused_gate_up_gemvs_.fetch_add(1);
    } else if (gemm_.uses_gemv(rows) || !tuning.gate_up_16bit) {
      mark(step_op::gate_up);
      if (auto st = gemm_.run(dt_, x_, rows, hidden, gate_up_w, 2 * width, gate_up_); !st) return st;
      mark(step_op::silu);
      AS_CUDA_TRY(silu_and_mul(dt_, gate_up_, rows, width, act_, stream_));
    } else {  // cuBLAS writes gate_up in dt: half the bytes of fp32 (cuda_tuning::gate_up_16bit)
      mark(step_op::gate_up);
      if (auto st = gemm_.run_act(dt_, x_, rows, hidden, gate_up_w, 2 * width, gate_up_); !st) return st;
      mark(step_op::silu);
      AS_CUDA_TRY(silu_and_mul_act(dt_, gate_up_, rows, width, act_, stream_));
    }
    mark(step_op::down);
    return gemm_.run(dt_, act_, rows, width, down_w, hidden, out, add ? 1.0f : 0.0f);
  };
  // Latent attention's per-row metadata (DeepSeek-V2).
  const mla_step mla_rows{.positions = ra.positions, .slots = ra.slots,
                          .token_seqs = at<int32_t>(meta_, layout_.token_seqs), .block_tables = aa.block_tables,
                          .seqs = at<attn_seq>(meta_, layout_.seqs), .up_projected = shape.up_projected,
                          .absorbed_rows = shape.absorbed_rows};
  // o_proj's input width: H heads of head_dim, or of v_head_dim with latent attention.
  const int attn_width = c.mla ? H * int(c.mla->v_head_dim) : H * D;
  float* residual = residual_;  // the rows past attention: all, or the sampled ones gathered
  int rows_on = n;
  for (size_t l = 0; l < m.layers.size(); ++l) {
    const device_layer& w = m.layers[l];
    char* k_cache = static_cast<char*>(kv_pool_) + (2 * l) * cache_stride_;
    char* v_cache = k_cache + cache_stride_;
    ra.bias = qk_norm ? nullptr : w.qkv_bias;  // qk_rmsnorm adds it before the norm
    na.bias = w.qkv_bias;
    na.q_weight = w.q_norm;
    na.k_weight = w.k_norm;
    ra.k_cache = k_cache;
    ra.v_cache = v_cache;
    aa.k_cache = k_cache;
    aa.v_cache = v_cache;
    ra.k_scale = aa.k_scale = w.k_scale;  // read only with kv_fp8
    ra.v_scale = aa.v_scale = w.v_scale;
    // The previous layer's MLP output joins the residual here (none before the first layer).
    mark(step_op::norm);
    AS_CUDA_TRY(add_rmsnorm(dt_, residual_, l == 0 ? nullptr : delta, nullptr, w.input_norm, eps, nullptr, n, hidden,
                            x_, stream_));
    if (w.mla.kv_b_proj) {  // latent attention: one cache per layer, every row (no sampled_only)
      mark(step_op::latent_attention);
      if (auto st = mla_.run(gemm_, w.mla, x_, n, mla_rows, static_cast<char*>(kv_pool_) + l * cache_stride_,
                             info_.block_size, attn_, stream_);
          !st)
        return st;
    } else {
      if (fused_qkv) {
        mark(step_op::qkv);
        if (w.qkv.fp8())
          AS_CUDA_TRY(fp8_gemv_qkv_rope(dt_, x_, hidden, static_cast<const uint8_t*>(w.qkv.data), w.qkv.row_scale, ra,
                                        stream_, tuning.bulk));
        else
          AS_CUDA_TRY(gemv_qkv_rope(dt_, x_, hidden, w.qkv.data, ra, stream_, tuning.bulk));
        fused_qkv_gemvs_.fetch_add(1);
      } else {
        mark(step_op::qkv);
        if (qkv16) {
          if (auto st = gemm_.run_act(dt_, x_, n, hidden, w.qkv, qkv_width_, qkv16_); !st) return st;
        } else if (auto st = gemm_.run(dt_, x_, n, hidden, w.qkv, qkv_width_, qkv_); !st) {
          return st;
        }
        mark(step_op::rope);
        if (qk_norm) AS_CUDA_TRY(qk_rmsnorm(na, stream_));
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
        last_aa.k_scale = w.k_scale;
        last_aa.v_scale = w.v_scale;
      }
      mark(step_op::attention);
      AS_CUDA_TRY(run_attention(last && shape.sampled_only ? last_aa : aa));
    }
    moe_norm_args post_norm;
    const moe_norm_args* norm_in_router = nullptr;  // the post-attention norm, where the router runs it
    if (add_in_gemm && !w.o_bias) {
      mark(step_op::o);
      if (auto st = gemm_.run(dt_, attn_, rows_on, attn_width, w.o, hidden, residual, 1.0f); !st) return st;
      mark(step_op::norm);
      AS_CUDA_TRY(add_rmsnorm(dt_, residual, nullptr, nullptr, w.post_norm, eps, nullptr, rows_on, hidden, x_, stream_));
    } else {
      mark(step_op::o);
      if (auto st = gemm_.run(dt_, attn_, rows_on, attn_width, w.o, hidden, delta_); !st) return st;
      if (auto st = all_reduce(rows_on); !st) return st;
      // One token of a sparse layer: the router's launch runs this norm (moe_norm_route_gemv).
      if (w.experts.router && moe_.takes_norm(gemm_, w.experts, x_, rows_on)) {
        post_norm = {.residual = residual, .delta = delta_, .bias = w.o_bias, .weight = w.post_norm, .eps = eps,
                     .out = x_};
        norm_in_router = &post_norm;
      } else {
        mark(step_op::norm);
        AS_CUDA_TRY(
            add_rmsnorm(dt_, residual, delta_, w.o_bias, w.post_norm, eps, nullptr, rows_on, hidden, x_, stream_));
      }
    }
    // The FFN's output goes into the residual in the down GEMM's epilogue (add_in_gemm), else
    // into delta_, which the next add_rmsnorm adds (tensor parallel: once summed over the shards).
    float* const ffn_out = add_in_gemm ? residual : delta_;
    if (w.experts.router) {  // a sparse layer: the experts' weighted sum goes where down's output would
      mark(step_op::experts);
      // A decode graph's padding rows (negative slots) are not counted; the gathered sampled rows
      // of a last layer are all real.
      uint32_t* counts = expert_counts_ + size_t(moe_slot_[l]) * size_t(info_.num_experts);
      if (auto st = moe_.run(gemm_, w.experts, x_, rows_on, ffn_out, add_in_gemm, stream_, norm_in_router, counts,
                             rows_on == n ? ra.slots : nullptr);
          !st)
        return st;
      // The shared experts: a dense MLP over every token, added after the routed sum.
      if (w.experts.shared_gate_up)
        if (auto st = dense_mlp(device_weight{w.experts.shared_gate_up}, device_weight{w.experts.shared_down},
                                shared_inter_, rows_on, ffn_out, true);
            !st)
          return st;
    } else if (auto st = dense_mlp(w.gate_up, w.down, inter, rows_on, ffn_out, add_in_gemm); !st) {
      return st;
    }
    if (auto st = all_reduce(rows_on); !st) return st;
  }
  const int rows = shape.sample_rows;
  if (rows == 0) return {};
  mark(step_op::norm);
  // The sampled rows: gathered already (sampled_only), else picked from every row's residual.
  AS_CUDA_TRY(add_rmsnorm(dt_, residual, delta, nullptr, m.final_norm, eps,
                          shape.sampled_only ? nullptr : sample_row_ids, rows, hidden, x_, stream_));
  mark(step_op::lm_head);
  if (tp) {
    if (auto st = sharded_lm_head(rows); !st) return st;
  } else if (auto st = gemm_.run(dt_, x_, rows, hidden, m.lm_head, V, logits_); !st) {
    return st;
  }
  if (opts_.keep_logits)
    AS_CUDA_TRY(cudaMemcpyAsync(kept_logits_, logits_, size_t(rows) * V * sizeof(float), cudaMemcpyDeviceToDevice,
                                stream_));
  if (!shape.sampler) return {};
  mark(step_op::sample);
  AS_CUDA_TRY(sample_tokens(logits_, rows, V, at<sample_seq>(meta_, layout_.sample_seqs),
                            at<penalty_token>(meta_, layout_.penalties), at<int32_t>(meta_, layout_.masks),
                            grammar_masks_, out_, stream_));
  return {};
}

status cuda_executor::sharded_lm_head(int rows) {
  const shard_plan& plan = *model_->plan;
  const int hidden = int(model_->cfg.hidden_size), own = int(model_->cfg.vocab_size), V = info_.vocab_size;
  if (auto st = gemm_.run(dt_, x_, rows, hidden, model_->lm_head, own, shard_logits_); !st) return st;
  profile_.mark(step_op::all_reduce, stream_);
  // Every shard sends rows * vocab_stride_ floats (its packed [rows][slice] first, the rest unread).
  const size_t part = size_t(rows) * size_t(vocab_stride_);
  if (auto st = opts_.collective->all_gather(shard_logits_, part, gathered_logits_, stream_); !st) return st;
  for (int64_t s = 0; s < plan.size(); ++s) {
    const shard_slice vocab = plan.vocab(s);
    const size_t width = size_t(vocab.size()) * sizeof(float);
    AS_CUDA_TRY(cudaMemcpy2DAsync(logits_ + vocab.begin, size_t(V) * sizeof(float), gathered_logits_ + s * part,
                                  width, width, size_t(rows), cudaMemcpyDeviceToDevice, stream_));
  }
  return {};
}

status cuda_executor::enqueue_grammar_sampling(const staged_step& st, host_slot& slot, int rows) {
  const int V = info_.vocab_size;
  const size_t W = size_t(grammar_mask_words(V));
  // The forward pass runs meanwhile (the query hands the enqueued work to the device now; its
  // "not ready" is no error); a mask planned ahead is filled when the step before this one
  // completes, by the engine that reads its result.
  if (cudaStreamQuery(stream_) == cudaErrorNotReady) (void)cudaGetLastError();
  for (size_t k = 0; k < st.grammar.size(); ++k) {
    uint32_t* dst = slot.grammar + k * W;
    const std::vector<uint32_t>* words = st.grammar[k]->wait();
    if (!words) {  // abandoned: the sampling goes on unconstrained
      std::fill(dst, dst + W, ~0u);
      continue;
    }
    // Words past the grammar's vocabulary (a padded embedding) allow nothing, as on the CPU.
    const size_t n = std::min(words->size(), W);
    std::copy(words->begin(), words->begin() + n, dst);
    std::fill(dst + n, dst + W, 0u);
  }
  profile_.mark(step_op::sample, stream_);
  AS_CUDA_TRY(cudaMemcpyAsync(grammar_masks_, slot.grammar, st.grammar.size() * W * sizeof(uint32_t),
                              cudaMemcpyHostToDevice, stream_));
  AS_CUDA_TRY(sample_tokens(logits_, rows, V, at<sample_seq>(meta_, layout_.sample_seqs),
                            at<penalty_token>(meta_, layout_.penalties), at<int32_t>(meta_, layout_.masks),
                            grammar_masks_, out_, stream_));
  return {};
}

status cuda_executor::launch_decode_graph(int bucket, const launch_shape& shape) {
  // A graph per bucket, sampler or not, and cascade or not (a cascade graph launches the prefix
  // pieces and the separate merge; with no prefix pieces staged they find no work).
  const int key = 4 * bucket + (shape.attn.prefix > 0 ? 2 : 0) + (shape.sampler ? 0 : 1);
  auto it = graphs_.find(key);
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
    it = graphs_.emplace(key, exec).first;
    log::debug("captured a CUDA graph for decode batch {}{}{}", bucket, shape.sampler ? "" : " without the sampler",
               shape.attn.prefix > 0 ? " with cascade attention" : "");
  }
  AS_CUDA_TRY(cudaGraphLaunch(it->second, stream_));
  graph_replays_.fetch_add(1);
  return {};
}

}  // namespace actorserve::gpu::cuda
