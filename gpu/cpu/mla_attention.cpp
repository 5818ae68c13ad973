#include "gpu/cpu/mla_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "config/check.hpp"
#include "gpu/cpu/kernels.hpp"
#include "gpu/model/fp8.hpp"
#include "gpu/model/rope.hpp"
#include "gpu/model/softmax.hpp"

namespace actorserve::gpu::cpu {
namespace {

constexpr int64_t attn_chunk = 16;   ///< query tokens per attention work item
// NOTE: transformers builds q_a_layernorm and kv_a_layernorm with DeepseekV2RMSNorm's default eps,
// not config.rms_norm_eps.
constexpr float latent_norm_eps = 1e-6f;

}  // namespace

const char* to_string(mla_form f) {
  switch (f) {
    case mla_form::automatic: return "automatic";
    case mla_form::up_projected: return "up_projected";
    case mla_form::absorbed: return "absorbed";
  }
  return "?";
}

double mla_form_cost(const mla_config& m, mla_form form, int64_t num_new, int64_t context) {
  const double n = static_cast<double>(num_new), c = static_cast<double>(context);
  const double r = static_cast<double>(m.kv_lora_rank), dn = static_cast<double>(m.qk_nope_head_dim);
  const double dr = static_cast<double>(m.qk_rope_head_dim), dv = static_cast<double>(m.v_head_dim);
  const double pairs = n * c - n * (n - 1) / 2;
  AS_CHECK(form != mla_form::automatic, "mla_form_cost needs a concrete form");
  if (form == mla_form::up_projected) return c * r * (dn + dv) + pairs * (dn + dr + dv);
  return n * r * (dn + dv) + pairs * (2 * r + dr);
}

mla_form cheaper_mla_form(const mla_config& m, int64_t num_new, int64_t context) {
  return mla_form_cost(m, mla_form::absorbed, num_new, context) < mla_form_cost(m, mla_form::up_projected, num_new, context)
             ? mla_form::absorbed
             : mla_form::up_projected;
}

mla_attention::mla_attention(const model_config& cfg, const std::vector<layer_weights_f32>& layers, mla_form form)
    : m_(*cfg.mla), hidden_(cfg.hidden_size), num_heads_(cfg.num_heads), form_(form) {
  const double qk = static_cast<double>(m_.qk_head_dim());
  scale_ = static_cast<float>(yarn_softmax_scale_factor(cfg.rope) / std::sqrt(qk));
  // W_UK of head h: kv_b_proj rows h*(dn+dv) .. +dn, each of r floats; stored transposed so that
  // q_lat[c] = dot(uk_t[h][c], q_nope[h]) reads two contiguous rows.
  const size_t r = static_cast<size_t>(m_.kv_lora_rank), dn = static_cast<size_t>(m_.qk_nope_head_dim);
  const size_t per_head = dn + static_cast<size_t>(m_.v_head_dim), heads = static_cast<size_t>(num_heads_);
  for (const layer_weights_f32& l : layers) {
    std::vector<float> uk(heads * r * dn);
    for (size_t h = 0; h < heads; ++h)
      for (size_t d = 0; d < dn; ++d)
        for (size_t c = 0; c < r; ++c) uk[(h * r + c) * dn + d] = l.mla->kv_b_proj[(h * per_head + d) * r + c];
    uk_t_.push_back(std::move(uk));
  }
}

void mla_attention::project(thread_pool& pool, const mla_weights_f32& w, const step_tokens& step, const float* xn) {
  const size_t T = step.num_tokens(), h = static_cast<size_t>(hidden_), heads = static_cast<size_t>(num_heads_);
  const size_t r = static_cast<size_t>(m_.kv_lora_rank), dn = static_cast<size_t>(m_.qk_nope_head_dim);
  const size_t dr = static_cast<size_t>(m_.qk_rope_head_dim), qk = dn + dr, half = dr / 2;
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
  q_.resize(T * heads * qk);
  if (m_.q_lora_rank > 0) {
    const size_t ql = static_cast<size_t>(m_.q_lora_rank);
    q_a_.resize(T * ql);
    matmul(pool, xn, T, h, w.q_a_proj.data(), ql, bias(w.q_a_bias), q_a_.data());
    rms_norm(q_a_.data(), w.q_a_norm.data(), T, ql, latent_norm_eps, q_a_.data());
    matmul(pool, q_a_.data(), T, ql, w.q_b_proj.data(), heads * qk, nullptr, q_.data());
  } else {
    matmul(pool, xn, T, h, w.q_proj.data(), heads * qk, nullptr, q_.data());
  }
  kv_a_.resize(T * (r + dr));
  matmul(pool, xn, T, h, w.kv_a_proj.data(), r + dr, bias(w.kv_a_bias), kv_a_.data());
  for (size_t t = 0; t < T; ++t) {
    float* row = &kv_a_[t * (r + dr)];
    rms_norm(row, w.kv_a_norm.data(), 1, r, latent_norm_eps, row);
    const float* cos_t = step.cos + t * half;
    const float* sin_t = step.sin + t * half;
    apply_rope_interleaved(row + r, cos_t, sin_t, static_cast<int64_t>(half));
    for (size_t i = 0; i < heads; ++i) apply_rope_interleaved(&q_[(t * heads + i) * qk + dn], cos_t, sin_t, static_cast<int64_t>(half));
  }
}

void mla_attention::write_latents(paged_kv_cache& cache, int64_t layer, const step_tokens& step) {
  const size_t width = static_cast<size_t>(m_.cache_dim());
  const int64_t bs = cache.block_size();
  for (size_t t = 0; t < step.num_tokens(); ++t) {
    const int64_t pos = step.pos[t];
    const int64_t block = step.seqs[static_cast<size_t>(step.seq_of[t])].block_table[static_cast<size_t>(pos / bs)];
    float* row = cache.latent(layer, block) + static_cast<size_t>(pos % bs) * width;
    std::memcpy(row, &kv_a_[t * width], width * sizeof(float));
    if (!fp8_scale_.empty())
      round_through_e4m3(row, static_cast<int64_t>(width), fp8_scale_[static_cast<size_t>(layer)]);
  }
}

void mla_attention::attend_absorbed(thread_pool& pool, paged_kv_cache& cache, int64_t layer, const mla_weights_f32& w,
                                    const step_tokens& step, const std::vector<work_item>& items, float* out) {
  const size_t heads = static_cast<size_t>(num_heads_), r = static_cast<size_t>(m_.kv_lora_rank);
  const size_t dn = static_cast<size_t>(m_.qk_nope_head_dim), dr = static_cast<size_t>(m_.qk_rope_head_dim);
  const size_t dv = static_cast<size_t>(m_.v_head_dim), qk = dn + dr, width = r + dr;
  const size_t per_head = dn + dv;
  const int64_t bs = cache.block_size();
  const std::vector<float>& uk_t = uk_t_[static_cast<size_t>(layer)];
  // NOTE: W_UV is kv_b_proj's value rows as stored (each of r floats), so it needs no copy.
  const std::vector<float>& kv_b = w.kv_b_proj;
  pool.parallel_for(items.size(), [&](size_t i0, size_t i1) {
    std::vector<float> scores, q_lat(r), o_lat(r);
    for (size_t it = i0; it < i1; ++it) {
      const work_item& item = items[it];
      const forward_seq& seq = step.seqs[static_cast<size_t>(item.seq)];
      const size_t head = static_cast<size_t>(item.head);
      const float* uk = &uk_t[head * r * dn];
      for (int64_t t = item.t_begin; t < item.t_end; ++t) {
        const size_t tt = static_cast<size_t>(t);
        const int64_t pos = step.pos[tt];
        const float* q_nope = &q_[(tt * heads + head) * qk];
        const float* q_pe = q_nope + dn;
        for (size_t c = 0; c < r; ++c) q_lat[c] = dot(uk + c * dn, q_nope, dn);
        scores.resize(static_cast<size_t>(pos + 1));
        for (int64_t j = 0; j <= pos; ++j) {
          const float* row = cache.latent(layer, seq.block_table[static_cast<size_t>(j / bs)]) +
                             static_cast<size_t>(j % bs) * width;
          scores[static_cast<size_t>(j)] = (dot(q_lat.data(), row, r) + dot(q_pe, row + r, dr)) * scale_;
        }
        const float inv_sum = exp_shifted(scores.data(), scores.size(), scores.data());
        std::fill(o_lat.begin(), o_lat.end(), 0.0f);
        for (int64_t j = 0; j <= pos; ++j) {
          const float* row = cache.latent(layer, seq.block_table[static_cast<size_t>(j / bs)]) +
                             static_cast<size_t>(j % bs) * width;
          axpy(o_lat.data(), scores[static_cast<size_t>(j)] * inv_sum, row, r);
        }
        float* o = out + (tt * heads + head) * dv;
        for (size_t e = 0; e < dv; ++e) o[e] = dot(&kv_b[(head * per_head + dn + e) * r], o_lat.data(), r);
      }
    }
  });
}

void mla_attention::attend_up_projected(thread_pool& pool, paged_kv_cache& cache, int64_t layer,
                                        const mla_weights_f32& w, const step_tokens& step, size_t s, float* out) {
  const size_t heads = static_cast<size_t>(num_heads_), r = static_cast<size_t>(m_.kv_lora_rank);
  const size_t dn = static_cast<size_t>(m_.qk_nope_head_dim), dr = static_cast<size_t>(m_.qk_rope_head_dim);
  const size_t dv = static_cast<size_t>(m_.v_head_dim), qk = dn + dr, width = r + dr, per_head = dn + dv;
  const int64_t bs = cache.block_size();
  const forward_seq& seq = step.seqs[s];
  const int64_t n = static_cast<int64_t>(seq.tokens.size()), context = seq.num_computed + n;
  // The context's latents, cached prefix and this step's tokens alike, expanded by kv_b_proj.
  context_.resize(static_cast<size_t>(context) * r);
  for (int64_t j = 0; j < context; ++j)
    std::memcpy(&context_[static_cast<size_t>(j) * r],
                cache.latent(layer, seq.block_table[static_cast<size_t>(j / bs)]) + static_cast<size_t>(j % bs) * width,
                r * sizeof(float));
  expanded_.resize(static_cast<size_t>(context) * heads * per_head);
  matmul(pool, context_.data(), static_cast<size_t>(context), r, w.kv_b_proj.data(), heads * per_head, nullptr,
         expanded_.data());
  std::vector<work_item> items;
  const int64_t first = step.seq_start[s];
  for (int32_t h = 0; h < num_heads_; ++h)
    for (int64_t b = 0; b < n; b += attn_chunk)
      items.push_back({static_cast<int32_t>(s), h, first + b, first + std::min(n, b + attn_chunk)});
  pool.parallel_for(items.size(), [&](size_t i0, size_t i1) {
    std::vector<float> scores;
    for (size_t it = i0; it < i1; ++it) {
      const work_item& item = items[it];
      const size_t head = static_cast<size_t>(item.head);
      for (int64_t t = item.t_begin; t < item.t_end; ++t) {
        const size_t tt = static_cast<size_t>(t);
        const int64_t pos = step.pos[tt];
        const float* q_nope = &q_[(tt * heads + head) * qk];
        const float* q_pe = q_nope + dn;
        scores.resize(static_cast<size_t>(pos + 1));
        for (int64_t j = 0; j <= pos; ++j) {
          const float* k_nope = &expanded_[(static_cast<size_t>(j) * heads + head) * per_head];
          const float* k_pe = cache.latent(layer, seq.block_table[static_cast<size_t>(j / bs)]) +
                              static_cast<size_t>(j % bs) * width + r;
          scores[static_cast<size_t>(j)] = (dot(q_nope, k_nope, dn) + dot(q_pe, k_pe, dr)) * scale_;
        }
        const float inv_sum = exp_shifted(scores.data(), scores.size(), scores.data());
        float* o = out + (tt * heads + head) * dv;
        std::fill(o, o + dv, 0.0f);
        for (int64_t j = 0; j <= pos; ++j)
          axpy(o, scores[static_cast<size_t>(j)] * inv_sum, &expanded_[(static_cast<size_t>(j) * heads + head) * per_head + dn],
               dv);
      }
    }
  });
}

void mla_attention::forward(thread_pool& pool, paged_kv_cache& cache, int64_t layer, const mla_weights_f32& w,
                            const step_tokens& step, const float* xn, float* out) {
  project(pool, w, step, xn);
  write_latents(cache, layer, step);
  // Each sequence in its form; the absorbed ones share one pass over the pool.
  std::vector<work_item> absorbed;
  std::vector<size_t> up_projected;
  for (size_t s = 0; s < step.seqs.size(); ++s) {
    const forward_seq& seq = step.seqs[s];
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    const mla_form form = form_ == mla_form::automatic ? cheaper_mla_form(m_, n, seq.num_computed + n) : form_;
    if (form == mla_form::up_projected) {
      up_projected.push_back(s);
      continue;
    }
    const int64_t first = step.seq_start[s];
    for (int32_t h = 0; h < num_heads_; ++h)
      for (int64_t b = 0; b < n; b += attn_chunk)
        absorbed.push_back({static_cast<int32_t>(s), h, first + b, first + std::min(n, b + attn_chunk)});
  }
  // Longest work first: a long prefill's late chunks attend to the most keys.
  std::stable_sort(absorbed.begin(), absorbed.end(), [&](const work_item& a, const work_item& b) {
    return step.pos[static_cast<size_t>(a.t_end - 1)] > step.pos[static_cast<size_t>(b.t_end - 1)];
  });
  attend_absorbed(pool, cache, layer, w, step, absorbed, out);
  for (size_t s : up_projected) attend_up_projected(pool, cache, layer, w, step, s, out);
}

}  // namespace actorserve::gpu::cpu
