// CUDA kernel and executor timings on the device: paged attention (decode and prefill), the
// device sampler, and the executor's prefill and decode steps (eager and graph) on the
// llama-hd128-bf16 fixture.   bench_cuda_kernels [--out DIR]
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/cuda/attention_plan.hpp"
#include "gpu/cuda/cuda_executor.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/kernels.hpp"

namespace cuda = actorserve::gpu::cuda;
namespace gpu = actorserve::gpu;

namespace {

FILE* g_out = nullptr;

template <class... A>
void report(const char* fmt, A... a) {
  std::printf(fmt, a...);
  if (g_out) std::fprintf(g_out, fmt, a...);
}

template <class F>
double time_ms(F&& f, int iters = 20) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) f();
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) f();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / iters;
}

void* dmalloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) { std::fprintf(stderr, "cudaMalloc %zu failed\n", bytes); std::exit(1); }
  cudaMemset(p, 0, bytes);
  return p;
}

template <class T>
T* upload(const std::vector<T>& v) {
  T* p = static_cast<T*>(dmalloc(v.size() * sizeof(T) + 16));
  cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
  return p;
}

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
  cuda::attention_args a;
  a.q = static_cast<float*>(dmalloc(size_t(tokens) * (H + 2 * KVH) * D * 4));
  a.q_stride = (H + 2 * KVH) * D;
  a.k_cache = kc;
  a.v_cache = vc;
  a.block_tables = upload(bt);
  a.seqs = upload(seqs);
  a.items = upload(plan.items);
  a.combines = upload(plan.combines);
  a.counts = upload(counts);
  a.item_grid = int(plan.items.size());
  a.combine_grid = int(plan.combines.size());
  a.partial_acc = static_cast<float*>(dmalloc(size_t(max_partials) * cuda::attn_tile_rows * D * 4));
  a.partial_ml = static_cast<float*>(dmalloc(size_t(max_partials) * cuda::attn_tile_rows * 2 * 4));
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
                        static_cast<const void*>(a.partial_acc), static_cast<const void*>(a.partial_ml),
                        static_cast<const void*>(a.out)})
    cudaFree(const_cast<void*>(p));
}

void bench_sampler(int batch, int vocab, bool random) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0, 3);
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  for (auto& x : logits) x = nd(rng);
  std::vector<cuda::sample_seq> ss(static_cast<size_t>(batch));
  for (int i = 0; i < batch; ++i) {
    ss[i].temperature = random ? 0.8f : 0.0f;
    ss[i].top_k = random && i % 2 ? 50 : -1;
    ss[i].top_p = random ? 0.9f : 1.0f;
    ss[i].num_logprobs = 5;
    ss[i].seed = uint64_t(i);
  }
  float* d_logits = upload(logits);
  auto* d_ss = upload(ss);
  auto* d_pen = upload(std::vector<cuda::penalty_token>(1));
  auto* d_mask = upload(std::vector<int32_t>(1));
  auto* d_out = static_cast<cuda::sample_out*>(dmalloc(size_t(batch) * sizeof(cuda::sample_out)));
  const double ms = time_ms([&] { cuda::sample_tokens(d_logits, batch, vocab, d_ss, d_pen, d_mask, d_out, nullptr); }, 5);
  report("sampler batch %d vocab %d %s (5 top logprobs): %.3f ms\n", batch, vocab,
         random ? "temperature 0.8, top-p 0.9, top-k 50 on half" : "greedy", ms);
  cudaFree(d_logits);
  cudaFree(d_ss);
  cudaFree(d_pen);
  cudaFree(d_mask);
  cudaFree(d_out);
}

gpu::step_result run(gpu::executor& ex, gpu::step_batch b) {
  std::promise<gpu::step_result> pr;
  auto f = pr.get_future();
  ex.submit(std::move(b), [&](gpu::step_result r) { pr.set_value(std::move(r)); });
  return f.get();
}

void bench_executor(const std::string& dir, bool eager) {
  gpu::cuda_executor_options o;
  o.num_blocks_override = 4096;
  o.max_num_batched_tokens = 16384;
  o.enforce_eager = eager;
  auto ex = gpu::make_cuda_executor(dir, o);
  if (!ex.ok()) { report("executor: %s\n", ex.err().message.c_str()); return; }
  for (int batch : {1, 32, 128}) {
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
    report("executor llama-hd128-bf16 %s batch %d: prefill %d tokens/seq %.2f ms wall; decode %.3f ms/step wall, "
           "%.3f ms/step device (%d steps)\n", eager ? "eager" : "graphs", batch, len, pre_ms, wall / steps,
           dev / steps, steps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--out") == 0) out_dir = argv[i + 1];
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 0;
  }
  if (!out_dir.empty()) g_out = std::fopen((out_dir + "/bench_cuda_kernels.txt").c_str(), "w");
  const auto p = cuda::properties(0);
  report("device: %s, %d SMs\n", p.name.c_str(), p.num_sms);
  for (int batch : {1, 16, 64, 256}) bench_attention(batch, 4096, 1, p.num_sms);
  bench_attention(1, 32768, 1, p.num_sms);
  bench_attention(1, 2048, 2048, p.num_sms);
  bench_attention(4, 512, 512, p.num_sms);
  for (bool random : {false, true}) bench_sampler(256, 128256, random);
  bench_sampler(1, 128256, true);
  const char* data = std::getenv("ACTORSERVE_TEST_DATA");
  if (data) {
    bench_executor(std::string(data) + "/models/llama-hd128-bf16", true);
    bench_executor(std::string(data) + "/models/llama-hd128-bf16", false);
  }
  if (g_out) std::fclose(g_out);
  return 0;
}
