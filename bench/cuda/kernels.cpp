// CUDA kernel and executor timings on the device: a Llama-3-8B-shaped decode step broken down by
// kernel class (random bf16 weights, each class replayed as a CUDA graph), the GEMM sweep of
// cuBLAS against the decode GEMV per projection and row count, paged attention (decode and
// prefill), the device sampler, and the executor's prefill and decode steps (eager and graph) on
// the llama-hd128-bf16 fixture.
//   bench_cuda_kernels [--out DIR]
//                      [--only attention|sampler|sweep|step|executor|offline|bulk|fp8|moe|moe-ffn|gemm-first]
//                      [TUNING FLAGS]
// (offline, bulk, fp8, moe, moe-ffn, gemm-first: only with --only; offline: the offline workloads' decode and mixed prefill
// steps; bulk: batch-1 step variants; fp8: the projections with FP8 E4M3 weights against bf16, then
// the fused one-token FP8 GEMVs against the FP8 GEMV + element-wise kernel (fp8_fused_bench.hpp); moe:
// the grouped expert GEMM per tile shape at prefill and decode batches and a chunk's routed FFN
// on it and on per-expert cuBLAS, moe_gemm_bench.hpp; moe-ffn: that last table alone; gemm-first:
// what a cuBLAS shape's first call costs, gemm_first_call_bench.hpp). TUNING FLAGS (tuning_flags.hpp, e.g. --gate-up-16bit 0)
// set the paths of the simulated step and of the executor for an A/B run. The executor section
// runs the llama-hd128-bf16 fixture, or [--executor-model DIR] [--executor-dummy 0|1]
// [--executor-fp8 0|1] (executor_model below).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "decode_sim.hpp"
#include "fp8_fused_bench.hpp"
#include "gemm_first_call_bench.hpp"
#include "moe_gemm_bench.hpp"
#include "gpu/cuda/attention/backend.hpp"
#include "gpu/cuda/attention/attention_plan.hpp"
#include "gpu/cuda/cuda_executor.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/linear/fp8_gemv_mma.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/linear/gemv_kernel.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/programmatic_launch.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/sampling/sampler.hpp"
#include "tuning_flags.hpp"

namespace cuda = actorserve::gpu::cuda;
namespace gpu = actorserve::gpu;

namespace {

using namespace actorserve::bench_cuda;

void bench_attention(int batch, int ctx, int q_len, int num_sms) {
  const int H = 32, KVH = 8, D = 128, bs = 16;
  const int blocks_per_seq = (ctx + bs - 1) / bs, total_blocks = batch * blocks_per_seq;
  const size_t cache_elems = size_t(total_blocks) * bs * KVH * D;
  void* kc = dmalloc(cache_elems * 2);
  void* vc = dmalloc(cache_elems * 2);
  std::vector<int32_t> bt(static_cast<size_t>(total_blocks));
  std::iota(bt.begin(), bt.end(), 0);
  std::shuffle(bt.begin(), bt.end(), std::mt19937(1));
  std::vector<cuda::attn_seq> seqs(static_cast<size_t>(batch));
  for (int s = 0; s < batch; ++s) seqs[s] = {s * q_len, q_len, ctx, s * blocks_per_seq};
  const int max_partials = 4 * num_sms;
  auto plan = cuda::plan_attention(seqs, H, KVH, 2 * num_sms, max_partials);
  std::vector<int32_t> counts = {int32_t(plan.items.size()), int32_t(plan.combines.size())};
  const int tokens = batch * q_len;
  cuda::attn_launch a;
  a.q = static_cast<float*>(dmalloc(size_t(tokens) * (H + 2 * KVH) * D * 4));
  a.q_stride = (H + 2 * KVH) * D;
  a.k_cache = kc;
  a.v_cache = vc;
  a.block_tables = upload(bt);
  a.seqs = upload(seqs);
  a.items = upload(plan.items);
  a.combines = upload(plan.combines);
  a.counts = upload(counts);
  a.prefill_grid = int(plan.items.size());
  a.combine_grid = int(plan.combines.size());
  a.partial_o = static_cast<float*>(dmalloc(size_t(max_partials) * cuda::attn_tile_rows * D * 4));
  a.partial_lse = static_cast<float*>(dmalloc(size_t(max_partials) * cuda::attn_tile_rows * 2 * 4));
  a.out = dmalloc(size_t(tokens) * H * D * 2);
  a.num_heads = H;
  a.num_kv_heads = KVH;
  a.head_dim = D;
  a.block_size = bs;
  a.scale = 1.0f / std::sqrt(float(D));
  const double ms = time_ms([&] { cuda::paged_attention(cuda::act_dtype::bf16, a, nullptr); });
  const double kv_bytes = double(batch) * ctx * KVH * D * 2 * 2;
  const double flops = 4.0 * H * D * double(batch) * (q_len == 1 ? ctx : double(q_len) * (ctx - q_len / 2.0));
  report("attention H=32 KVH=8 D=128 bs=16 batch %d ctx %d q_len %d: %.3f ms, KV read %.0f GB/s, %.1f TFLOP/s "
         "(%zu blocks, %zu combines)\n", batch, ctx, q_len, ms, kv_bytes / ms / 1e6, flops / ms / 1e9,
         plan.items.size(), plan.combines.size());
  cudaDeviceSynchronize();
  for (const void* p : {static_cast<const void*>(a.q), a.k_cache, a.v_cache, static_cast<const void*>(a.block_tables),
                        static_cast<const void*>(a.seqs), static_cast<const void*>(a.items),
                        static_cast<const void*>(a.combines), static_cast<const void*>(a.counts),
                        static_cast<const void*>(a.partial_o), static_cast<const void*>(a.partial_lse),
                        static_cast<const void*>(a.out)})
    cudaFree(const_cast<void*>(p));
}

/// Sampling settings of a sampler run.
enum class sampler_mode { greedy, temperature, top_k, top_p, min_p, mixed };

const char* mode_name(sampler_mode m) {
  switch (m) {
    case sampler_mode::greedy: return "greedy";
    case sampler_mode::temperature: return "temperature 0.8";
    case sampler_mode::top_k: return "temperature 0.8, top-k 50";
    case sampler_mode::top_p: return "temperature 0.8, top-p 0.9";
    case sampler_mode::min_p: return "temperature 0.8, min-p 0.05";
    default: return "temperature 0.8, top-p 0.9, top-k 50 on half";
  }
}

void bench_sampler(int batch, int vocab, sampler_mode mode) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0, 3);
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  for (auto& x : logits) x = nd(rng);
  std::vector<cuda::sample_seq> ss(static_cast<size_t>(batch));
  for (int i = 0; i < batch; ++i) {
    const bool random = mode != sampler_mode::greedy;
    ss[i].temperature = random ? 0.8f : 0.0f;
    if (mode == sampler_mode::top_k || (mode == sampler_mode::mixed && i % 2)) ss[i].top_k = 50;
    if (mode == sampler_mode::top_p || mode == sampler_mode::mixed) ss[i].top_p = 0.9f;
    if (mode == sampler_mode::min_p) ss[i].min_p = 0.05f;
    ss[i].num_logprobs = 5;
    ss[i].seed = uint64_t(i);
  }
  float* d_logits = upload(logits);
  auto* d_ss = upload(ss);
  auto* d_pen = upload(std::vector<cuda::penalty_token>(1));
  auto* d_mask = upload(std::vector<int32_t>(1));
  auto* d_out = static_cast<cuda::sample_out*>(dmalloc(size_t(batch) * sizeof(cuda::sample_out)));
  const double ms =
      time_ms([&] { cuda::sample_tokens(d_logits, batch, vocab, d_ss, d_pen, d_mask, nullptr, d_out, nullptr); }, 5);
  report("sampler batch %d vocab %d %s (5 top logprobs): %.3f ms\n", batch, vocab, mode_name(mode), ms);
  cudaFree(d_logits);
  cudaFree(d_ss);
  cudaFree(d_pen);
  cudaFree(d_mask);
  cudaFree(d_out);
}


/// One projection of the sweep: its weights per layer (or the single lm_head) and its operands.
struct projection {
  const char* name;
  int n, k;
  bool per_layer;
};

/// cuBLAS against the GEMV (4, 2 and 1 weight rows per block) per projection and row count: µs
/// per call and weight GB/s, each projection replayed over all 32 layers' weights (13.9 GB:
/// nothing stays in L2).
void bench_gemm_sweep(decode_sim& sim) {
  const projection projs[] = {{"qkv", kQkvWidth, kHidden, true},
                              {"o", kHidden, kHeads * kHeadDim, true},
                              {"gate_up", 2 * kInter, kHidden, true},
                              {"down", kHidden, kInter, true},
                              {"lm_head", kVocab, kHidden, false}};
  report("\n## GEMM sweep (bf16 in, fp32 out; weight GB/s vs %.0f GB/s copy)\n", kCopyGBs);
  report("| proj | n x k | m | cuBLAS us | cuBLAS GB/s | gemv r4 us | gemv r2 us | gemv r1 us | best gemv GB/s | "
         "best gemv/cuBLAS | best + PDL us | PDL GB/s |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const projection& p : projs) {
    for (int m : {1, 2, 3, 4, 8, 16, 64, 128, 256}) {
      const int calls = p.per_layer ? kLayers : 1;
      const auto time_mode = [&](int max_rows, int rows_per_block) {
        sim.gemm().set_gemv_max_rows(max_rows);
        sim.gemm().set_gemv_rows_per_block(rows_per_block);
        return graph_ms(sim.stream(), [&] {
          for (int l = 0; l < calls; ++l) {
            const cuda::device_layer& w = sim.layer(l);
            const void* wt = !p.per_layer ? sim.lm_head()
                             : p.k == kInter ? w.down.data
                             : p.n == kQkvWidth ? w.qkv.data
                             : p.n == kHidden ? w.o.data
                                              : w.gate_up.data;
            (void)sim.gemm().run(cuda::act_dtype::bf16, p.k == kInter ? sim.act() : sim.x(), m, p.k, wt, p.n,
                                 sim.out_f32());
          }
        }) * 1000.0 / calls;
      };
      const double bytes = double(p.n) * p.k * 2;
      const double cublas_us = time_mode(0, 0);
      report("| %s | %d x %d | %d | %.1f | %.0f |", p.name, p.n, p.k, m, cublas_us, bytes / cublas_us / 1e3);
      if (m > cuda::gemv_max_m) {
        report(" - | - | - | - | - | - | - |\n");
        continue;
      }
      double best = 1e30;
      int best_r = 4;
      for (int r : {4, 2, 1}) {
        if (r < 4 && m > 2) {
          report(" - |");
          continue;
        }
        const double us = time_mode(cuda::gemv_max_m, r);
        if (us < best) {
          best = us;
          best_r = r;
        }
        report(" %.1f |", us);
      }
      cuda::set_programmatic_launch(true);
      const double pdl_us = time_mode(cuda::gemv_max_m, best_r);
      cuda::set_programmatic_launch(false);  // the other columns: plain launches
      report(" %.0f | %.2f | %.1f | %.0f |\n", bytes / best / 1e3, best / cublas_us, pdl_us, bytes / pdl_us / 1e3);
    }
  }
  sim.gemm().set_gemv_max_rows(cuda::default_gemv_max_rows);
  sim.gemm().set_gemv_rows_per_block(0);
}

/// FP8 E4M3 weights (one scale per row, then one per 128 x 128 block) against the bf16 weights of
/// the same projections, per row count, through gemm_runner with each FP8 path forced in turn: the
/// FP8 GEMV (up to cuda::fp8_gemv_max_m rows; the register kernel, fp8_linear.hpp), at m = 1 the
/// bulk-copy FP8 GEMV (fp8_gemv_bulk.hpp, on the sim's bulk grid, with groups of 4 and of 8 weight
/// rows; '-' where the GPU does not run it), up to 8 rows the tensor-core GEMV (fp8_gemv_mma.hpp;
/// per-row scales), with the weight bytes a second each GEMV streams at m = 1, the FP8 tensor-core GEMM (activations quantized per token or per 128-element group, then
/// cuBLASLt; fp32 out as run(), and 16-bit out as run_act() gives gate/up), and dequantize + cuBLAS. "default" names the path gemm_runner takes at
/// cuda::default_fp8_gemm_min_rows. Each projection is replayed over 32 layers' copies of its
/// weights (nothing stays in L2).
void bench_fp8_sweep(decode_sim& sim) {
  const projection projs[] = {{"qkv", kQkvWidth, kHidden, true},
                              {"o", kHidden, kHeads * kHeadDim, true},
                              {"gate_up", 2 * kInter, kHidden, true},
                              {"down", kHidden, kInter, true}};
  constexpr int kMaxM = 1024;  // gate_up's fp32 output of kMaxM rows fits the logits buffer
  std::mt19937 rng(3);
  cuda::gemm_runner& g = sim.gemm();
  const gpu::bulk_gemv_tuning bulk0 = g.bulk_gemv();
  if (!g.reserve_fp8_scratch(cuda::act_dtype::bf16, size_t(2) * kInter * kHidden).ok()) return;
  if (!g.reserve_fp8_activations(kMaxM, kInter).ok()) return;
  for (const bool block : {false, true}) {
    report("\n## FP8 weights, %s, vs bf16 (bf16 activations in; us per projection; '-': the path does not take m)\n",
           block ? "128 x 128 block scales" : "one scale per row");
    report("| proj | n x k | m | bf16 | fp8 gemv | gemv TB/s | fp8 bulk 4 rows | TB/s | fp8 bulk 8 rows | TB/s | "
           "fp8 mma gemv | TB/s | fp8 gemm | fp8 gemm 16-bit out | dequant + cuBLAS | default | default/bf16 |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const projection& p : projs) {
      const size_t elems = size_t(p.n) * p.k;
      std::vector<uint8_t> codes(elems);
      for (auto& c : codes) c = uint8_t(rng() % 0x7e) | uint8_t(rng() & 0x80u);  // finite codes of either sign
      const size_t blocks =
          size_t(p.n + cuda::kFp8Block - 1) / cuda::kFp8Block * ((p.k + cuda::kFp8Block - 1) / cuda::kFp8Block);
      const std::vector<float> scales(block ? blocks : size_t(p.n), 0.05f / 448.0f);
      std::vector<cuda::device_weight> fp8(kLayers);
      for (auto& w : fp8) {
        w.data = upload(codes);
        (block ? w.block_scale : w.row_scale) = upload(scales);
      }
      for (int m : {1, 2, 4, 5, 6, 7, 8, 9, 16, 32, 64, 128, 256, 512, kMaxM}) {
        const void* x = p.k == kInter ? sim.act() : sim.x();
        const auto time_weights = [&](bool use_fp8, bool act_out) {
          return graph_ms(sim.stream(), [&] {
            for (int l = 0; l < kLayers; ++l) {
              const cuda::device_layer& w = sim.layer(l);
              const cuda::device_weight& bf = p.k == kInter ? w.down : p.n == kQkvWidth ? w.qkv
                                              : p.n == kHidden ? w.o : w.gate_up;
              const cuda::device_weight& wt = use_fp8 ? fp8[size_t(l)] : bf;
              if (act_out) (void)g.run_act(cuda::act_dtype::bf16, x, m, p.k, wt, p.n, sim.out_f32());
              else (void)g.run(cuda::act_dtype::bf16, x, m, p.k, wt, p.n, sim.out_f32());
            }
          }) * 1000.0 / kLayers;
        };
        const double bf16_us = time_weights(false, false);
        // One FP8 path at a time; -1: it did not run (the GEMM's count shows whether cuBLASLt ran).
        const auto fp8_path = [&](int gemv_max, int gemm_min, bool act_out, bool expect_lt) {
          g.set_fp8_paths(gemv_max, gemm_min);
          const int64_t before = g.fp8_gemm_runs();
          const double us = time_weights(true, act_out);
          return expect_lt && g.fp8_gemm_runs() == before ? -1.0 : us;
        };
        constexpr int kNever = std::numeric_limits<int>::max();
        // -1: the ring (the tensor-core GEMV: mma) was asked for and did not run; rows: the ring's
        // weight rows per group.
        const auto gemv_kernel = [&](bool ring, int rows, bool mma = false) {
          gpu::bulk_gemv_tuning t = bulk0;
          t.fp8 = ring;
          t.fp8_rows = rows;
          t.fp8_mma_min_rows = mma ? 1 : 0;
          g.set_bulk_gemv(t);
          const int64_t before = mma ? g.fp8_gemv_mma_runs() : g.fp8_gemv_bulk_runs();
          const double us = fp8_path(cuda::fp8_gemv_max_m, kNever, false, false);
          g.set_bulk_gemv(bulk0);
          return ring && (mma ? g.fp8_gemv_mma_runs() : g.fp8_gemv_bulk_runs()) == before ? -1.0 : us;
        };
        const double gemv_us = m <= cuda::fp8_gemv_max_m ? gemv_kernel(false, bulk0.fp8_rows) : -1;
        const double bulk4_us = m == 1 ? gemv_kernel(true, 4) : -1, bulk8_us = m == 1 ? gemv_kernel(true, 8) : -1;
        const double mma_us = m <= cuda::fp8_gemv_mma_max_m ? gemv_kernel(true, bulk0.fp8_rows, true) : -1;
        const double bulk_us = bulk0.fp8_rows == 4 ? bulk4_us : bulk8_us;
        const double lt_us = fp8_path(0, 1, false, true), lt16_us = fp8_path(0, 1, true, true);
        const double deq_us = fp8_path(0, kNever, false, false);
        g.set_fp8_paths(cuda::fp8_gemv_max_m, cuda::default_fp8_gemm_min_rows);
        const bool default_mma =
            bulk0.fp8 && bulk0.fp8_mma_min_rows > 0 && m >= bulk0.fp8_mma_min_rows && mma_us >= 0;
        const bool default_gemv = cuda::fp8_gemv_by_default(m), default_bulk = bulk0.fp8 && bulk_us >= 0;
        const double default_us = default_mma    ? mma_us
                                  : default_bulk ? bulk_us
                                  : default_gemv ? gemv_us
                                  : lt_us >= 0   ? lt_us
                                                 : deq_us;
        const auto cell = [](double us) {
          if (us >= 0) report(" %.1f |", us);
          else report(" - |");
        };
        report("| %s | %d x %d | %d | %.1f |", p.name, p.n, p.k, m, bf16_us);
        const auto time_and_rate = [&](double us) {  // m = 1: the weight bytes a second
          cell(us);
          if (us >= 0 && m == 1) report(" %.2f |", double(elems) / us / 1e6);
          else report(" - |");
        };
        time_and_rate(gemv_us);
        time_and_rate(bulk4_us);
        time_and_rate(bulk8_us);
        time_and_rate(mma_us);
        cell(lt_us);
        cell(lt16_us);
        cell(deq_us);
        report(" %s | %.2f |\n",
               default_mma    ? "mma gemv"
               : default_bulk ? "bulk gemv"
               : default_gemv ? "gemv"
               : lt_us >= 0   ? "gemm"
                              : "dequant",
               default_us / bf16_us);
      }
      for (auto& w : fp8) {
        cudaFree(w.data);
        cudaFree(const_cast<float*>(w.scales()));
      }
    }
  }
}

/// Decode batch and the range its sequences' contexts spread over; prefill sequences running
/// their first `chunk` prompt tokens in the same step.
struct sim_shape {
  int batch, ctx_lo, ctx_hi, prefill = 0, chunk = 0;
};

/// The decode step's GPU time per kernel class at each batch, under a GEMM dispatch.
void bench_step_breakdown(decode_sim& sim, int gemv_rows, bool pdl, bool fused, const std::vector<sim_shape>& shapes,
                          const char* label) {
  sim.gemm().set_gemv_max_rows(gemv_rows);
  cuda::set_programmatic_launch(pdl);
  const bool fused0 = sim.tuning().fused_decode;
  sim.tuning().fused_decode = fused;
  report("\n## Llama-3-8B decode step, %s: ms per step by kernel class (CUDA graph replays)\n", label);
  std::vector<int> batches;
  for (const sim_shape& sh : shapes) batches.push_back(sh.batch);
  report("| class |");
  for (const sim_shape& sh : shapes) {
    if (sh.prefill) report(" %d x %d prefill +", sh.prefill, sh.chunk);
    report(" batch %d ctx %d-%d |", sh.batch, sh.ctx_lo, sh.ctx_hi);
  }
  report("\n|---|");
  for (size_t i = 0; i < std::size(batches); ++i) report("---|");
  report("\n");
  std::vector<std::vector<double>> ms(op_count + 2, std::vector<double>(std::size(batches)));
  for (size_t bi = 0; bi < std::size(batches); ++bi) {
    const sim_shape& sh = shapes[bi];
    sim.prepare(sh.batch, sh.ctx_lo, sh.ctx_hi, sh.prefill, sh.chunk);
    const int iters = sh.prefill ? 3 : 10;  // a mixed step takes 50-250 ms
    double sum = 0;
    for (int c = 0; c < op_count; ++c) {
      ms[c][bi] = graph_ms(sim.stream(), [&] { sim.enqueue(1u << c); }, iters);
      sum += ms[c][bi];
    }
    ms[op_count][bi] = sum;
    ms[op_count + 1][bi] = graph_ms(sim.stream(), [&] { sim.enqueue(all_ops); }, iters);
  }
  for (int c = 0; c < op_count + 2; ++c) {
    report("| %s |", c < op_count ? op_names[c] : c == op_count ? "sum of classes" : "**whole step**");
    for (size_t bi = 0; bi < std::size(batches); ++bi) report(" %.3f |", ms[c][bi]);
    report("\n");
  }
  const double weight_bytes = double(kLayers) * (double(kQkvWidth) * kHidden + double(kHidden) * kHeads * kHeadDim +
                                                 2.0 * kInter * kHidden + double(kHidden) * kInter) * 2 +
                              double(kVocab) * kHidden * 2;
  report("| GEMM weight GB/s |");
  for (size_t bi = 0; bi < std::size(batches); ++bi) {
    const double gemm_ms = ms[op_qkv][bi] + ms[op_o][bi] + ms[op_gate_up][bi] + ms[op_down][bi] + ms[op_lm_head][bi];
    report(" %.0f |", weight_bytes / gemm_ms / 1e6);
  }
  report("\n| step tok/s (batch x 1000 / step ms) |");
  for (size_t bi = 0; bi < std::size(batches); ++bi) report(" %.1f |", batches[bi] * 1000.0 / ms[op_count + 1][bi]);
  report("\n| layer GEMM TFLOP/s (qkv+o+gate_up+down) |");
  const double layer_flops = 2.0 * kLayers * (double(kQkvWidth) * kHidden + double(kHidden) * kHeads * kHeadDim +
                                              3.0 * kInter * kHidden);
  for (size_t bi = 0; bi < std::size(batches); ++bi) {
    const sim_shape& sh = shapes[bi];
    const double tokens = double(sh.batch) + double(sh.prefill) * sh.chunk;
    const double gemm_ms = ms[op_qkv][bi] + ms[op_o][bi] + ms[op_gate_up][bi] + ms[op_down][bi];
    report(" %.0f |", layer_flops * tokens / gemm_ms / 1e9);
  }
  report("\n");
  sim.gemm().set_gemv_max_rows(cuda::default_gemv_max_rows);
  cuda::set_programmatic_launch(false);
  sim.tuning().fused_decode = fused0;
}

/// The offline workloads' steps (issue #8): decode at batch 256 with the 16-bit gate_up against
/// fp32, spread against synchronized contexts, a short against a sustained replay (clocks under
/// load), and mixed prefill + decode steps of the 200 x 1000 in / 100 out workload.
void bench_offline_steps(decode_sim& sim) {
  cuda::set_programmatic_launch(true);
  sim.prepare(256, 128, 1152);
  const auto step_ms = [&](int iters) { return graph_ms(sim.stream(), [&] { sim.enqueue(all_ops); }, iters); };
  const auto held = [&](const char* what) {
    const double brief = step_ms(10);
    const auto t0 = std::chrono::steady_clock::now();
    const double long_ms = step_ms(400);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    report("\n## Sustained load, %s: batch 256 ctx 128-1152 whole step %.3f ms over 10 replays, %.3f ms over 400 "
           "(%.1f s), then %.3f ms over 10\n", what, brief, long_ms, secs, step_ms(10));
  };
  held("zero activations (cudaMemset buffers)");
  sim.use_noise_activations();
  held("noise activations and KV caches (the tables below)");
  const std::vector<sim_shape> decode = {{256, 128, 1152}, {256, 640, 640}, {248, 128, 1152}};
  const bool gate_up0 = sim.tuning().gate_up_16bit;
  sim.tuning().gate_up_16bit = true;
  bench_step_breakdown(sim, cuda::default_gemv_max_rows, true, true, decode,
                       "offline 1000 x 128/1024 decode steps, 16-bit gate_up (default)");
  sim.tuning().gate_up_16bit = false;
  bench_step_breakdown(sim, cuda::default_gemv_max_rows, true, true, {{256, 128, 1152}},
                       "offline decode step, fp32 gate_up (--gate-up-16bit 0)");
  sim.tuning().gate_up_16bit = gate_up0;
  // The last: the engine's prefill-carrying step of that workload (13,421 tokens on average).
  const std::vector<sim_shape> mixed = {{200, 1000, 1100, 2, 924}, {0, 0, 0, 2, 1024}, {100, 1000, 1100, 8, 1000},
                                        {100, 1000, 1100, 13, 1000}};
  bench_step_breakdown(sim, cuda::default_gemv_max_rows, true, true, mixed,
                       "mixed steps of the 200 x 1000/100 workload (prefill chunks from position 0)");
  const bool residual0 = sim.tuning().residual_gemm;
  sim.tuning().residual_gemm = !residual0;
  bench_step_breakdown(sim, cuda::default_gemv_max_rows, true, true, {{256, 128, 1152}, {100, 1000, 1100, 13, 1000}},
                       residual0 ? "o and down writing a delta for add_rmsnorm (--residual-gemm 0)"
                                 : "o and down adding into the residual (--residual-gemm 1)");
  sim.tuning().residual_gemm = residual0;
  cuda::set_programmatic_launch(false);
}

/// Batch 1 (context 256): the one-token step by kernel class with the register GEMVs and with
/// the bulk-copy GEMVs (gemv_bulk.hpp), then the whole step under each mask of kernels taking the
/// bulk path and each grid (blocks per SM, 16 KiB ring stages, QKV pairs, evict-first copies):
/// with zero activations, then with noise (which draws the power, and the clocks, of the engine).
void bench_bulk_variants(decode_sim& sim) {
  const std::vector<sim_shape> one = {{1, 256, 256}};
  const gpu::bulk_gemv_tuning bulk0 = sim.tuning().bulk;
  const auto bulk = [](int mask, int blocks, int stages, int pairs, bool evict) {
    gpu::bulk_gemv_tuning t;
    t.plain = mask & 1;
    t.qkv = mask & 2;
    t.gate_up = mask & 4;
    t.blocks_per_sm = blocks;
    t.stages = stages;
    t.qkv_pairs = pairs;
    t.evict_first = evict;
    return t;
  };
  sim.tuning().bulk = bulk(0, 4, 3, 2, true);
  bench_step_breakdown(sim, cuda::default_gemv_max_rows, true, true, one, "batch 1, register GEMVs with norm kernels");
  sim.tuning().bulk = gpu::bulk_gemv_tuning{};
  bench_step_breakdown(sim, cuda::default_gemv_max_rows, true, true, one,
                       "batch 1, bulk-copy GEMVs (default grid) with norm kernels");
  struct variant {
    int mask, blocks, stages, pairs, evict;
  };
  const variant variants[] = {{0, 4, 3, 2, 1}, {7, 4, 3, 2, 1}, {7, 4, 3, 1, 1}, {7, 4, 3, 2, 0}, {7, 6, 2, 2, 1},
                              {7, 12, 1, 2, 1}, {7, 3, 4, 2, 1}, {7, 2, 6, 2, 1}, {7, 4, 2, 2, 1}, {1, 4, 3, 2, 1},
                              {2, 4, 3, 2, 1}, {4, 4, 3, 2, 1}, {3, 4, 3, 2, 1}, {5, 4, 3, 2, 1}, {6, 4, 3, 2, 1},
                              {0, 4, 3, 2, 1}};
  cuda::set_programmatic_launch(true);
  for (const char* acts : {"zero", "noise"}) {
    if (acts[0] == 'n') sim.use_noise_activations();
    sim.prepare(1);
    report("\n## Batch 1 bulk-copy GEMV variants, %s activations: whole step ms (CUDA graph replays)\n"
           "| bulk mask (1 plain, 2 qkv, 4 gate_up) | blocks per SM | stages | qkv pairs | evict first | ms | tok/s |\n"
           "|---|---|---|---|---|---|---|\n", acts);
    for (const variant& v : variants) {
      sim.tuning().bulk = bulk(v.mask, v.blocks, v.stages, v.pairs, v.evict != 0);
      const double ms = graph_ms(sim.stream(), [&] { sim.enqueue(all_ops); }, 20);
      report("| %d | %d | %d | %d | %d | %.3f | %.1f |\n", v.mask, v.blocks, v.stages, v.pairs, v.evict, ms,
             1000.0 / ms);
    }
  }
  sim.tuning().bulk = bulk0;
  cuda::set_programmatic_launch(false);
}

gpu::step_result run(gpu::executor& ex, gpu::step_batch b) {
  std::promise<gpu::step_result> pr;
  auto f = pr.get_future();
  ex.submit(std::move(b), [&](gpu::step_result r) { pr.set_value(std::move(r)); });
  return f.get();
}

/// The executor section's model: the llama-hd128-bf16 fixture, or --executor-model DIR (with
/// --executor-dummy 1 its config.json only, the weights generated on the device as
/// --load-format dummy does); with --executor-fp8 1, FP8 weights (--quantization fp8) and the FP8
/// KV cache (--kv-cache-dtype fp8: flash-decoding, 64-token blocks), so the tuning flags A/B the
/// fused FP8 GEMVs in the executor's own steps.
struct executor_model {
  std::string dir;
  bool dummy = false, fp8 = false;
};

void bench_executor(const executor_model& m, bool eager, const gpu::cuda_tuning& tuning) {
  gpu::cuda_executor_options o;
  o.tuning = tuning;
  o.num_blocks_override = 4096;
  // The steps here reach 160 tokens a sequence; a model's own max_position_embeddings (163,840
  // for DeepSeek-V2-Lite) would not fit the 4,096-block pool and the executor would refuse it.
  o.max_model_len = 8192;
  o.max_num_batched_tokens = 16384;
  o.enforce_eager = eager;
  o.weights.dummy = m.dummy;
  if (m.fp8) {
    o.quantize_fp8 = o.kv_cache_fp8 = true;
    o.kv_layout = actorserve::kv_cache_layout::flash_decoding;
    o.block_size = 64;
  }
  const std::string& dir = m.dir;
  auto ex = gpu::make_cuda_executor(dir, o);
  if (!ex.ok()) { report("executor: %s\n", ex.err().message.c_str()); return; }
  for (int batch : {1, 2, 3, 4, 8, 32, 128}) {
    gpu::step_batch pre;
    const int len = 128;
    for (int s = 0; s < batch; ++s) {
      gpu::step_sequence q;
      q.seq_id = uint64_t(s);
      q.new_tokens.assign(len, 5);
      for (int b = 0; b < (len + 64) / 16 + 1; ++b) q.block_table.push_back(s * 16 + b);
      q.sample = true;
      q.params.temperature = 0;
      pre.seqs.push_back(q);
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto r = run(*ex.value(), pre);
    if (!r.outcome.ok()) { report("prefill failed: %s\n", r.outcome.err().message.c_str()); return; }
    const double pre_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double dev = 0, wall = 0;
    const int steps = 32;
    for (int k = 0; k < steps; ++k) {
      gpu::step_batch d;
      for (int s = 0; s < batch; ++s) {
        auto q = pre.seqs[s];
        q.num_computed = len + k;
        q.new_tokens = {r.tokens[s].token_id};
        d.seqs.push_back(q);
      }
      const auto t1 = std::chrono::steady_clock::now();
      r = run(*ex.value(), d);
      if (!r.outcome.ok()) { report("decode failed: %s\n", r.outcome.err().message.c_str()); return; }
      wall += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
      dev += r.device_ms;
    }
    report("executor %s%s %s batch %d: prefill %d tokens/seq %.2f ms wall; decode %.3f ms/step wall, "
           "%.3f ms/step device (%d steps)\n", dir.substr(dir.find_last_of('/') + 1).c_str(),
           m.fp8 ? " (FP8 weights and KV cache)" : "", eager ? "eager" : "graphs", batch, len, pre_ms, wall / steps,
           dev / steps, steps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir, only;
  gpu::cuda_tuning tuning;
  executor_model exec_model;
  for (int i = 1; i + 1 < argc; ++i) {
    const auto on = [&] { return pick(argv[i], argv[i + 1], {"0", "1"}) == 1; };
    if (std::strcmp(argv[i], "--out") == 0) out_dir = argv[i + 1];
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
    if (std::strcmp(argv[i], "--executor-model") == 0) exec_model.dir = argv[i + 1];
    if (std::strcmp(argv[i], "--executor-dummy") == 0) exec_model.dummy = on();
    if (std::strcmp(argv[i], "--executor-fp8") == 0) exec_model.fp8 = on();
    (void)parse_tuning_flag(i, argc, argv, tuning);
  }
  const auto want = [&](const char* section) { return only.empty() || only == section; };
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  if (!out_dir.empty()) g_out = std::fopen((out_dir + "/bench_cuda_kernels.txt").c_str(), "w");
  const auto p = cuda::properties(0);
  report("device: %s, %d SMs\n", p.name.c_str(), p.num_sms);
  if (want("attention")) {
    for (int batch : {1, 16, 64, 256}) bench_attention(batch, 4096, 1, p.num_sms);
    bench_attention(1, 32768, 1, p.num_sms);
    bench_attention(1, 2048, 2048, p.num_sms);
    bench_attention(4, 512, 512, p.num_sms);
  }
  if (want("sampler"))
    for (int batch : {1, 64, 256})
      for (auto mode : {sampler_mode::greedy, sampler_mode::temperature, sampler_mode::top_k, sampler_mode::top_p,
                        sampler_mode::min_p, sampler_mode::mixed})
        bench_sampler(batch, 128256, mode);
  if (only == "offline") {
    decode_sim sim(tuning);
    bench_offline_steps(sim);
  }
  if (only == "fp8") {
    decode_sim sim(tuning);
    cuda::set_programmatic_launch(false);
    bench_fp8_sweep(sim);
    bench_fp8_fused_decode(sim, tuning.bulk);
  }
  if (only == "moe") {
    bench_moe_grouped_gemm();
    bench_moe_decode_gemm();
  }
  if (only == "moe" || only == "moe-ffn") bench_moe_ffn_paths();
  if (only == "gemm-first") bench_gemm_first_call();
  if (only == "bulk") {
    decode_sim sim(tuning);
    cuda::set_programmatic_launch(false);
    bench_bulk_variants(sim);
    cuda::set_programmatic_launch(true);
  }
  if (want("step") || want("sweep")) {
    decode_sim sim(tuning);
    cuda::set_programmatic_launch(false);
    if (want("sweep")) bench_gemm_sweep(sim);
    if (want("step")) {
      const std::vector<sim_shape> small = {{1, 256, 256}, {8, 256, 256}, {64, 256, 256}};
      const std::vector<sim_shape> offline = {{128, 128, 1152}, {256, 128, 1152}};
      bench_step_breakdown(sim, cuda::default_gemv_max_rows, true, false, small,
                           "default dispatch, programmatic launches, unfused");
      bench_step_breakdown(sim, cuda::default_gemv_max_rows, true, true, small,
                           "default dispatch, programmatic launches, fused one-token GEMVs with norm kernels "
                           "(shipped)");
      bench_step_breakdown(sim, cuda::default_gemv_max_rows, true, true, offline,
                           "the offline 128 in / 1024 out workload's batches (shipped)");
    }
    cuda::set_programmatic_launch(true);
  }
  const char* data = std::getenv("ACTORSERVE_TEST_DATA");
  if (exec_model.dir.empty() && data) exec_model.dir = std::string(data) + "/models/llama-hd128-bf16";
  if (!exec_model.dir.empty() && want("executor")) {
    bench_executor(exec_model, true, tuning);
    bench_executor(exec_model, false, tuning);
  }
  if (g_out) std::fclose(g_out);
  return 0;
}
