#include "gpu/cuda/mla/mla_attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/mla/mla_kernels.hpp"
#include "gpu/cuda/mla/up_projected_plan.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/model/rope.hpp"

namespace actorserve::gpu::cuda {
namespace {

// NOTE: transformers builds q_a_layernorm and kv_a_layernorm with DeepseekV2RMSNorm's default eps,
// not config.rms_norm_eps (as gpu/cpu/mla_attention does).
constexpr float latent_norm_eps = 1e-6f;

}  // namespace

status mla_prefill(gemm_runner& gemm, act_dtype dt, const mla_dims& d, const mla_prefill_workspace& ws,
                   const void* kv_b_proj, const void* q, std::span<const attn_seq> seqs, const int32_t* block_tables,
                   const void* cache, int block_size, float scale, void* out, cudaStream_t s) {
  const int H = d.heads, r = d.rank, dn = d.nope_dim, dr = d.rope_dim, dv = d.v_dim, qk = dn + dr;
  const size_t es = act_size(dt);
  for (const attn_seq& a : seqs) {
    if (a.q_len > a.context_len)
      return make_error(error_code::internal,
                        fmt::format("latent prefill of {} tokens in a context of {}", a.q_len, a.context_len));
    if (a.context_len > ws.tokens)
      return make_error(error_code::internal, fmt::format("latent prefill of {} tokens at {}: the workspace holds {}",
                                                          a.q_len, a.context_len - a.q_len, ws.tokens));
  }
  const long long kv_b_head = static_cast<long long>(dn + dv) * r;
  const char* w_uv = static_cast<const char*>(kv_b_proj) + size_t(dn) * r * es;
  for (const mla_up_projected_group& g : plan_up_projected(seqs, ws.tokens)) {
    for (size_t i = 0; i < g.kv_rows.size(); ++i) {
      const attn_seq& a = seqs[size_t(g.first) + i];
      const size_t row = size_t(g.kv_rows[i]);
      const mla_gather_args ga{.cache = cache, .block_table = block_tables + a.bt_offset,
                               .latents = static_cast<char*>(ws.latents) + row * r * es,
                               .k = static_cast<char*>(ws.k) + row * H * qk * es, .context = a.context_len,
                               .num_heads = H, .rank = r, .nope_dim = dn, .rope_dim = dr, .block_size = block_size};
      AS_CUDA_TRY(mla_gather_latents(dt, ga, s));
    }
    // k_nope of head h = latents [rows][r] times W_UK_h^T (kv_b_proj's key rows of head h, [dn][r])
    // into k[.][h][0, dn); v of head h likewise from its value rows into v[.][h].
    if (auto st = gemm.run_batched(dt, H, g.context_rows, dn, r, ws.latents, r, 0, kv_b_proj, true, r, kv_b_head,
                                   ws.k, false, H * qk, qk);
        !st)
      return st;
    if (auto st = gemm.run_batched(dt, H, g.context_rows, dv, r, ws.latents, r, 0, w_uv, true, r, kv_b_head, ws.v,
                                   false, H * dv, dv);
        !st)
      return st;
    for (const mla_up_projected_launch& l : g.launches) {
      const mla_up_projected_args ua{.q = q, .k = ws.k, .v = ws.v, .out = out, .num_heads = H, .qk_dim = qk,
                                     .v_dim = dv, .scale = scale, .launch = l};
      AS_CUDA_TRY(mla_up_projected_attention(dt, ua, s));
    }
  }
  return {};
}

status mla_head_product(gemm_runner& gemm, act_dtype dt, const head_gemv_args& g, cudaStream_t s) {
  if (mla_head_gemv_supported(g)) {
    AS_CUDA_TRY(mla_head_gemv(dt, g, s));
    return {};
  }
  return gemm.run_batched(dt, g.batch, g.m, g.n, g.k, g.a, g.lda, g.stride_a, g.b, g.b_rows_are_n, g.ldb, g.stride_b,
                          g.c, g.c_f32, g.ldc, g.stride_c);
}

status mla_attention::init(const model_config& cfg, act_dtype dt, const float* inv_freq, float attention_factor,
                           int max_tokens, int max_context, int num_sms, bool cluster_merge,
                           const alloc_fn& alloc) {
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
  cluster_merge_ = cluster_merge;
  // Rows of split partials (for the steps that merge by the last piece): as many as
  // mla_num_splits asks for at any step of up to max_tokens rows (n x splits), so that the
  // buffers never cap its choice; the split counters' rows then cover every row of a step that
  // splits (n <= rows / 2). At least one row: no empty buffer.
  max_partial_rows_ = std::max(1, mla_partial_rows(max_tokens, heads_, num_sms));
  scale_ = static_cast<float>(yarn_softmax_scale_factor(cfg.rope) / std::sqrt(static_cast<double>(m.qk_head_dim())));
  inv_freq_ = inv_freq;
  attention_factor_ = attention_factor;
  if (rank_ > mla_max_rank || rope_dim_ > mla_max_rope_dim || rope_dim_ % 2 != 0 || (rank_ + rope_dim_) % 8 != 0)
    return make_error(error_code::unsupported,
                      fmt::format("kv_lora_rank {} and qk_rope_head_dim {}: the CUDA executor's latent attention "
                                  "takes kv_lora_rank up to {}, an even qk_rope_head_dim up to {} and a sum that is a "
                                  "multiple of 8",
                                  rank_, rope_dim_, mla_max_rank, mla_max_rope_dim));
  if (!mla_up_projected_supported(nope_dim_ + rope_dim_, v_dim_))
    return make_error(error_code::unsupported,
                      fmt::format("qk_nope_head_dim + qk_rope_head_dim {} and v_head_dim {}: the CUDA executor's "
                                  "up-projected prefill takes multiples of 8 up to {} and {}",
                                  nope_dim_ + rope_dim_, v_dim_, mla_max_up_projected_qk, mla_max_up_projected_v));
  const size_t T = size_t(max_tokens), H = size_t(heads_), W = size_t(rank_ + rope_dim_), es = act_size(dt);
  const size_t qk = size_t(nope_dim_ + rope_dim_), P = size_t(max_partial_rows_);
  const size_t counters = P * size_t(mla_head_groups(heads_));
  prefill_.tokens = mla_prefill_workspace_tokens(heads_, max_context);
  const size_t C = size_t(prefill_.tokens);
  struct want { size_t bytes; void** where; };
  const want wants[] = {
      {T * size_t(q_lora_) * 4, reinterpret_cast<void**>(&q_a_)},
      {T * size_t(q_lora_) * es, &q_a_act_},
      {T * H * qk * es, &q_},
      {T * W * 4, reinterpret_cast<void**>(&kv_a_)},
      {(H * qk + W) * 4, reinterpret_cast<void**>(&q_kv_a_)},
      {T * H * W * 4, reinterpret_cast<void**>(&q_abs_)},
      {T * H * size_t(rank_) * es, &o_lat_},
      {P * H * size_t(rank_) * 4, reinterpret_cast<void**>(&partial_o_)},
      {P * H * 2 * 4, reinterpret_cast<void**>(&partial_ml_)},
      {counters * 4, reinterpret_cast<void**>(&split_counters_)},
      {C * size_t(rank_) * es, &prefill_.latents},
      {C * H * qk * es, &prefill_.k},
      {C * H * size_t(v_dim_) * es, &prefill_.v},
  };
  for (const want& w : wants)
    if (auto st = alloc(w.bytes, w.where); !st) return st;
  // NOTE: the step's stream (non-blocking) does not wait for the legacy stream's memset: waiting
  // for that stream here makes the zeros land before any launch counts on them. Not a device-wide
  // sync, which could wait on another shard's collective that waits on this one.
  AS_CUDA_TRY(cudaMemset(split_counters_, 0, counters * 4));
  AS_CUDA_TRY(cudaStreamSynchronize(cudaStreamLegacy));
  return {};
}

status mla_attention::run(gemm_runner& gemm, const device_mla& w, const void* x, int rows, const mla_step& step,
                          void* cache, int block_size, void* out, cudaStream_t s) {
  if (rows == 0) return {};
  const int H = heads_, r = rank_, dn = nope_dim_, dr = rope_dim_, dv = v_dim_, qk = dn + dr, W = r + dr;
  // The absorbed form's rows: an up-projected sequence among them gets zeros, which mla_prefill
  // overwrites.
  const int n = step.absorbed_rows;
  const bool absorbed = n > 0;
  // The queries, rounded to dt as HF's bf16/fp16 q_proj (or q_b_proj) output is: by cuBLAS's dt
  // output, or, for one token whose q_proj and kv_a_proj are one matrix (upload_mla), by the
  // latent write from the one GEMV's fp32 output.
  const float* kv_a = kv_a_;
  const float* q_f32 = nullptr;
  const bool one_gemv = rows == 1 && w.q_proj && gemm.uses_gemv(1) &&
                        static_cast<const char*>(w.kv_a_proj) ==
                            static_cast<const char*>(w.q_proj) + size_t(H) * qk * hidden_ * act_size(dt_);
  if (one_gemv) {
    if (auto st = gemm.run(dt_, x, 1, hidden_, w.q_proj, H * qk + W, q_kv_a_); !st) return st;
    q_f32 = q_kv_a_;
    kv_a = q_kv_a_ + H * qk;
  } else {
    if (w.q_a_proj) {
      if (auto st = gemm.run(dt_, x, rows, hidden_, w.q_a_proj, q_lora_, q_a_); !st) return st;
      AS_CUDA_TRY(mla_rmsnorm(dt_, q_a_, w.q_a_bias, w.q_a_norm, latent_norm_eps, rows, q_lora_, q_a_act_, s));
      if (auto st = gemm.run_act(dt_, q_a_act_, rows, q_lora_, w.q_b_proj, H * qk, q_); !st) return st;
    } else if (auto st = gemm.run_act(dt_, x, rows, hidden_, w.q_proj, H * qk, q_); !st) {
      return st;
    }
    if (auto st = gemm.run(dt_, x, rows, hidden_, w.kv_a_proj, W, kv_a_); !st) return st;
  }
  // The latent write and q_lat of head h = W_UK_h^T q_nope_h: [n][dn] (in q_) times W_UK_h
  // [dn][r] (kv_b_proj's key rows of head h) into q_abs_[.][h][0, r). The two touch different
  // parts (q_nope read against the rotated q_pe; q_abs's [0, r) against [r, W)), so at decode
  // sizes they share one launch, the product reading the one GEMV's fp32 query where the latent
  // write rounds it into q_; otherwise the latent write comes first (it writes q_ from q_f32).
  const mla_latent_args la{.kv_a = kv_a, .kv_a_bias = w.kv_a_bias, .kv_a_norm = w.kv_a_norm,
                           .eps = latent_norm_eps, .q = q_, .q_f32 = q_f32, .q_f32_stride = H * qk + W,
                           .q_abs = q_abs_, .positions = step.positions, .slots = step.slots,
                           .inv_freq = inv_freq_, .attention_factor = attention_factor_, .cache = cache, .n = rows,
                           .num_heads = H, .rank = r, .nope_dim = dn, .rope_dim = dr};
  const long long kv_b_head = static_cast<long long>(dn + dv) * r;
  head_gemv_args uk{.batch = H, .m = n, .n = r, .k = dn, .a = q_, .lda = H * qk, .stride_a = qk,
                    .b = w.kv_b_proj, .b_rows_are_n = false, .ldb = r, .stride_b = kv_b_head,
                    .c = q_abs_, .c_f32 = true, .ldc = H * W, .stride_c = W};
  if (absorbed && rows <= H && mla_head_gemv_supported(uk)) {
    uk.a_f32 = q_f32;  // one row when set: the rows' offsets are q_'s
    AS_CUDA_TRY(mla_head_gemv_latent_write(dt_, uk, la, s));
  } else {
    AS_CUDA_TRY(mla_latent_write(dt_, la, s));
    if (absorbed)
      if (auto st = mla_head_product(gemm, dt_, uk, s); !st) return st;
  }
  // The prefill chunks, up-projected (their rows of `out` are written after the absorbed rows').
  const auto up_projected = [&]() -> status {
    const mla_dims d{.heads = H, .rank = r, .nope_dim = dn, .rope_dim = dr, .v_dim = dv};
    return mla_prefill(gemm, dt_, d, prefill_, w.kv_b_proj, q_, step.up_projected, step.block_tables, cache,
                       block_size, scale_, out, s);
  };
  if (!absorbed) return up_projected();
  const int splits = mla_num_splits(n, H, num_sms_, max_partial_rows_);
  const latent_attention_args aa{.q_abs = q_abs_, .cache = cache, .block_tables = step.block_tables,
                                 .seqs = step.seqs, .token_seqs = step.token_seqs, .positions = step.positions,
                                 .n = n, .num_heads = H, .rank = r, .rope_dim = dr, .block_size = block_size,
                                 .num_splits = splits, .scale = scale_,
                                 .cluster_merge = mla_merges_in_cluster(cluster_merge_, splits), .partial_o = partial_o_,
                                 .partial_ml = partial_ml_,
                                 .split_counters = split_counters_, .out = o_lat_};
  AS_CUDA_TRY(latent_attention(dt_, aa, s));
  // Head h's output = W_UV_h o_lat_h: [rows][r] times W_UV_h^T (kv_b_proj's value rows of head h,
  // [dv][r]) into out[.][h * dv, (h + 1) * dv).
  const char* w_uv = static_cast<const char*>(w.kv_b_proj) + size_t(dn) * r * act_size(dt_);
  if (auto st = mla_head_product(gemm, dt_,
                                 {.batch = H, .m = n, .n = dv, .k = r, .a = o_lat_, .lda = H * r, .stride_a = r,
                                  .b = w_uv, .b_rows_are_n = true, .ldb = r, .stride_b = kv_b_head, .c = out,
                                  .c_f32 = false, .ldc = H * dv, .stride_c = dv},
                                 s);
      !st)
    return st;
  return up_projected();
}

}  // namespace actorserve::gpu::cuda
