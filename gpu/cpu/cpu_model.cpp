#include "gpu/cpu/cpu_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gpu/cpu/kernels.hpp"
#include "gpu/model/fp8.hpp"
#include "gpu/model/rope.hpp"
#include "gpu/model/softmax.hpp"

namespace actorserve::gpu::cpu {
namespace {
constexpr int64_t attn_chunk = 16;   ///< query tokens per attention work item
}

cpu_model::cpu_model(model_config cfg, model_weights_f32 weights, int64_t vocab_begin, mla_form form)
    : cfg_(std::move(cfg)), w_(std::move(weights)), vocab_begin_(vocab_begin) {
  if (!rope_depends_on_length(cfg_.rope)) static_inv_freq_ = model_rope_inv_freq(cfg_);
  rope_scale_ = static_cast<float>(rope_attention_factor(cfg_.rope));
  if (cfg_.moe) moe_.emplace(*cfg_.moe, cfg_.hidden_size);
  for (size_t l = 0; l < w_.layers.size(); ++l)
    if (w_.layers[l].moe) moe_layers_.push_back(static_cast<int32_t>(l));
  if (cfg_.mla) mla_.emplace(cfg_, w_.layers, form);
}

void cpu_model::set_fp8_kv_scales(std::vector<float> k_scales, std::vector<float> v_scales) {
  if (mla_) {  // one latent row a token: the layer's k_scale covers it
    mla_->set_fp8_scales(std::move(k_scales));
    return;
  }
  k_scale_ = std::move(k_scales);
  v_scale_ = std::move(v_scales);
}

void cpu_model::begin_step(std::span<const forward_seq> seqs, const cascade_plan& cascade) {
  expert_tokens_.assign(moe_layers_.size() * (cfg_.moe ? static_cast<size_t>(cfg_.moe->num_experts) : 0), 0);
  const int64_t half = cfg_.head_dim / 2;
  tok_seq_.clear();
  tok_pos_.clear();
  seq_start_.clear();
  items_.clear();
  prefix_groups_.clear();
  prefix_items_.clear();
  cascade_slot_.assign(seqs.size(), -1);
  if (!mla_) {
    int32_t slots = 0;
    for (const cascade_group& g : cascade.groups) {
      const auto& first = seqs[static_cast<size_t>(g.seqs.front())];
      prefix_groups_.push_back({first.block_table.first(static_cast<size_t>(g.num_prefix_blocks)), g.seqs, slots});
      for (int32_t s : g.seqs) cascade_slot_[static_cast<size_t>(s)] = slots++;
      for (int32_t h = 0; h < cfg_.num_kv_heads; ++h)
        prefix_items_.push_back({static_cast<int32_t>(prefix_groups_.size() - 1), h});
    }
    prefix_out_.resize(static_cast<size_t>(slots * cfg_.num_heads * cfg_.head_dim));
    prefix_stats_.resize(static_cast<size_t>(slots * cfg_.num_heads));
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    seq_start_.push_back(static_cast<int64_t>(tok_seq_.size()));
    for (size_t i = 0; i < seqs[s].tokens.size(); ++i) {
      tok_seq_.push_back(static_cast<int32_t>(s));
      tok_pos_.push_back(seqs[s].num_computed + static_cast<int64_t>(i));
    }
  }
  const size_t T = tok_seq_.size();
  cos_.resize(T * half);
  sin_.resize(T * half);
  std::vector<float> dyn_freq;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t n = static_cast<int64_t>(seqs[s].tokens.size());
    const int64_t first = seq_start_[s];
    const std::vector<float>* inv = &static_inv_freq_;
    if (static_inv_freq_.empty()) {
      dyn_freq = model_rope_inv_freq(cfg_, seqs[s].num_computed + n);
      inv = &dyn_freq;
    }
    for (int64_t t = first; t < first + n; ++t)
      rope_cos_sin(*inv, tok_pos_[t], &cos_[t * half], &sin_[t * half], rope_scale_);
    if (mla_) continue;   // latent attention makes its own work items
    // A grouped decode attends to its own suffix here; the prefix came from its group's pass.
    const int64_t prefix =
        cascade_slot_[s] < 0 ? 0 : cascade.groups[static_cast<size_t>(cascade.group_of[s])].num_prefix_blocks;
    for (int32_t h = 0; h < cfg_.num_heads; ++h)
      for (int64_t b = 0; b < n; b += attn_chunk)
        items_.push_back({static_cast<int32_t>(s), h, first + b, first + std::min(n, b + attn_chunk), prefix});
  }
  // Longest work first: a long prefill's late chunks attend to the most keys.
  std::stable_sort(items_.begin(), items_.end(),
                   [&](const attn_item& a, const attn_item& b) { return tok_pos_[a.t_end - 1] > tok_pos_[b.t_end - 1]; });
}

void cpu_model::write_kv(paged_kv_cache& cache, int64_t layer, std::span<const forward_seq> seqs) {
  const int64_t hd = cfg_.head_dim, kvh = cfg_.num_kv_heads, bs = cache.block_size();
  for (size_t t = 0; t < tok_seq_.size(); ++t) {
    const int64_t pos = tok_pos_[t];
    const int64_t block = seqs[tok_seq_[t]].block_table[pos / bs];
    const int64_t slot = pos % bs;
    for (int64_t h = 0; h < kvh; ++h) {
      std::memcpy(cache.k(layer, block, h) + slot * hd, &k_[(t * kvh + h) * hd], hd * sizeof(float));
      std::memcpy(cache.v(layer, block, h) + slot * hd, &v_[(t * kvh + h) * hd], hd * sizeof(float));
      if (!k_scale_.empty()) {
        round_through_e4m3(cache.k(layer, block, h) + slot * hd, hd, k_scale_[static_cast<size_t>(layer)]);
        round_through_e4m3(cache.v(layer, block, h) + slot * hd, hd, v_scale_[static_cast<size_t>(layer)]);
      }
    }
  }
}

void cpu_model::shared_prefix_attention(thread_pool& pool, paged_kv_cache& cache, int64_t layer) {
  const int64_t hd = cfg_.head_dim, nh = cfg_.num_heads, group = cfg_.num_heads / cfg_.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  pool.parallel_for(prefix_items_.size(), [&](size_t i0, size_t i1) {
    std::vector<const float*> q;
    std::vector<float> out;
    std::vector<softmax_stats> stats;
    for (size_t it = i0; it < i1; ++it) {
      const prefix_item& item = prefix_items_[it];
      const prefix_group& g = prefix_groups_[static_cast<size_t>(item.group)];
      // Rows: every member's decode token under each query head of this KV head.
      q.clear();
      for (int32_t s : g.seqs)
        for (int64_t h = item.kv_head * group; h < (item.kv_head + 1) * group; ++h)
          q.push_back(&q_[(seq_start_[static_cast<size_t>(s)] * nh + h) * hd]);
      out.resize(q.size() * static_cast<size_t>(hd));
      stats.resize(q.size());
      shared_prefix_pass(cache, layer, item.kv_head, g.blocks, q, scale, out.data(), stats.data());
      for (size_t m = 0, r = 0; m < g.seqs.size(); ++m)
        for (int64_t h = item.kv_head * group; h < (item.kv_head + 1) * group; ++h, ++r) {
          const size_t row = (static_cast<size_t>(g.first_slot) + m) * static_cast<size_t>(nh) + static_cast<size_t>(h);
          std::copy_n(&out[r * static_cast<size_t>(hd)], hd, &prefix_out_[row * static_cast<size_t>(hd)]);
          prefix_stats_[row] = stats[r];
        }
    }
  });
}

void cpu_model::attention_layer(thread_pool& pool, paged_kv_cache& cache, int64_t layer,
                                std::span<const forward_seq> seqs) {
  const int64_t hd = cfg_.head_dim, nh = cfg_.num_heads, group = cfg_.num_heads / cfg_.num_kv_heads;
  const int64_t bs = cache.block_size();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t window = cfg_.sliding_window.value_or(0);
  if (!prefix_items_.empty()) shared_prefix_attention(pool, cache, layer);
  pool.parallel_for(items_.size(), [&](size_t i0, size_t i1) {
    std::vector<float> scores;
    for (size_t it = i0; it < i1; ++it) {
      const attn_item& item = items_[it];
      const forward_seq& seq = seqs[item.seq];
      const int64_t kv_head = item.head / group;
      for (int64_t t = item.t_begin; t < item.t_end; ++t) {
        const int64_t pos = tok_pos_[t];
        const int64_t lo = std::max(window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0, item.prefix_blocks * bs);
        const float* q = &q_[(t * nh + item.head) * hd];
        scores.resize(static_cast<size_t>(pos + 1 - lo));
        for (int64_t j = lo; j <= pos; ++j) {
          const float* kj = cache.k(layer, seq.block_table[j / bs], kv_head) + (j % bs) * hd;
          scores[j - lo] = dot(q, kj, static_cast<size_t>(hd)) * scale;
        }
        // A grouped decode's suffix keeps its largest score for the merge.
        const float suffix_max = item.prefix_blocks > 0 ? *std::max_element(scores.begin(), scores.end()) : 0.0f;
        const float inv_sum = exp_shifted(scores.data(), scores.size(), scores.data());
        float* out = &attn_[(t * nh + item.head) * hd];
        std::fill(out, out + hd, 0.0f);
        for (int64_t j = lo; j <= pos; ++j) {
          const float* vj = cache.v(layer, seq.block_table[j / bs], kv_head) + (j % bs) * hd;
          axpy(out, scores[j - lo] * inv_sum, vj, static_cast<size_t>(hd));
        }
        if (item.prefix_blocks == 0) continue;
        // Cascade: merge the group's prefix partial with this suffix by their log-sum-exp.
        const size_t row = static_cast<size_t>(cascade_slot_[static_cast<size_t>(item.seq)] * nh + item.head);
        softmax_stats merged{suffix_max, 1.0f / inv_sum};
        merge_partial(out, merged, &prefix_out_[row * static_cast<size_t>(hd)], prefix_stats_[row],
                      static_cast<size_t>(hd));
      }
    }
  });
}

void cpu_model::dense_attention(thread_pool& pool, paged_kv_cache& cache, int64_t layer,
                                std::span<const forward_seq> seqs) {
  const layer_weights_f32& L = w_.layers[static_cast<size_t>(layer)];
  const size_t T = tok_seq_.size(), h = static_cast<size_t>(cfg_.hidden_size), hd = static_cast<size_t>(cfg_.head_dim);
  const size_t nh = static_cast<size_t>(cfg_.num_heads), kvh = static_cast<size_t>(cfg_.num_kv_heads);
  const size_t qd = nh * hd, kvd = kvh * hd, half = hd / 2;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  q_.resize(T * qd);
  k_.resize(T * kvd);
  v_.resize(T * kvd);
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
  matmul(pool, xn_.data(), T, h, L.q_proj.data(), qd, bias(L.q_bias), q_.data());
  matmul(pool, xn_.data(), T, h, L.k_proj.data(), kvd, bias(L.k_bias), k_.data());
  matmul(pool, xn_.data(), T, h, L.v_proj.data(), kvd, bias(L.v_bias), v_.data());
  if (cfg_.qk_norm) {   // Qwen3: RMSNorm over each head of q and k, before rope
    rms_norm(q_.data(), L.q_norm.data(), T * nh, hd, eps, q_.data());
    rms_norm(k_.data(), L.k_norm.data(), T * kvh, hd, eps, k_.data());
  }
  for (size_t t = 0; t < T; ++t) {
    for (size_t i = 0; i < nh; ++i) apply_rope(&q_[(t * nh + i) * hd], &cos_[t * half], &sin_[t * half], half);
    for (size_t i = 0; i < kvh; ++i) apply_rope(&k_[(t * kvh + i) * hd], &cos_[t * half], &sin_[t * half], half);
  }
  write_kv(cache, layer, seqs);
  attention_layer(pool, cache, layer, seqs);
}

void cpu_model::embed(std::span<const forward_seq> seqs, float* out) const {
  const size_t h = static_cast<size_t>(cfg_.hidden_size);
  const int64_t vocab_end = vocab_begin_ + cfg_.vocab_size;
  size_t t = 0;
  for (const auto& seq : seqs)
    for (int32_t id : seq.tokens) {
      float* row = out + t++ * h;
      if (id >= vocab_begin_ && id < vocab_end)
        std::memcpy(row, &w_.embed_tokens[static_cast<size_t>(id - vocab_begin_) * h], h * sizeof(float));
      else
        std::fill(row, row + h, 0.0f);
    }
}

void cpu_model::attention(thread_pool& pool, paged_kv_cache& cache, int64_t layer, std::span<const forward_seq> seqs,
                          const float* x, float* out) {
  const layer_weights_f32& L = w_.layers[static_cast<size_t>(layer)];
  const size_t T = tok_seq_.size(), h = static_cast<size_t>(cfg_.hidden_size);
  // What the heads hand to o_proj: num_heads x v_head_dim for latent attention, else x head_dim.
  const size_t attn_width =
      static_cast<size_t>(cfg_.num_heads * (cfg_.mla ? cfg_.mla->v_head_dim : cfg_.head_dim));
  xn_.resize(T * h);
  attn_.resize(T * attn_width);
  rms_norm(x, L.input_norm.data(), T, h, static_cast<float>(cfg_.rms_norm_eps), xn_.data());
  if (L.mla) {
    const step_tokens step{seqs, tok_seq_, tok_pos_, seq_start_, cos_.data(), sin_.data()};
    mla_->forward(pool, cache, layer, *L.mla, step, xn_.data(), attn_.data());
  } else {
    dense_attention(pool, cache, layer, seqs);
  }
  matmul(pool, attn_.data(), T, attn_width, L.o_proj.data(), h, L.o_bias.empty() ? nullptr : L.o_bias.data(), out);
}

void cpu_model::ffn(thread_pool& pool, int64_t layer, const float* x, float* out) {
  const layer_weights_f32& L = w_.layers[static_cast<size_t>(layer)];
  const size_t T = tok_seq_.size(), h = static_cast<size_t>(cfg_.hidden_size);
  const size_t inter = static_cast<size_t>(cfg_.intermediate_size);
  xn_.resize(T * h);
  rms_norm(x, L.post_norm.data(), T, h, static_cast<float>(cfg_.rms_norm_eps), xn_.data());
  if (L.moe) {
    // The sparse layers are in order: this one's counters follow those of the layers before it.
    const auto slot = std::lower_bound(moe_layers_.begin(), moe_layers_.end(), static_cast<int32_t>(layer));
    const auto experts = static_cast<size_t>(cfg_.moe->num_experts);
    moe_->forward(pool, *L.moe, xn_.data(), T, out,
                  &expert_tokens_[static_cast<size_t>(slot - moe_layers_.begin()) * experts]);
    return;
  }
  gate_.resize(T * inter);
  up_.resize(T * inter);
  swiglu_mlp(pool, xn_.data(), T, h, L.gate_proj.data(), L.up_proj.data(), L.down_proj.data(), inter, gate_.data(),
             up_.data(), out);
}

void cpu_model::lm_head(thread_pool& pool, const float* x, std::span<const size_t> rows, float* out) {
  const size_t h = static_cast<size_t>(cfg_.hidden_size);
  xn_.resize(std::max(xn_.size(), rows.size() * h));
  for (size_t r = 0; r < rows.size(); ++r)
    rms_norm(x + rows[r] * h, w_.final_norm.data(), 1, h, static_cast<float>(cfg_.rms_norm_eps), &xn_[r * h]);
  matmul(pool, xn_.data(), rows.size(), h, w_.lm_head_data(), static_cast<size_t>(cfg_.vocab_size), nullptr, out);
}

}  // namespace actorserve::gpu::cpu
