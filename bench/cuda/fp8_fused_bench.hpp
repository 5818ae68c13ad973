#pragma once
// bench_cuda_kernels --only fp8, last table: Llama-3-8B's one-token QKV (+ rope and the KV write)
// and gate/up (+ SiLU-and-mul) projections over FP8 E4M3 weights with row scales, bf16
// activations, µs a layer: the FP8 GEMV (in registers, and on the bulk-copy ring in groups of
// `--bulk-fp8-rows` rows, the executor's path without the fused GEMVs) followed by
// rope_kv_write / silu_and_mul, against the fused GEMVs of fp8_gemv_fused.hpp in registers and on
// the ring in groups of 4 and of 8 weight rows, and on the tensor cores (fp8_gemv_mma.hpp). Each path is replayed as a CUDA graph over 32
// layers' copies of the weights (nothing stays in L2), with plain launches and with programmatic
// dependent launches (the executor's), where the ring's copies start beside the kernel before.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_timing.hpp"
#include "decode_sim.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/linear/fp8_gemv_bulk.hpp"
#include "gpu/cuda/linear/fp8_gemv_fused.hpp"
#include "gpu/cuda/linear/fp8_gemv_mma.hpp"
#include "gpu/cuda/linear/fp8_linear.hpp"
#include "gpu/cuda/ops/elementwise.hpp"
#include "gpu/cuda/programmatic_launch.hpp"
#include "gpu/cuda/tuning.hpp"

namespace actorserve::bench_cuda {

/// One projection's E4M3 codes and row scales, a copy per layer.
struct fp8_layers {
  std::vector<uint8_t*> codes;
  std::vector<float*> scales;
  fp8_layers(int n, int k, std::mt19937& rng) {
    std::vector<uint8_t> c(size_t(n) * k);
    for (auto& b : c) b = uint8_t(rng() % 0x7e) | uint8_t(rng() & 0x80u);  // finite codes of either sign
    const std::vector<float> s(size_t(n), 0.05f / 448.0f);
    for (int l = 0; l < kLayers; ++l) {
      codes.push_back(upload(c));
      scales.push_back(upload(s));
    }
  }
  fp8_layers(const fp8_layers&) = delete;
  fp8_layers& operator=(const fp8_layers&) = delete;
  ~fp8_layers() {
    for (void* p : codes) cudaFree(p);
    for (void* p : scales) cudaFree(p);
  }
};

/// The fused FP8 decode GEMVs against the unfused pairs (see the top of this file). `bulk0`: the
/// tuning flags' grid (blocks, stages, evict-first, fp8_rows of the unfused ring GEMV).
inline void bench_fp8_fused_decode(decode_sim& sim, const gpu::bulk_gemv_tuning& bulk0) {
  const auto dt = cuda::act_dtype::bf16;
  cudaStream_t s = sim.stream();
  std::mt19937 rng(11);
  const fp8_layers qkv_w(kQkvWidth, kHidden, rng), gate_up_w(2 * kInter, kHidden, rng);
  void* x = upload(normal_bf16(kHidden, 1.0f, 12));
  float* qkv = static_cast<float*>(dmalloc(size_t(kQkvWidth) * 4));
  float* gate_up = static_cast<float*>(dmalloc(size_t(2) * kInter * 4));
  void* act = dmalloc(size_t(kInter) * 2);
  constexpr int kSlots = 1024;  // the token writes slot 300 of each layer's caches
  const size_t cache_bytes = size_t(kSlots) * kKvHeads * kHeadDim * 2;
  std::vector<void*> k_cache, v_cache;
  for (int l = 0; l < kLayers; ++l) {
    k_cache.push_back(dmalloc(cache_bytes));
    v_cache.push_back(dmalloc(cache_bytes));
  }
  std::vector<float> inv_freq(kHeadDim / 2);
  for (int i = 0; i < kHeadDim / 2; ++i) inv_freq[size_t(i)] = std::pow(500000.0f, -2.0f * i / kHeadDim);
  cuda::rope_kv_args a;
  a.qkv = qkv;
  a.positions = upload(std::vector<int32_t>{255});
  a.slots = upload(std::vector<int32_t>{300});
  a.inv_freq = upload(inv_freq);
  a.n = 1;
  a.num_heads = kHeads;
  a.num_kv_heads = kKvHeads;
  a.head_dim = kHeadDim;
  a.k_scale = 0.037f;
  a.v_scale = 0.0213f;
  const int register_rows = sim.gemm().gemv_rows_for(2 * kInter);  // the executor's gate/up rows a block
  gpu::bulk_gemv_tuning off = bulk0;
  off.plain = off.qkv = off.gate_up = off.fp8 = false;
  const auto rows = [&](int fp8_rows) {  // the ring kernels on the flags' grid in groups of fp8_rows
    gpu::bulk_gemv_tuning t = bulk0;
    t.fp8_rows = fp8_rows;
    return t;
  };

  // µs a layer of `launch(layer)` over the 32 layers; -1 where a launch did not run (rc != 0).
  const auto per_layer = [&](const std::function<int(int)>& launch, bool pdl) {
    cuda::set_programmatic_launch(pdl);
    int rc = 0;
    for (int l = 0; l < kLayers && rc == 0; ++l) rc = launch(l);  // eager, once: refused paths show here
    cudaStreamSynchronize(s);
    if (rc != 0 || cudaGetLastError() != cudaSuccess) return -1.0;
    const double ms = graph_ms(s, [&] {
      for (int l = 0; l < kLayers; ++l) (void)launch(l);
    }, 20);
    return ms < 0 ? -1.0 : ms * 1000.0 / kLayers;
  };
  struct path {
    std::string name;
    std::function<int(int)> launch;
  };
  // Row 2 (the ring FP8 GEMV and the element-wise kernel: the executor without the fused GEMVs)
  // is what the last column divides by.
  const auto table = [&](const char* what, size_t weight_bytes, const std::vector<path>& paths) {
    report("\n## %s, FP8 weights (one scale per row), batch 1: us a layer ('-': the path does not run here)\n"
           "| path | plain launches | programmatic launches | weight TB/s (programmatic) | / row 2 (programmatic) |\n"
           "|---|---|---|---|---|\n", what);
    std::vector<double> plain_us, pdl_us;
    for (const path& p : paths) {
      plain_us.push_back(per_layer(p.launch, false));
      pdl_us.push_back(per_layer(p.launch, true));
    }
    const auto cell = [](double us) {
      if (us >= 0) report(" %.2f |", us);
      else report(" - |");
    };
    for (size_t i = 0; i < paths.size(); ++i) {
      report("| %s |", paths[i].name.c_str());
      cell(plain_us[i]);
      cell(pdl_us[i]);
      if (pdl_us[i] < 0) report(" - | - |\n");
      else if (pdl_us[1] <= 0) report(" %.2f | - |\n", double(weight_bytes) / pdl_us[i] / 1e6);
      else report(" %.2f | %.3f |\n", double(weight_bytes) / pdl_us[i] / 1e6, pdl_us[i] / pdl_us[1]);
    }
  };
  const std::string unfused_ring = "fp8 ring gemv (" + std::to_string(bulk0.fp8_rows) + " rows)";
  for (const bool kv_fp8 : {true, false}) {
    a.kv_fp8 = kv_fp8;
    const auto rope_args = [&](int l) {
      cuda::rope_kv_args r = a;
      r.k_cache = k_cache[size_t(l)];
      r.v_cache = v_cache[size_t(l)];
      return r;
    };
    const auto fused_qkv = [&](bool ring, const gpu::bulk_gemv_tuning& t) {  // ring: refused where it cannot run
      return [&, ring, t](int l) {
        const uint8_t* q = qkv_w.codes[size_t(l)];
        const float* sc = qkv_w.scales[size_t(l)];
        return ring ? cuda::fp8_gemv_bulk_qkv_rope(dt, x, kHidden, q, sc, rope_args(l), s, t)
                    : cuda::fp8_gemv_qkv_rope(dt, x, kHidden, q, sc, rope_args(l), s, t);
      };
    };
    const auto unfused_qkv = [&](bool ring) {
      return [&, ring](int l) {
        const uint8_t* q = qkv_w.codes[size_t(l)];
        const float* sc = qkv_w.scales[size_t(l)];
        const int rc = ring ? cuda::fp8_gemv_bulk(dt, x, kHidden, q, sc, kQkvWidth, qkv, 0.0f, s,
                                                  cuda::fp8_scale_mode::per_row, bulk0)
                            : cuda::fp8_gemv(dt, x, 1, kHidden, q, sc, kQkvWidth, qkv, 0.0f, s);
        return rc != 0 ? rc : cuda::rope_kv_write(dt, rope_args(l), s);
      };
    };
    table(kv_fp8 ? "qkv (6144 x 4096) + rope + FP8 KV write" : "qkv (6144 x 4096) + rope + bf16 KV write",
          size_t(kQkvWidth) * kHidden,
          {{"fp8 gemv (registers) + rope_kv_write", unfused_qkv(false)},
           {unfused_ring + " + rope_kv_write", unfused_qkv(true)},
           {"fused, registers (a block a rotary pair)", fused_qkv(false, off)},
           {"fused, ring, 4 rows (2 pairs)", fused_qkv(true, rows(4))},
           {"fused, ring, 8 rows (4 pairs)", fused_qkv(true, rows(8))},
           {"fused, tensor cores, 16 rows (8 pairs)", [&](int l) {
              return cuda::fp8_gemv_mma_qkv_rope(dt, x, kHidden, qkv_w.codes[size_t(l)], qkv_w.scales[size_t(l)],
                                                 rope_args(l), s, bulk0);
            }}});
  }
  const auto fused_gate_up = [&](bool ring, const gpu::bulk_gemv_tuning& t) {
    return [&, ring, t](int l) {
      const uint8_t* q = gate_up_w.codes[size_t(l)];
      const float* sc = gate_up_w.scales[size_t(l)];
      return ring ? cuda::fp8_gemv_bulk_gate_up_silu(dt, x, kHidden, q, sc, kInter, act, s, t)
                  : cuda::fp8_gemv_gate_up_silu(dt, x, kHidden, q, sc, kInter, act, register_rows, s, t);
    };
  };
  const auto unfused_gate_up = [&](bool ring) {
    return [&, ring](int l) {
      const uint8_t* q = gate_up_w.codes[size_t(l)];
      const float* sc = gate_up_w.scales[size_t(l)];
      const int rc = ring ? cuda::fp8_gemv_bulk(dt, x, kHidden, q, sc, 2 * kInter, gate_up, 0.0f, s,
                                                cuda::fp8_scale_mode::per_row, bulk0)
                          : cuda::fp8_gemv(dt, x, 1, kHidden, q, sc, 2 * kInter, gate_up, 0.0f, s);
      return rc != 0 ? rc : cuda::silu_and_mul(dt, gate_up, 1, kInter, act, s);
    };
  };
  table("gate_up (28672 x 4096) + SiLU-and-mul", size_t(2) * kInter * kHidden,
        {{"fp8 gemv (registers) + silu_and_mul", unfused_gate_up(false)},
         {unfused_ring + " + silu_and_mul", unfused_gate_up(true)},
         {"fused, registers (" + std::to_string(register_rows) + " rows a block)", fused_gate_up(false, off)},
         {"fused, ring, 4 rows (2 gate + 2 up)", fused_gate_up(true, rows(4))},
         {"fused, ring, 8 rows (4 gate + 4 up)", fused_gate_up(true, rows(8))},
         {"fused, tensor cores, 16 rows (8 gate + 8 up)", [&](int l) {
            return cuda::fp8_gemv_mma_gate_up_silu(dt, x, kHidden, gate_up_w.codes[size_t(l)],
                                                   gate_up_w.scales[size_t(l)], kInter, act, s, bulk0);
          }}});
  cuda::set_programmatic_launch(false);
  cudaDeviceSynchronize();
  for (void* p : k_cache) cudaFree(p);
  for (void* p : v_cache) cudaFree(p);
  for (const void* p : {static_cast<const void*>(x), static_cast<const void*>(qkv), static_cast<const void*>(gate_up),
                        static_cast<const void*>(act), static_cast<const void*>(a.positions),
                        static_cast<const void*>(a.slots), static_cast<const void*>(a.inv_freq)})
    cudaFree(const_cast<void*>(p));
}

}  // namespace actorserve::bench_cuda
