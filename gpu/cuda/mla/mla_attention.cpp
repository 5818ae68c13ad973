#include "gpu/cuda/mla/mla_attention.hpp"

#include <fmt/format.h>

#include <cmath>

#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/mla/mla_kernels.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/model/rope.hpp"

namespace actorserve::gpu::cuda {
namespace {

// NOTE: transformers builds q_a_layernorm and kv_a_layernorm with DeepseekV2RMSNorm's default eps,
// not config.rms_norm_eps (as gpu/cpu/mla_attention does).
constexpr float latent_norm_eps = 1e-6f;

/// Rows of split partials the buffers hold: a step of n rows splits its context at most
/// kPartialRows / n ways (mla_num_splits), so decode batches up to this size can split.
constexpr int kPartialRows = 256;

}  // namespace

status mla_attention::init(const model_config& cfg, act_dtype dt, const float* inv_freq, float attention_factor,
                           int max_tokens, int num_sms, const alloc_fn& alloc) {
  const mla_config& m = *cfg.mla;
  dt_ = dt;
  hidden_ = static_cast<int>(cfg.hidden_size);
  heads_ = static_cast<int>(cfg.num_heads);
  q_lora_ = static_cast<int>(m.q_lora_rank);
  rank_ = static_cast<int>(m.kv_lora_rank);
  nope_dim_ = static_cast<int>(m.qk_nope_head_dim);
  rope_dim_ = static_cast<int>(m.qk_rope_head_dim);
  v_dim_ = static_cast<int>(m.v_head_dim);
  num_sms_ = num_sms;
  max_partial_rows_ = kPartialRows;
  scale_ = static_cast<float>(yarn_softmax_scale_factor(cfg.rope) / std::sqrt(static_cast<double>(m.qk_head_dim())));
  inv_freq_ = inv_freq;
  attention_factor_ = attention_factor;
  if (rank_ > mla_max_rank || rope_dim_ > mla_max_rope_dim || rope_dim_ % 2 != 0 || (rank_ + rope_dim_) % 8 != 0)
    return make_error(error_code::unsupported,
                      fmt::format("kv_lora_rank {} and qk_rope_head_dim {}: the CUDA executor's latent attention "
                                  "takes kv_lora_rank up to {}, an even qk_rope_head_dim up to {} and a sum that is a "
                                  "multiple of 8",
                                  rank_, rope_dim_, mla_max_rank, mla_max_rope_dim));
  const size_t T = size_t(max_tokens), H = size_t(heads_), W = size_t(rank_ + rope_dim_), es = act_size(dt);
  const size_t qk = size_t(nope_dim_ + rope_dim_), P = size_t(kPartialRows);
  struct want { size_t bytes; void** where; };
  const want wants[] = {
      {T * size_t(q_lora_) * 4, reinterpret_cast<void**>(&q_a_)},
      {T * size_t(q_lora_) * es, &q_a_act_},
      {T * H * qk * es, &q_},
      {T * W * 4, reinterpret_cast<void**>(&kv_a_)},
      {T * H * W * 4, reinterpret_cast<void**>(&q_abs_)},
      {T * H * size_t(rank_) * es, &o_lat_},
      {P * H * size_t(rank_) * 4, reinterpret_cast<void**>(&partial_o_)},
      {P * H * 2 * 4, reinterpret_cast<void**>(&partial_ml_)},
  };
  for (const want& w : wants)
    if (auto st = alloc(w.bytes, w.where); !st) return st;
  return {};
}

status mla_attention::run(gemm_runner& gemm, const device_mla& w, const void* x, int rows, const mla_step& step,
                          void* cache, int block_size, void* out, cudaStream_t s) {
  if (rows == 0) return {};
  const int H = heads_, r = rank_, dn = nope_dim_, dr = rope_dim_, dv = v_dim_, qk = dn + dr, W = r + dr;
  // The queries, rounded to dt as HF's bf16/fp16 q_proj (or q_b_proj) output is.
  if (w.q_a_proj) {
    if (auto st = gemm.run(dt_, x, rows, hidden_, w.q_a_proj, q_lora_, q_a_); !st) return st;
    AS_CUDA_TRY(mla_rmsnorm(dt_, q_a_, w.q_a_bias, w.q_a_norm, latent_norm_eps, rows, q_lora_, q_a_act_, s));
    if (auto st = gemm.run_act(dt_, q_a_act_, rows, q_lora_, w.q_b_proj, H * qk, q_); !st) return st;
  } else if (auto st = gemm.run_act(dt_, x, rows, hidden_, w.q_proj, H * qk, q_); !st) {
    return st;
  }
  if (auto st = gemm.run(dt_, x, rows, hidden_, w.kv_a_proj, W, kv_a_); !st) return st;
  // q_lat of head h = W_UK_h^T q_nope_h: [rows][dn] (in q_) times W_UK_h [dn][r] (kv_b_proj's key
  // rows of head h) into q_abs_[.][h][0, r).
  const long long kv_b_head = static_cast<long long>(dn + dv) * r;
  if (auto st = gemm.run_batched(dt_, H, rows, r, dn, q_, H * qk, qk, w.kv_b_proj, false, r, kv_b_head, q_abs_, true,
                                 H * W, W);
      !st)
    return st;
  const mla_latent_args la{.kv_a = kv_a_, .kv_a_bias = w.kv_a_bias, .kv_a_norm = w.kv_a_norm,
                           .eps = latent_norm_eps, .q = q_, .q_abs = q_abs_, .positions = step.positions,
                           .slots = step.slots, .inv_freq = inv_freq_, .attention_factor = attention_factor_,
                           .cache = cache, .n = rows, .num_heads = H, .rank = r, .nope_dim = dn, .rope_dim = dr};
  AS_CUDA_TRY(mla_latent_write(dt_, la, s));
  const latent_attention_args aa{.q_abs = q_abs_, .cache = cache, .block_tables = step.block_tables,
                                 .seqs = step.seqs, .token_seqs = step.token_seqs, .positions = step.positions,
                                 .n = rows, .num_heads = H, .rank = r, .rope_dim = dr, .block_size = block_size,
                                 .num_splits = mla_num_splits(rows, H, num_sms_, max_partial_rows_),
                                 .scale = scale_, .partial_o = partial_o_, .partial_ml = partial_ml_,
                                 .out = o_lat_};
  AS_CUDA_TRY(latent_attention(dt_, aa, s));
  // Head h's output = W_UV_h o_lat_h: [rows][r] times W_UV_h^T (kv_b_proj's value rows of head h,
  // [dv][r]) into out[.][h * dv, (h + 1) * dv).
  const char* w_uv = static_cast<const char*>(w.kv_b_proj) + size_t(dn) * r * act_size(dt_);
  return gemm.run_batched(dt_, H, rows, dv, r, o_lat_, H * r, r, w_uv, true, r, kv_b_head, out, false, H * dv, dv);
}

}  // namespace actorserve::gpu::cuda
