#pragma once
// The Llama-3-8B-shaped decode step of bench_cuda_kernels (kernels.cpp): random bf16 weights and
// one step's buffers, run through the executor's own launchers in cuda_step.cpp's order, each
// kernel class on its own or all together (CUDA graph replays).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "bench_timing.hpp"
#include "gpu/cuda/attention/backend.hpp"
#include "gpu/cuda/attention/attention_plan.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/sampling/sampler.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::bench_cuda {

namespace cuda = actorserve::gpu::cuda;
namespace gpu = actorserve::gpu;

// Llama-3-8B's shapes, and the simulated decode state: every sequence at kSimContext tokens.
constexpr int kHidden = 4096, kInter = 14336, kHeads = 32, kKvHeads = 8, kHeadDim = 128, kVocab = 128256;
constexpr int kLayers = 32, kQkvWidth = (kHeads + 2 * kKvHeads) * kHeadDim;
constexpr int kSimMaxBatch = 256, kSimContext = 256, kSimMaxContext = 1152, kSimBlock = 16;
constexpr int kSimMaxTokens = 16384;  // a mixed step's tokens (prefill chunks + decodes)
constexpr int kSimBlocksPerSeq = kSimMaxContext / kSimBlock + 1;
constexpr double kCopyGBs = 4150.0;  // measured H200 copy bandwidth (issue #8)

enum op_class { op_norm, op_qkv, op_rope, op_attn, op_o, op_gate_up, op_silu, op_down, op_lm_head, op_sample,
                op_count };
const char* const op_names[op_count] = {"add_rmsnorm", "qkv gemm", "rope_kv_write", "attention", "o gemm",
                                        "gate_up gemm", "silu_and_mul", "down gemm", "lm_head gemm", "sample (greedy)"};
constexpr unsigned all_ops = (1u << op_count) - 1;

/// A Llama-3-8B-shaped model with random bf16 weights and the buffers of one decode step, run
/// through the executor's own launchers in cuda_step.cpp's order, under the paths `tuning()` picks.
class decode_sim {
 public:
  explicit decode_sim(const gpu::cuda_tuning& tuning = {}) : tuning_(tuning) {
    cudaStreamCreate(&s_);
    if (!gemm_.init(s_, size_t(32) << 20).ok()) { std::fprintf(stderr, "cuBLAS init failed\n"); std::exit(1); }
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> ud(-0.05f, 0.05f);
    std::vector<float> noise(size_t(1) << 24);
    for (auto& v : noise) v = ud(rng);
    noise_ = upload(noise);
    for (int l = 0; l < kLayers; ++l) {
      cuda::device_layer d;
      d.qkv.data = weights(size_t(kQkvWidth) * kHidden);
      d.o.data = weights(size_t(kHidden) * kHeads * kHeadDim);
      d.gate_up.data = weights(size_t(2) * kInter * kHidden);
      d.down.data = weights(size_t(kHidden) * kInter);
      layers_.push_back(d);
      k_cache_.push_back(dmalloc(cache_bytes()));
      v_cache_.push_back(dmalloc(cache_bytes()));
    }
    lm_head_ = weights(size_t(kVocab) * kHidden);
    norm_w_ = upload(std::vector<float>(kHidden, 1.0f));
    std::vector<float> inv_freq(kHeadDim / 2);
    for (int i = 0; i < kHeadDim / 2; ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / kHeadDim);
    inv_freq_ = upload(inv_freq);
    const size_t B = kSimMaxBatch, T = kSimMaxTokens;
    residual_ = static_cast<float*>(dmalloc(T * kHidden * 4));
    delta_ = static_cast<float*>(dmalloc(T * kHidden * 4));
    x_ = dmalloc(T * kHidden * 2);
    qkv_ = static_cast<float*>(dmalloc(T * kQkvWidth * 4));
    attn_ = dmalloc(T * kHeads * kHeadDim * 2);
    q16_ = dmalloc(T * kHeads * kHeadDim * 2);
    gate_up_ = static_cast<float*>(dmalloc(T * 2 * kInter * 4));
    act_ = dmalloc(T * kInter * 2);
    logits_ = static_cast<float*>(dmalloc(B * kVocab * 4));
    sample_seqs_ = upload(std::vector<cuda::sample_seq>(B));
    penalties_ = upload(std::vector<cuda::penalty_token>(1));
    masks_ = upload(std::vector<int32_t>(1));
    out_ = static_cast<cuda::sample_out*>(dmalloc(B * sizeof(cuda::sample_out)));
    cuda::attention_shape shape;
    shape.num_heads = kHeads;
    shape.num_kv_heads = kKvHeads;
    shape.head_dim = kHeadDim;
    shape.block_size = kSimBlock;
    auto be = cuda::make_attention_backend(actorserve::kv_cache_layout::vllm, shape, tuning_.attention);
    if (!be) { std::fprintf(stderr, "attention backend: %s\n", be.err().message.c_str()); std::exit(1); }
    attention_ = std::move(*be);
    const size_t partials = size_t(std::max(attention_->max_partials(), 1));
    part_o_ = static_cast<float*>(dmalloc(partials * cuda::attn_tile_rows * kHeadDim * 4));
    part_lse_ = static_cast<float*>(dmalloc(partials * cuda::attn_tile_rows * 2 * 4));
    cudaStreamSynchronize(s_);
  }
  decode_sim(const decode_sim&) = delete;
  decode_sim& operator=(const decode_sim&) = delete;
  ~decode_sim() {
    cudaDeviceSynchronize();
    for (void* p : owned_) cudaFree(p);
    cudaStreamDestroy(s_);
  }

  cudaStream_t stream() const { return s_; }
  /// The executor's path choices the step runs under (its attention kernels are fixed when the
  /// simulation is made).
  gpu::cuda_tuning& tuning() { return tuning_; }
  cuda::gemm_runner& gemm() { return gemm_; }
  const cuda::device_layer& layer(int l) const { return layers_[size_t(l)]; }
  void* lm_head() const { return lm_head_; }
  void* x() const { return x_; }
  void* act() const { return act_; }
  float* out_f32() const { return logits_; }

  /// Plans attention and the KV writes for `batch` decoding sequences, their contexts spread
  /// evenly over [ctx_lo, ctx_hi] (at most kSimMaxContext), after `prefill` sequences whose first
  /// `chunk` prompt tokens run in this step (a mixed step; each samples its last token).
  void prepare(int batch, int ctx_lo = kSimContext, int ctx_hi = kSimContext, int prefill = 0, int chunk = 0) {
    const int nseq = batch + prefill;
    std::vector<int32_t> bt(size_t(nseq) * kSimBlocksPerSeq);
    std::iota(bt.begin(), bt.end(), 0);
    std::shuffle(bt.begin(), bt.end(), std::mt19937(uint32_t(nseq)));
    std::vector<cuda::attn_seq> seqs(static_cast<size_t>(nseq));
    std::vector<int32_t> positions, slots, rows;
    int tok = 0;
    for (int s = 0; s < nseq; ++s) {
      const int d = s - prefill;  // decode index
      const int q = d < 0 ? chunk : 1;
      const int ctx = d < 0 ? chunk : batch > 1 ? ctx_lo + int(int64_t(ctx_hi - ctx_lo) * d / (batch - 1)) : ctx_hi;
      seqs[s] = {tok, q, ctx, s * kSimBlocksPerSeq};
      for (int p = ctx - q; p < ctx; ++p, ++tok) {
        positions.push_back(p);
        slots.push_back(bt[size_t(s) * kSimBlocksPerSeq + p / kSimBlock] * kSimBlock + p % kSimBlock);
      }
      rows.push_back(tok - 1);
    }
    const cuda::attention_plan plan = attention_->plan(seqs);
    const cuda::attention_grids g = attention_->grids(plan);
    const int32_t n_prefill = int32_t(plan.items.size()) - plan.num_decode_items;
    launch_ = {};
    launch_.q = qkv_;
    launch_.q_stride = kQkvWidth;
    launch_.block_tables = upload(bt);
    launch_.seqs = upload(seqs);
    launch_.items = upload(plan.items);
    launch_.combines = upload(plan.combines);
    launch_.counts = upload(std::vector<int32_t>{n_prefill, int32_t(plan.combines.size()), plan.num_decode_items, 0});
    launch_.prefill_grid = g.prefill;
    launch_.decode_grid = g.decode;
    launch_.combine_grid = g.combine;
    launch_.partial_o = part_o_;
    launch_.partial_lse = part_lse_;
    launch_.out = attn_;
    launch_.num_heads = kHeads;
    launch_.num_kv_heads = kKvHeads;
    launch_.head_dim = kHeadDim;
    launch_.block_size = kSimBlock;
    launch_.scale = 1.0f / std::sqrt(float(kHeadDim));
    rope_ = {};
    rope_.qkv = qkv_;
    rope_.positions = upload(positions);
    rope_.slots = upload(slots);
    rope_.inv_freq = inv_freq_;
    rope_.n = tok;
    rope_.num_heads = kHeads;
    rope_.num_kv_heads = kKvHeads;
    rope_.head_dim = kHeadDim;
    if (prefill > 0 && attention_->prefill_reads_q16()) {  // as the executor's steps with prefill tiles
      rope_.q16 = q16_;
      launch_.q16 = q16_;
      rope_.q16_scale = cuda::prefill_q_scale(launch_.scale);
    }
    batch_ = tok;
    rows_ = nseq;
    row_ids_ = prefill ? upload(rows) : nullptr;
  }

  /// Nonzero data from here on: KV caches of noise and, at the start of every replay that runs the
  /// norms, the residual stream reset to noise. By default the buffers are cudaMemset zeros, so
  /// every GEMM multiplies zero activations, which draws far less power than real data: the H200
  /// then holds 1980 MHz where the engine runs at its ~700 W cap and ~1500 MHz.
  void use_noise_activations() {
    if (residual0_) return;
    residual0_ = static_cast<float*>(dmalloc(size_t(kSimMaxTokens) * kHidden * 4));
    const size_t total = size_t(kSimMaxTokens) * kHidden, chunk = size_t(1) << 24;
    for (size_t off = 0; off < total; off += chunk)
      cudaMemcpyAsync(residual0_ + off, noise_, std::min(chunk, total - off) * 4, cudaMemcpyDeviceToDevice, s_);
    const size_t cache_elems = cache_bytes() / 2;
    for (int l = 0; l < kLayers; ++l) {
      fill_noise(k_cache_[size_t(l)], cache_elems);
      fill_noise(v_cache_[size_t(l)], cache_elems);
    }
    cudaStreamSynchronize(s_);
  }

  /// Enqueues the kernels of `classes` (bit set of op_class) of one decode step. With
  /// tuning().fused_decode at batch 1, the executor's fused GEMVs: qkv includes rope, gate_up the
  /// SiLU (rope_kv_write and silu_and_mul then time nothing).
  void enqueue(unsigned classes) {
    const auto on = [&](op_class c) { return (classes >> c) & 1u; };
    const auto dt = cuda::act_dtype::bf16;
    const int n = batch_;
    const float eps = 1e-5f;
    gemm_.set_bulk_gemv(tuning_.bulk);
    if (n == 1 && tuning_.fused_decode) return enqueue_fused(classes);
    if (residual0_ && on(op_norm))
      cudaMemcpyAsync(residual_, residual0_, size_t(n) * kHidden * 4, cudaMemcpyDeviceToDevice, s_);
    // As cuda_step.cpp: o and down add into the residual in cuBLAS's epilogue (residual_gemm).
    const bool add = tuning_.residual_gemm && !gemm_.uses_gemv(n);
    float* const delta = add ? nullptr : delta_;
    float* const proj_out = add ? residual_ : delta_;
    const float beta = add ? 1.0f : 0.0f;
    for (int l = 0; l < kLayers; ++l) {
      const cuda::device_layer& w = layers_[size_t(l)];
      if (on(op_norm))
        cuda::add_rmsnorm(dt, residual_, l == 0 ? nullptr : delta, nullptr, norm_w_, eps, nullptr, n, kHidden, x_, s_);
      if (on(op_qkv)) (void)gemm_.run(dt, x_, n, kHidden, w.qkv, kQkvWidth, qkv_);
      rope_.k_cache = k_cache_[size_t(l)];
      rope_.v_cache = v_cache_[size_t(l)];
      launch_.k_cache = rope_.k_cache;
      launch_.v_cache = rope_.v_cache;
      if (on(op_rope)) cuda::rope_kv_write(dt, rope_, s_);
      if (on(op_attn)) attention_->run(launch_, s_);
      if (on(op_o)) (void)gemm_.run(dt, attn_, n, kHeads * kHeadDim, w.o, kHidden, proj_out, beta);
      if (on(op_norm))
        cuda::add_rmsnorm(dt, residual_, delta, nullptr, norm_w_, eps, nullptr, n, kHidden, x_, s_);
      const bool f32 = !tuning_.gate_up_16bit || gemm_.uses_gemv(n);  // as cuda_step.cpp chooses
      if (on(op_gate_up)) {
        if (f32) (void)gemm_.run(dt, x_, n, kHidden, w.gate_up, 2 * kInter, gate_up_);
        else (void)gemm_.run_act(dt, x_, n, kHidden, w.gate_up, 2 * kInter, gate_up_);
      }
      if (on(op_silu)) {
        if (f32) cuda::silu_and_mul(dt, gate_up_, n, kInter, act_, s_);
        else cuda::silu_and_mul_act(dt, gate_up_, n, kInter, act_, s_);
      }
      if (on(op_down)) (void)gemm_.run(dt, act_, n, kInter, w.down, kHidden, proj_out, beta);
    }
    const int r = rows_;
    if (on(op_norm)) cuda::add_rmsnorm(dt, residual_, delta, nullptr, norm_w_, eps, row_ids_, r, kHidden, x_, s_);
    if (on(op_lm_head)) (void)gemm_.run(dt, x_, r, kHidden, lm_head_, kVocab, logits_);
    if (on(op_sample)) cuda::sample_tokens(logits_, r, kVocab, sample_seqs_, penalties_, masks_, nullptr, out_, s_);
  }

 private:
  void enqueue_fused(unsigned classes) {
    const auto on = [&](op_class c) { return (classes >> c) & 1u; };
    const auto dt = cuda::act_dtype::bf16;
    const float eps = 1e-5f;
    const int rows_gate_up = gemm_.gemv_rows_for(2 * kInter);
    float* const delta = delta_;
    if (residual0_ && on(op_norm)) cudaMemcpyAsync(residual_, residual0_, kHidden * 4, cudaMemcpyDeviceToDevice, s_);
    for (int l = 0; l < kLayers; ++l) {
      const cuda::device_layer& w = layers_[size_t(l)];
      if (on(op_norm))
        cuda::add_rmsnorm(dt, residual_, l == 0 ? nullptr : delta, nullptr, norm_w_, eps, nullptr, 1, kHidden, x_, s_);
      rope_.k_cache = k_cache_[size_t(l)];
      rope_.v_cache = v_cache_[size_t(l)];
      launch_.k_cache = rope_.k_cache;
      launch_.v_cache = rope_.v_cache;
      if (on(op_qkv)) cuda::gemv_qkv_rope(dt, x_, kHidden, w.qkv.data, rope_, s_, tuning_.bulk);
      if (on(op_attn)) attention_->run(launch_, s_);
      if (on(op_o)) (void)gemm_.run(dt, attn_, 1, kHeads * kHeadDim, w.o, kHidden, delta_);
      if (on(op_norm)) cuda::add_rmsnorm(dt, residual_, delta, nullptr, norm_w_, eps, nullptr, 1, kHidden, x_, s_);
      if (on(op_gate_up))
        cuda::gemv_gate_up_silu(dt, x_, kHidden, w.gate_up.data, kInter, act_, rows_gate_up, s_, tuning_.bulk);
      if (on(op_down)) (void)gemm_.run(dt, act_, 1, kInter, w.down, kHidden, delta_);
    }
    if (on(op_norm)) cuda::add_rmsnorm(dt, residual_, delta, nullptr, norm_w_, eps, nullptr, 1, kHidden, x_, s_);
    if (on(op_lm_head)) (void)gemm_.run(dt, x_, 1, kHidden, lm_head_, kVocab, logits_);
    if (on(op_sample)) cuda::sample_tokens(logits_, 1, kVocab, sample_seqs_, penalties_, masks_, nullptr, out_, s_);
  }

  template <class T>
  T* upload(const std::vector<T>& v) {
    T* p = bench_cuda::upload(v);
    owned_.push_back(p);
    return p;
  }
  void* dmalloc(size_t bytes) {
    void* p = bench_cuda::dmalloc(bytes);
    owned_.push_back(p);
    return p;
  }
  /// A bf16 matrix of n elements filled with uniform noise.
  void* weights(size_t n) {
    void* p = dmalloc(n * 2);
    fill_noise(p, n);
    return p;
  }
  /// n bf16 elements of uniform noise at p.
  void fill_noise(void* p, size_t n) {
    const size_t chunk = size_t(1) << 24;
    for (size_t off = 0; off < n; off += chunk)
      cuda::convert_to_act(cuda::act_dtype::bf16, noise_, cuda::src_dtype::f32, static_cast<char*>(p) + off * 2,
                           std::min(chunk, n - off), s_);
  }
  static size_t cache_bytes() { return size_t(kSimMaxBatch) * kSimBlocksPerSeq * kSimBlock * kKvHeads * kHeadDim * 2; }

  cudaStream_t s_ = nullptr;
  cuda::gemm_runner gemm_;
  std::vector<void*> owned_;
  float* noise_ = nullptr;
  std::vector<cuda::device_layer> layers_;
  std::vector<void*> k_cache_, v_cache_;
  void* lm_head_ = nullptr;
  float *norm_w_ = nullptr, *inv_freq_ = nullptr;
  float *residual_ = nullptr, *delta_ = nullptr, *qkv_ = nullptr, *gate_up_ = nullptr, *logits_ = nullptr;
  void *x_ = nullptr, *attn_ = nullptr, *act_ = nullptr, *q16_ = nullptr;
  cuda::sample_seq* sample_seqs_ = nullptr;
  cuda::penalty_token* penalties_ = nullptr;
  int32_t* masks_ = nullptr;
  cuda::sample_out* out_ = nullptr;
  std::unique_ptr<cuda::attention_backend> attention_;
  float *part_o_ = nullptr, *part_lse_ = nullptr;
  cuda::attn_launch launch_;
  cuda::rope_kv_args rope_;
  int batch_ = 1, rows_ = 1;  // tokens of the step; rows sampled
  int32_t* row_ids_ = nullptr;  // the sampled rows where they are not 0..rows-1
  gpu::cuda_tuning tuning_;
  float* residual0_ = nullptr;  // the residual's noise, once use_noise_activations() ran
};

}  // namespace actorserve::bench_cuda
