#pragma once
/// DeepSeek-V2's multi-head latent attention on the CPU, in fp32, over the latent KV cache (per
/// token and layer: c_kv = kv_a_layernorm(kv_a_proj(x)[:r]) and k_pe = rope(kv_a_proj(x)[r:])).
/// Two forms compute the same function (docs/mla.md):
///
///   up-projected: kv_b_proj expands every cached c_kv into per-head k_nope and v; each head
///                 attends with q = [q_nope, q_pe] over keys [k_nope, k_pe] (transformers' way);
///   absorbed:     W_UK (kv_b_proj's key rows) is absorbed into the query, q_lat = W_UK^T q_nope,
///                 each head attends over the cache itself (scores q_lat . c_kv + q_pe . k_pe),
///                 and W_UV (its value rows) maps the weighted latent sum to the head's output.
///
/// Both use the softmax scale qk_head_dim^-0.5 times YaRN's mscale(factor, mscale_all_dim)^2.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "config/model_config.hpp"
#include "gpu/cpu/kv_cache.hpp"
#include "gpu/cpu/step_tokens.hpp"
#include "gpu/cpu/thread_pool.hpp"
#include "gpu/model/model_weights.hpp"

namespace actorserve::gpu::cpu {

/// Which form computes latent attention.
enum class mla_form {
  automatic,      ///< per sequence of each step, the cheaper one (cheaper_mla_form)
  up_projected,
  absorbed,
};

/// "automatic", "up_projected" or "absorbed".
const char* to_string(mla_form f);

/// Multiply-adds per head of one sequence's attention in a form (the form must not be automatic):
/// `num_new` queries at the end of `context` tokens (the new ones included).
///   up-projected: context * r * (dn + dv)      expanding the latents of the whole context
///                 + pairs * (dn + dr + dv)     scores over [k_nope, k_pe], weighted sum of v
///   absorbed:     num_new * r * (dn + dv)      q_nope -> q_lat and the latent sum -> v
///                 + pairs * (2r + dr)          scores over [c_kv, k_pe], weighted sum of c_kv
/// where pairs = the (query, key) pairs causal attention visits.
double mla_form_cost(const mla_config& m, mla_form form, int64_t num_new, int64_t context);

/// The cheaper of the two forms for that sequence (up-projected on a tie). A decode step is
/// cheaper absorbed (it reads r + dr floats a key instead of expanding the context); a prefill
/// without cached tokens is cheaper up-projected whenever 2r > dn + dv (DeepSeek-V2: 1024 > 256).
mla_form cheaper_mla_form(const mla_config& m, int64_t num_new, int64_t context);

class mla_attention {
 public:
  /// Keeps what it needs of `cfg` and computes each layer's absorbed W_UK^T from its kv_b_proj.
  mla_attention(const model_config& cfg, const std::vector<layer_weights_f32>& layers, mla_form form);

  /// One layer for the step's tokens: `xn` [T][hidden] (normalised input) in, `out` [T][H * dv]
  /// (the heads' outputs, before o_proj). Writes the step's latents into `cache` first.
  void forward(thread_pool& pool, paged_kv_cache& cache, int64_t layer, const mla_weights_f32& w,
               const step_tokens& step, const float* xn, float* out);
  /// --kv-cache-dtype fp8: each layer's latent rows (c_kv and k_pe alike) are stored rounded to
  /// E4M3 with that layer's scale, e4m3(x / s) x s, as vLLM's FP8 latent cache takes one scale
  /// (the layer's k_scale). Empty: stored as computed.
  void set_fp8_scales(std::vector<float> scales) { fp8_scale_ = std::move(scales); }

 private:
  /// Some consecutive new tokens of one sequence and one head.
  struct work_item {
    int32_t seq, head;
    int64_t t_begin, t_end;   ///< flat token range of the step
  };
  void project(thread_pool& pool, const mla_weights_f32& w, const step_tokens& step, const float* xn);
  void write_latents(paged_kv_cache& cache, int64_t layer, const step_tokens& step);
  void attend_absorbed(thread_pool& pool, paged_kv_cache& cache, int64_t layer, const mla_weights_f32& w,
                       const step_tokens& step, const std::vector<work_item>& items, float* out);
  void attend_up_projected(thread_pool& pool, paged_kv_cache& cache, int64_t layer, const mla_weights_f32& w,
                           const step_tokens& step, size_t seq, float* out);

  mla_config m_;
  int64_t hidden_, num_heads_;
  float scale_;                          ///< softmax scale
  mla_form form_;
  std::vector<std::vector<float>> uk_t_;   ///< per layer [H][r][dn]: q_lat = uk_t[h] q_nope[h]
  std::vector<float> fp8_scale_;         ///< per layer, --kv-cache-dtype fp8; empty otherwise
  // Per-step scratch. T = tokens in the step.
  std::vector<float> q_;                 ///< [T][H][dn + dr], q_pe rotated
  std::vector<float> q_a_;               ///< [T][q_lora_rank]
  std::vector<float> kv_a_;              ///< [T][r + dr]: normalised c_kv, rotated k_pe (what is cached)
  std::vector<float> context_;           ///< up-projected: [context][r] latents of one sequence
  std::vector<float> expanded_;          ///< up-projected: [context][H][dn + dv]
};

}  // namespace actorserve::gpu::cpu
