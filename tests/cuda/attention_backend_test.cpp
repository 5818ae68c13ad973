// Both attention backends (vllm, flash-decoding) against a CPU reference in double precision over
// the same rounded cache: decode and prefill chunks in one step, KV lengths 1, 17, 97 and 1000
// (not multiples of the block size), batch 1 and 257, GQA groups 1-8, head dims 64 and 128,
// bf16 and fp16, shuffled block tables; outputs and partials poisoned before each run; Q and the
// newest keys written late by a preceding kernel (programmatic dependent launch). The FP8 cache
// (--kv-cache-dtype fp8, flash-decoding) against the reference over its dequantized values, and
// its decode kernel against the 16-bit decode kernels over the same values.
// Sliding windows on every decode and prefill kernel, whole and split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "cuda_test_util.hpp"
#include "paged_attention_case.hpp"
#include "gpu/cuda/attention/backend.hpp"
#include "bench/cuda/probe/probe.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/model/fp8.hpp"

namespace actorserve::testing {
namespace {

using cuda::act_dtype;

/// Cascade: sequences (decodes) whose block tables start with the same `prefix_blocks` blocks.
struct shared_prefix {
  int32_t prefix_blocks;
  std::vector<int32_t> seqs;
};

struct backend_case {
  int H, KVH, D, block_size;
  std::vector<seq_spec> seqs;
  std::vector<shared_prefix> groups = {};  ///< planned as cascade groups, when given
  int window = 0;                            ///< sliding window (attention_shape::window; 0: none)
  /// With `late`: every key and value, not only the newest rows, is written by the late kernel,
  /// as for the sampled rows of a prefill-carrying step's last layer (attn_launch::
  /// older_keys_cached false).
  bool all_keys_late = false;
};

/// Runs `c` through `backend` (decode grid forced to `decode_grid` when > 0, which makes the
/// decode kernel stride over its items); returns max |gpu - ref| / max |ref|. `late`: Q and the
/// newest K/V row of every sequence are poisoned and written by a kernel that runs 20 µs before
/// the attention it precedes (programmatic launch: the decode kernels start early and must wait
/// for it before they read them); decode-only cases. `tuning` picks the backend's kernels.
/// --kv-cache-dtype fp8: per-layer scales of the E4M3 cache. `decoded`: the run takes the 16-bit
/// kernels instead, over the cache's values (code x scale) as T, which are exact where the scales
/// are powers of two (the FP8 kernels' reference on the device).
struct fp8_scales {
  float k = 1.0f, v = 1.0f;
  bool decoded = false;
};

/// Outputs of one run: the kernels' (as floats) and the double-precision reference.
struct backend_outputs {
  std::vector<float> got, ref;
};

backend_outputs run_backend_outputs(act_dtype dt, kv_cache_layout layout, const backend_case& c, uint32_t seed,
                                    int decode_grid = 0, bool late = false, const gpu::attention_tuning& tuning = {},
                                    const fp8_scales* fp8 = nullptr) {
  cuda::attention_shape shape;
  shape.dt = dt;
  shape.num_heads = c.H;
  shape.num_kv_heads = c.KVH;
  shape.head_dim = c.D;
  shape.block_size = c.block_size;
  const bool e4m3 = fp8 != nullptr && !fp8->decoded;  // the kernels read E4M3 codes
  shape.kv_fp8 = e4m3;
  shape.window = c.window;
  auto made = cuda::make_attention_backend(layout, shape, tuning);
  EXPECT_TRUE(made) << (made ? "" : made.err().message);
  if (!made) return {};
  const cuda::attention_backend& backend = **made;
  EXPECT_EQ(backend.name().find("generic"), std::string::npos);
  std::mt19937 rng(seed);
  paged_inputs in = make_paged_inputs(dt, c.H, c.KVH, c.D, c.block_size, c.seqs, rng);
  in.window = c.window;
  const int H = c.H, KVH = c.KVH, D = c.D, bs = c.block_size, n_tokens = in.n_tokens, q_stride = in.q_stride;
  const std::vector<cuda::attn_seq>& seqs = in.seqs;
  gpu::cascade_plan cascade;
  for (const shared_prefix& g : c.groups) {  // the members' tables start with the first member's blocks
    for (int32_t s : g.seqs)
      std::copy_n(in.block_tables.begin() + seqs[size_t(g.seqs[0])].bt_offset, g.prefix_blocks,
                  in.block_tables.begin() + seqs[size_t(s)].bt_offset);
    cascade.groups.push_back({g.prefix_blocks, g.seqs});
  }
  cuda::attention_plan plan = backend.plan(seqs, cascade);
  EXPECT_EQ(plan.prefix_items.empty(), c.groups.empty() || !backend.takes_cascade());
  EXPECT_LE(plan.num_partials, backend.partial_capacity(int(seqs.size())));
  EXPECT_LE(plan.prefix_rows.size(), size_t(backend.prefix_row_capacity(int(seqs.size()))));
  cuda::attention_grids grids = backend.grids(plan);
  if (decode_grid > 0) grids.decode = decode_grid;
  if (decode_grid > 0 && grids.prefix > 0) grids.prefix = 3;  // the prefix kernel strides too
  const int32_t n_prefill = int32_t(plan.items.size()) - plan.num_decode_items;
  // As the executor stages them: decode pieces carry the block of their first key.
  cuda::set_first_blocks(plan, in.block_tables, bs);
  // FP8: the random 16-bit values' E4M3 codes of value / scale; the reference reads code x scale,
  // and so does a `decoded` run's 16-bit cache.
  std::vector<uint8_t> k8, v8;
  std::vector<float> k_deq, v_deq;
  if (fp8) {
    k8.resize(in.k_cache.size());
    v8.resize(in.v_cache.size());
    k_deq.resize(k8.size());
    v_deq.resize(v8.size());
    for (size_t i = 0; i < k8.size(); ++i) {
      k8[i] = gpu::e4m3_encode(from_act_bits(dt, in.k_cache[i]) / fp8->k);
      v8[i] = gpu::e4m3_encode(from_act_bits(dt, in.v_cache[i]) / fp8->v);
      k_deq[i] = gpu::e4m3_to_f32(k8[i]) * fp8->k;
      v_deq[i] = gpu::e4m3_to_f32(v8[i]) * fp8->v;
      if (fp8->decoded) {
        in.k_cache[i] = to_act_bits(dt, k_deq[i]);
        in.v_cache[i] = to_act_bits(dt, v_deq[i]);
      }
    }
  }
  // Late: the newest rows poisoned (NaN; 448 for E4M3, whose NaN code reads as 480) until the copy.
  std::vector<uint16_t> k_now = in.k_cache, v_now = in.v_cache;
  std::vector<uint8_t> k8_now = k8, v8_now = v8;
  if (late && c.all_keys_late) {
    std::fill(k_now.begin(), k_now.end(), uint16_t(0xffff));
    std::fill(v_now.begin(), v_now.end(), uint16_t(0xffff));
    std::fill(k8_now.begin(), k8_now.end(), uint8_t(0x7e));
    std::fill(v8_now.begin(), v8_now.end(), uint8_t(0x7e));
  } else if (late) {
    for (const cuda::attn_seq& s : seqs) {
      const int pos = s.context_len - 1;
      const size_t row = (size_t(in.block_tables[s.bt_offset + pos / bs]) * bs + pos % bs) * KVH * D;
      std::fill_n(k_now.begin() + row, KVH * D, uint16_t(0xffff));
      std::fill_n(v_now.begin() + row, KVH * D, uint16_t(0xffff));
      if (e4m3) {
        std::fill_n(k8_now.begin() + row, KVH * D, uint8_t(0x7e));
        std::fill_n(v8_now.begin() + row, KVH * D, uint8_t(0x7e));
      }
    }
  }
  dev_vec<uint8_t> d_k8(e4m3 ? k8_now : std::vector<uint8_t>(1)), d_v8(e4m3 ? v8_now : std::vector<uint8_t>(1));
  dev_vec<uint8_t> d_k8_late(e4m3 ? k8 : std::vector<uint8_t>(1)), d_v8_late(e4m3 ? v8 : std::vector<uint8_t>(1));
  dev_vec<float> d_q(in.q), d_q_late(in.q);
  dev_vec<uint16_t> d_k(k_now), d_v(v_now), d_k_late(in.k_cache), d_v_late(in.v_cache);
  if (late) d_q.poison();
  dev_vec<int32_t> d_bt(in.block_tables);
  dev_vec<cuda::attn_seq> d_seqs(seqs);
  std::vector<cuda::attn_item> items = plan.items;  // staged as the executor does: prefix pieces last
  items.insert(items.end(), plan.prefix_items.begin(), plan.prefix_items.end());
  dev_vec<cuda::attn_item> d_items(items.empty() ? std::vector<cuda::attn_item>(1) : items);
  dev_vec<cuda::attn_prefix_row> d_rows(plan.prefix_rows.empty() ? std::vector<cuda::attn_prefix_row>(1)
                                                                  : plan.prefix_rows);
  dev_vec<cuda::attn_combine> d_comb(plan.combines.empty() ? std::vector<cuda::attn_combine>(1) : plan.combines);
  dev_vec<int32_t> d_counts(std::vector<int32_t>{n_prefill, int32_t(plan.combines.size()), plan.num_decode_items,
                                                 int32_t(plan.prefix_items.size())});
  const size_t slots = size_t(std::max(1, plan.num_partials));
  dev_vec<float> d_po(slots * cuda::attn_tile_rows * D), d_pl(slots * cuda::attn_tile_rows * 2);
  dev_vec<uint16_t> d_out(size_t(n_tokens) * H * D);
  d_out.poison();
  d_po.poison();
  d_pl.poison();
  cuda::attn_launch a;
  a.q = d_q.get();
  a.q_stride = q_stride;
  a.k_cache = d_k.get();
  a.v_cache = d_v.get();
  a.block_tables = d_bt.get();
  a.seqs = d_seqs.get();
  a.items = d_items.get();
  a.combines = d_comb.get();
  a.counts = d_counts.get();
  a.prefill_grid = late ? 0 : grids.prefill + 3;  // extra CTAs must exit
  a.decode_grid = grids.decode;
  a.combine_grid = grids.combine;
  a.prefix_rows = d_rows.get();
  a.prefix_grid = grids.prefix;
  a.partial_o = d_po.get();
  a.partial_lse = d_pl.get();
  a.out = d_out.get();
  a.num_heads = H;
  a.num_kv_heads = KVH;
  a.head_dim = D;
  a.block_size = bs;
  a.scale = 1.0f / std::sqrt(float(D));
  a.older_keys_cached = !c.all_keys_late;
  if (e4m3) {
    a.k_cache = d_k8.get();
    a.v_cache = d_v8.get();
    a.kv_fp8 = true;
    a.k_scale = fp8->k;
    a.v_scale = fp8->v;
  }
  if (late) {
    const cuda::late_copy jobs[3] = {{d_q.get(), d_q_late.get(), d_q.size() * sizeof(float)},
                                     e4m3 ? cuda::late_copy{d_k8.get(), d_k8_late.get(), d_k8.size()}
                                          : cuda::late_copy{d_k.get(), d_k_late.get(), d_k.size() * 2},
                                     e4m3 ? cuda::late_copy{d_v8.get(), d_v8_late.get(), d_v8.size()}
                                          : cuda::late_copy{d_v.get(), d_v_late.get(), d_v.size() * 2}};
    EXPECT_EQ(cuda::launch_late_copies(jobs, 20000, nullptr), 0);
  }
  EXPECT_EQ(backend.run(a, nullptr), 0);
  auto bits = d_out.download();
  backend_outputs r;
  r.got.resize(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) r.got[i] = from_act_bits(dt, bits[i]);
  r.ref = fp8 ? reference_attention(in, k_deq, v_deq) : reference_attention(dt, in);
  return r;
}

/// run_backend_outputs' max |gpu - ref| / max |ref|.
double run_backend_case(act_dtype dt, kv_cache_layout layout, const backend_case& c, uint32_t seed,
                        int decode_grid = 0, bool late = false, const gpu::attention_tuning& tuning = {},
                        const fp8_scales* fp8 = nullptr) {
  const backend_outputs r = run_backend_outputs(dt, layout, c, seed, decode_grid, late, tuning, fp8);
  return r.got.empty() ? INFINITY : rel_max_err(r.got, r.ref);
}

struct param {
  act_dtype dt;
  kv_cache_layout layout;
};

class AttentionBackend : public ::testing::TestWithParam<param> {
 protected:
  void SetUp() override { AS_REQUIRE_CUDA(); }
  /// The vLLM block size, or an awkward flash-decoding one (80 for 16, 96 for 32).
  int block_size(int vllm_bs) const {
    return GetParam().layout == kv_cache_layout::vllm ? vllm_bs : 64 + 16 * (vllm_bs / 16);
  }
};

TEST_P(AttentionBackend, DecodeAndPrefillMatchReference) {
  const auto [dt, layout] = GetParam();
  // Whole prompts, chunks over a cached prefix and decode tokens in one step.
  const std::vector<seq_spec> mixed = {{1, 1}, {17, 17}, {97, 30}, {1000, 1}, {1000, 40}, {17, 1}, {97, 1}, {300, 2}};
  // Flash-decoding runs each at an awkward block size (its cp.async kernel) and at 64 or 128
  // tokens (its TMA kernel).
  struct config { int D, G, bs; };
  const bool fd = layout == kv_cache_layout::flash_decoding;
  for (const config& k : {config{128, 1, 16}, config{128, 2, 16}, config{128, 4, 16}, config{128, 8, 16},
                          config{128, 4, 8}, config{128, 4, 32}, config{64, 1, 16}, config{64, 4, 16},
                          config{64, 8, 32}}) {
    const int D = k.D, G = k.G, bs = k.bs;
    if (fd && bs == 8) continue;
    for (int block : {block_size(bs), fd ? 4 * bs : 0}) {
      if (block == 0) continue;
      const backend_case c{2 * G, 2, D, block, mixed};
      const double err = run_backend_case(dt, layout, c, 100 + D + G + bs);
      std::printf("backend %s D=%d G=%d bs=%d: max abs err / max abs ref %.3g\n", to_string(layout), D, G,
                  c.block_size, err);
      EXPECT_LT(err, 1e-2) << "D=" << D << " G=" << G << " bs=" << c.block_size;
    }
  }
}

TEST_P(AttentionBackend, SingleLongDecodeSplitsAndMerges) {
  const auto [dt, layout] = GetParam();
  const bool fd = layout == kv_cache_layout::flash_decoding;
  // 32 and 64 query heads over 8 KV heads (the merge's one and two chunks a thread; 32768
  // merges 32 pieces: one step of 32 loads a thread, or two of 16). Flash-decoding also at 64-token
  // blocks (its TMA kernel; 80 runs the cp.async one), and with a grid of 7 CTAs that each
  // take many pieces and merge some of them.
  struct config { int H, len, bs, grid; };
  for (const config k : {config{32, 1, 0, 0}, config{32, 17, 0, 0}, config{32, 97, 0, 0}, config{32, 1000, 0, 0},
                         config{32, 5000, 0, 0}, config{64, 1000, 0, 0}, config{64, 32768, 0, 0},
                         config{64, 32768, 0, 7}, config{32, 5000, 64, 0}, config{64, 32768, 64, 0},
                         config{64, 32768, 64, 7}}) {
    if (k.bs == 64 && !fd) continue;
    const backend_case c{k.H, 8, 128, k.bs ? k.bs : block_size(16), {{k.len, 1}}};
    const double err = run_backend_case(dt, layout, c, 7 + k.len, k.grid);
    std::printf("backend %s %d/8 batch 1 kv %d block %d grid %d: max abs err / max abs ref %.3g\n", to_string(layout),
                k.H, k.len, c.block_size, k.grid, err);
    EXPECT_LT(err, 1e-2) << k.H << " heads, " << k.len << ", block " << c.block_size << ", grid " << k.grid;
  }
}

TEST_P(AttentionBackend, SeparateMergeKernelMatchesReference) {
  const auto [dt, layout] = GetParam();
  // split_merge::separate_kernel: split pieces merged by combine_kernel.cu instead of by the
  // last piece's CTA, as when the backend cannot allocate its split counters. One and two
  // chunks a thread (32/8, 64/8), 2 to 32 pieces, a batch with some sequences split.
  gpu::attention_tuning tuning;
  tuning.merge = gpu::split_merge::separate_kernel;
  struct config { int H; std::vector<seq_spec> seqs; };
  const config configs[] = {{32, {{5000, 1}}}, {64, {{32768, 1}}}, {64, {{1000, 1}, {17, 1}, {3000, 1}}}};
  for (const config& k : configs) {
    const double err =
        run_backend_case(dt, layout, backend_case{k.H, 8, 128, block_size(16), k.seqs}, 41 + k.H, 0, false, tuning);
    std::printf("backend %s separate merge %d/8, %zu seqs: max abs err / max abs ref %.3g\n", to_string(layout), k.H,
                k.seqs.size(), err);
    EXPECT_LT(err, 1e-2) << k.H << " heads, " << k.seqs.size() << " seqs";
  }
}

TEST_P(AttentionBackend, CpAsyncDecodeKernelMatchesReference) {
  const auto [dt, layout] = GetParam();
  if (layout != kv_cache_layout::flash_decoding) GTEST_SKIP() << "decode_kernel picks flash-decoding's kernel";
  // decode_kernel::cp_async, the kernel the TMA one falls back to without descriptors: whole
  // and split pieces, GQA 4 and 8, a grid that strides over the items.
  gpu::attention_tuning tuning;
  tuning.decode = gpu::decode_kernel::cp_async;
  struct config { int H; std::vector<seq_spec> seqs; int grid; };
  const config configs[] = {{32, {{5000, 1}}, 0}, {64, {{32768, 1}}, 7}, {32, {{1000, 1}, {17, 1}, {3000, 1}}, 0}};
  for (const config& k : configs) {
    const double err =
        run_backend_case(dt, layout, backend_case{k.H, 8, 128, 64, k.seqs}, 53 + k.H, k.grid, false, tuning);
    std::printf("backend %s cp.async decode %d/8, %zu seqs: max abs err / max abs ref %.3g\n", to_string(layout), k.H,
                k.seqs.size(), err);
    EXPECT_LT(err, 1e-2) << k.H << " heads, " << k.seqs.size() << " seqs";
  }
}

TEST_P(AttentionBackend, Fp8CacheMatchesReference) {
  const auto [dt, layout] = GetParam();
  if (layout != kv_cache_layout::flash_decoding) {
    // The vLLM layout has no FP8 kernel: refused when the backend is built, naming the way around.
    cuda::attention_shape shape;
    shape.dt = dt;
    shape.num_heads = 8;
    shape.num_kv_heads = 2;
    shape.head_dim = 128;
    shape.kv_fp8 = true;
    auto made = cuda::make_attention_backend(layout, shape);
    ASSERT_FALSE(made);
    EXPECT_NE(made.err().message.find("--kv-cache-dtype fp8"), std::string::npos) << made.err().message;
    EXPECT_NE(made.err().message.find("--paged-kv-cache-type flash-decoding"), std::string::npos);
    return;
  }
  // --kv-cache-dtype fp8: E4M3 K/V with per-layer scales, against the double-precision reference
  // over the dequantized cache (code x scale). Decode and prefill chunks in one step at the
  // awkward lengths and block sizes, GQA 1-8, head dims 64 and 128, whole and split pieces, a
  // grid that strides, the TMA kernel's block size (the FP8 cache takes the cp.async decode
  // kernel and the mma.sync prefill kernel whichever are asked for), and Q written late.
  struct config { int H, KVH, D, bs; std::vector<seq_spec> seqs; int grid; bool late; fp8_scales sc; };
  const std::vector<seq_spec> lens = {{1, 1}, {17, 17}, {97, 30}, {1000, 1}, {1000, 40}, {17, 1}, {97, 1}, {300, 2}};
  const std::vector<seq_spec> decodes = {{1, 1}, {17, 1}, {97, 1}, {1000, 1}, {300, 1}};
  const config configs[] = {
      {2, 2, 128, 80, lens, 0, false, {1.0f, 1.0f}},        {8, 2, 128, 80, lens, 0, false, {0.0371f, 0.011f}},
      {16, 2, 128, 96, lens, 0, false, {0.02f, 0.5f}},      {8, 2, 64, 80, lens, 0, false, {0.05f, 0.03f}},
      {16, 2, 64, 64, lens, 0, false, {0.05f, 0.03f}},      {32, 8, 128, 80, {{5000, 1}}, 0, false, {0.01f, 0.02f}},
      {64, 8, 128, 64, {{32768, 1}}, 7, false, {0.03f, 0.02f}},
      {16, 4, 128, 80, decodes, 7, false, {0.04f, 0.04f}}, {16, 4, 128, 80, decodes, 0, true, {0.04f, 0.04f}}};
  for (const config& k : configs) {
    const double err = run_backend_case(dt, layout, backend_case{k.H, k.KVH, k.D, k.bs, k.seqs}, 71 + k.H + k.D,
                                        k.grid, k.late, {}, &k.sc);
    std::printf("backend %s fp8 cache %d/%d D=%d bs=%d grid %d late %d: max abs err / max abs ref %.3g\n",
                to_string(layout), k.H, k.KVH, k.D, k.bs, k.grid, int(k.late), err);
    EXPECT_LT(err, 1e-2) << k.H << "/" << k.KVH << " D=" << k.D << " bs=" << k.bs << " grid " << k.grid;
  }
}

/// sum |a - b| / sum |b|: the mean deviation of a from b, relative to b's mean magnitude.
double mean_rel_dev(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += std::fabs(double(a[i]) - double(b[i]));
    den += std::fabs(double(b[i]));
  }
  return a.size() == b.size() && den > 0 ? num / den : INFINITY;
}

TEST_P(AttentionBackend, Fp8DecodeMatchesSixteenBitDecode) {
  const auto [dt, layout] = GetParam();
  if (layout != kv_cache_layout::flash_decoding) GTEST_SKIP() << "the FP8 cache runs on flash-decoding only";
  // The FP8-cache decode kernel (E4M3 byte tiles converted in registers, its own fragment order)
  // against the 16-bit decode kernels over the same values: with power-of-two scales every
  // code x scale is a T value and q x k_scale rounds as q does, so the two differ only in the
  // order of fp32 sums (within an MMA, and in the merge where their split plans differ), which
  // moves an output or a probability across a rounding boundary of T now and then: their mean
  // deviation stays far below a unit in the last place, while a wrong fragment, swizzle, dim
  // order, scale or conversion moves every output. Both also against the double-precision
  // reference. Decodes at lengths that are not multiples of the 64-key tile (1, 17, 63, 65, ...),
  // block sizes 64, 128 and 256 (one block-table read a tile) and 80, 96, 112 (a read a row),
  // GQA 1, 2, 4 and 8, head dims 64 and 128, split pieces merged in the kernel, and a grid of 7
  // that strides over the items.
  struct config { int H, KVH, D, bs; std::vector<seq_spec> seqs; int grid; fp8_scales sc; };
  const std::vector<seq_spec> lens = {{1, 1}, {17, 1}, {63, 1}, {64, 1}, {65, 1}, {97, 1}, {300, 1}, {1000, 1}, {2049, 1}};
  const config configs[] = {
      {2, 2, 128, 64, lens, 0, {0.5f, 0.25f}},         {8, 4, 128, 80, lens, 0, {0.125f, 2.0f}},
      {16, 4, 64, 96, lens, 0, {1.0f, 0.5f}},          {32, 4, 128, 128, lens, 0, {0.25f, 0.125f}},
      {16, 2, 64, 64, lens, 0, {0.5f, 0.5f}},          {8, 8, 64, 112, lens, 0, {2.0f, 0.25f}},
      {32, 8, 128, 64, {{5000, 1}, {4097, 1}, {300, 1}}, 0, {0.25f, 0.5f}},
      {64, 8, 64, 80, {{32768, 1}}, 7, {0.5f, 0.25f}}, {16, 2, 128, 256, {{20000, 1}, {33, 1}}, 0, {1.0f, 1.0f}}};
  // A quarter of a unit in the last place of bf16 (8 bits) / fp16 (11 bits), on average.
  const double mean_bound = dt == act_dtype::bf16 ? 0x1p-10 : 0x1p-13;
  for (const config& k : configs) {
    const backend_case c{k.H, k.KVH, k.D, k.bs, k.seqs};
    const uint32_t seed = 91 + k.H + k.D + k.bs;
    fp8_scales decoded = k.sc;
    decoded.decoded = true;
    const backend_outputs e4m3 = run_backend_outputs(dt, layout, c, seed, k.grid, false, {}, &k.sc);
    const backend_outputs sixteen = run_backend_outputs(dt, layout, c, seed, k.grid, false, {}, &decoded);
    ASSERT_FALSE(e4m3.got.empty() || sixteen.got.empty());
    const double mean = mean_rel_dev(e4m3.got, sixteen.got), max = rel_max_err(e4m3.got, sixteen.got);
    const double vs_ref = rel_max_err(e4m3.got, e4m3.ref);
    std::printf("backend %s fp8 decode %d/%d D=%d bs=%d grid %d: vs the 16-bit kernel mean %.3g max %.3g, vs the "
                "reference %.3g (16-bit kernel vs the reference %.3g)\n",
                to_string(layout), k.H, k.KVH, k.D, k.bs, k.grid, mean, max, vs_ref,
                rel_max_err(sixteen.got, sixteen.ref));
    const std::string what = std::to_string(k.H) + "/" + std::to_string(k.KVH) + " D=" + std::to_string(k.D) +
                             " bs=" + std::to_string(k.bs) + " grid " + std::to_string(k.grid);
    EXPECT_LE(mean, mean_bound) << what;
    EXPECT_LT(max, 1e-2) << what;
    EXPECT_LT(vs_ref, 1e-2) << what;
  }
}

TEST_P(AttentionBackend, DecodeBatch257MatchesReference) {
  const auto [dt, layout] = GetParam();
  std::vector<seq_spec> seqs;
  const int lens[] = {1, 17, 97, 1000, 33, 250};
  for (int i = 0; i < 257; ++i) seqs.push_back({lens[i % 6], 1});
  for (int grid : {0, 7}) {  // exact grid, then a small grid that strides over the items
    const double err = run_backend_case(dt, layout, backend_case{16, 4, 128, block_size(16), seqs}, 12, grid);
    std::printf("backend %s decode batch 257 grid %d: max abs err / max abs ref %.3g\n", to_string(layout), grid, err);
    EXPECT_LT(err, 1e-2);
  }
}

TEST_P(AttentionBackend, DecodeWaitsForLateQueryAndNewestKv) {
  const auto [dt, layout] = GetParam();
  // Lengths around the 16/64-token copy units and the split chunks: the newest key falls in the
  // first unit, a later prologue unit, or a tile the loop copies; 5000 is split and merged.
  const std::vector<seq_spec> seqs = {{1, 1}, {16, 1}, {17, 1}, {64, 1}, {65, 1}, {129, 1}, {256, 1}, {1000, 1}};
  for (bool split : {false, true}) {
    const std::vector<seq_spec> s = split ? std::vector<seq_spec>{{5000, 1}} : seqs;
    const double err = run_backend_case(dt, layout, backend_case{32, 8, 128, block_size(16), s}, 31, 0, true);
    std::printf("backend %s late Q/KV%s: max abs err / max abs ref %.3g\n", to_string(layout),
                split ? " (split)" : "", err);
    EXPECT_LT(err, 1e-2) << split;
  }
}

TEST_P(AttentionBackend, SampledPrefillRowsWaitForAllTheirKeys) {
  const auto [dt, layout] = GetParam();
  // The last layer of a prefill-carrying step attends from the sampled rows only, as decodes
  // whose whole chunk of keys the step's rope_kv_write wrote: nothing may be copied before the
  // dependency wait. Every key is poisoned until the late kernel writes it; chunks of 63 and 333
  // tokens (several leading tiles), a long one that splits, and a strided grid; flash-decoding
  // at an awkward block size (its cp.async kernel) and at 64 tokens (its TMA kernel).
  const std::vector<seq_spec> seqs = {{63, 1}, {333, 1}, {17, 1}, {1000, 1}};
  const bool fd = layout == kv_cache_layout::flash_decoding;
  for (int bs : fd ? std::vector<int>{block_size(16), 64} : std::vector<int>{16})
    for (bool split : {false, true}) {
      backend_case c{32, 8, 128, bs, split ? std::vector<seq_spec>{{5000, 1}} : seqs};
      c.all_keys_late = true;
      for (int grid : {0, 3}) {
        const double err = run_backend_case(dt, layout, c, 41, grid, true);
        std::printf("backend %s block %d all keys late%s grid %d: max abs err / max abs ref %.3g\n",
                    to_string(layout), bs, split ? " (split)" : "", grid, err);
        EXPECT_LT(err, 1e-2) << "block " << bs << (split ? " split" : "") << " grid " << grid;
      }
    }
}

TEST_P(AttentionBackend, CascadeMatchesReference) {
  const auto [dt, layout] = GetParam();
  if (layout != kv_cache_layout::flash_decoding) GTEST_SKIP() << "cascade runs on the flash-decoding backend";
  // Groups of decodes read their shared prefix in prefix pieces (members x query heads as the
  // rows of one tile) and merge it with their own suffix pieces: groups of 2 and of many, GQA
  // 32/8 and 64/8, prefixes that are not a multiple of the 64-key tile (80- and 96-token
  // blocks), a member whose keys end with the prefix (no suffix piece), members with long split
  // suffixes, other decodes and a prefill chunk in the same step, and grids that stride.
  std::vector<seq_spec> many;
  for (int i = 0; i < 40; ++i) many.push_back({400 + 7 * i + 1, 1});
  many.push_back({400, 1});  // nothing beyond the prefix
  many.push_back({1000, 1});
  std::vector<int32_t> many_ids(41);
  std::iota(many_ids.begin(), many_ids.end(), 0);
  std::vector<seq_spec> two_groups = {{300, 20}};
  for (int i = 0; i < 10; ++i) two_groups.push_back({290 + i, 1});
  for (int i = 0; i < 3; ++i) two_groups.push_back({1920 + 5000 * (i + 1), 1});
  struct config {
    const char* what;
    backend_case c;
    int grid;
  };
  const config configs[] = {
      {"pair over 4096, 32/8, block 64", {32, 8, 128, 64, {{4096 + 256, 1}, {4096 + 3, 1}, {1000, 1}, {300, 20}},
                                         {{64, {0, 1}}}}, 0},
      {"pair over 4096, 64/8, block 128, strided", {64, 8, 128, 128, {{4096 + 256, 1}, {4096 + 1, 1}},
                                                    {{32, {0, 1}}}}, 7},
      {"41 over 400, 64/8, block 80", {64, 8, 128, 80, many, {{5, many_ids}}}, 0},
      {"41 over 400, 32/8, block 80, strided", {32, 8, 128, 80, many, {{5, many_ids}}}, 7},
      {"two groups, 32/8, block 96", {32, 8, 128, 96, two_groups,
                                      {{3, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, {20, {11, 12, 13}}}}, 0},
      {"two groups, 64/8, D 64, block 96", {64, 8, 64, 96, two_groups,
                                            {{3, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, {20, {11, 12, 13}}}}, 0},
  };
  // The prefix pieces beside the decode pieces on the backend's second stream, and after them
  // on the same stream (the default); on warpgroup MMAs where the wgmma prefill runs (Hopper,
  // bf16, head dim 128), and with the mma.sync prefill chosen, on mma.sync.
  for (gpu::prefill_kernel prefill : {gpu::prefill_kernel::automatic, gpu::prefill_kernel::mma_sync})
    for (bool overlap : {true, false}) {
      gpu::attention_tuning tuning;
      tuning.cascade_overlap = overlap;
      tuning.prefill = prefill;
      const std::string how = std::string(overlap ? "" : ", one stream") +
                              (prefill == gpu::prefill_kernel::mma_sync ? ", mma.sync" : "");
      for (const config& k : configs) {
        const double err = run_backend_case(dt, layout, k.c, 77, k.grid, false, tuning);
        std::printf("backend %s cascade%s, %s: max abs err / max abs ref %.3g\n", to_string(layout), how.c_str(),
                    k.what, err);
        EXPECT_LT(err, 1e-2) << k.what << how;
      }
    }
}

TEST_P(AttentionBackend, SlidingWindowMatchesReference) {
  const auto [dt, layout] = GetParam();
  const bool fd = layout == kv_cache_layout::flash_decoding;
  // Windows of 48 (under one 64-key tile), 100 and 700 keys (not multiples of the tile or the
  // block), shorter and longer than the sequences: decodes start at the tile holding their first
  // key and mask the rest of it; prefill rows mask the keys below their own window (chunks over a
  // cached prefix, a 300-token prompt whose 128-row items have rows that see nothing of the first
  // tiles); GQA 1, 4 and 8, head dims 64 and 128, the awkward block size (cp.async decode,
  // mma.sync prefill) and 64 (TMA decode, the persistent wgmma prefill on Hopper for bf16 / 128).
  const std::vector<seq_spec> mixed = {{1, 1},     {17, 17}, {97, 30}, {1000, 1}, {1000, 40},
                                       {300, 300}, {47, 1},  {49, 1},  {300, 2},  {129, 1}};
  struct config { int H, KVH, D; };
  for (int window : {48, 100, 700})
    for (const config k : {config{2, 2, 128}, config{8, 2, 128}, config{16, 2, 64}})
      for (int block : {block_size(16), fd ? 64 : 0}) {
        if (block == 0) continue;
        const backend_case c{k.H, k.KVH, k.D, block, mixed, {}, window};
        const double err = run_backend_case(dt, layout, c, 200 + window + k.H);
        std::printf("backend %s window %d %d/%d D=%d bs=%d: max abs err / max abs ref %.3g\n", to_string(layout),
                    window, k.H, k.KVH, k.D, block, err);
        EXPECT_LT(err, 1e-2) << "window " << window << " " << k.H << "/" << k.KVH << " D=" << k.D << " bs=" << block;
      }
  // Split decodes: the heuristic and the pieces cover the windowed range only (150: four pieces,
  // the first with 50 keys below the window; 3000 and 4100: long pieces), a grid of 7 that strides
  // and merges, the separate merge kernel, Q and the newest K/V written late.
  struct split { std::vector<seq_spec> seqs; int window, grid; bool late; gpu::split_merge merge; };
  const split splits[] = {{{{5000, 1}}, 150, 0, false, gpu::split_merge::last_piece},
                          {{{5000, 1}}, 3000, 0, false, gpu::split_merge::last_piece},
                          {{{32768, 1}}, 4100, 7, false, gpu::split_merge::last_piece},
                          {{{5000, 1}, {1000, 1}, {17, 1}}, 700, 0, false, gpu::split_merge::separate_kernel},
                          {{{5000, 1}, {100, 1}, {65, 1}}, 48, 0, true, gpu::split_merge::last_piece}};
  for (const split& k : splits) {
    gpu::attention_tuning tuning;
    tuning.merge = k.merge;
    const backend_case c{32, 8, 128, block_size(16), k.seqs, {}, k.window};
    const double err = run_backend_case(dt, layout, c, 300 + k.window, k.grid, k.late, tuning);
    std::printf("backend %s window %d split, %zu seqs, grid %d late %d: max abs err / max abs ref %.3g\n",
                to_string(layout), k.window, k.seqs.size(), k.grid, int(k.late), err);
    EXPECT_LT(err, 1e-2) << "window " << k.window << ", " << k.seqs.size() << " seqs, grid " << k.grid;
  }
}

TEST_P(AttentionBackend, SlidingWindowOnEveryKernelMatchesReference) {
  const auto [dt, layout] = GetParam();
  if (layout != kv_cache_layout::flash_decoding) GTEST_SKIP() << "the kernels are picked on flash-decoding";
  // Each prefill kernel asked for by name (the wgmma ones run bf16 / head dim 128 on Hopper and
  // fall back elsewhere), the cp.async decode kernel at 64-token blocks, and the FP8 cache (the
  // cp.async decode and mma.sync prefill kernels over E4M3 tiles), windows 48 and 100.
  const std::vector<seq_spec> mixed = {{1000, 1}, {1000, 40}, {300, 300}, {97, 30}, {5000, 1}, {47, 1}};
  const fp8_scales sc{0.04f, 0.03f};
  struct config { const char* what; gpu::prefill_kernel prefill; gpu::decode_kernel decode; bool fp8; };
  const config configs[] = {
      {"mma.sync prefill", gpu::prefill_kernel::mma_sync, gpu::decode_kernel::tma, false},
      {"wgmma cp.async prefill", gpu::prefill_kernel::wgmma_cp_async, gpu::decode_kernel::tma, false},
      {"wgmma TMA persistent prefill", gpu::prefill_kernel::wgmma_tma_persistent, gpu::decode_kernel::tma, false},
      {"cp.async decode", gpu::prefill_kernel::automatic, gpu::decode_kernel::cp_async, false},
      {"fp8 cache", gpu::prefill_kernel::automatic, gpu::decode_kernel::tma, true}};
  for (int window : {48, 100})
    for (const config& k : configs) {
      gpu::attention_tuning tuning;
      tuning.prefill = k.prefill;
      tuning.decode = k.decode;
      const backend_case c{8, 2, 128, 64, mixed, {}, window};
      const double err = run_backend_case(dt, layout, c, 400 + window, 0, false, tuning, k.fp8 ? &sc : nullptr);
      std::printf("backend %s window %d, %s: max abs err / max abs ref %.3g\n", to_string(layout), window, k.what,
                  err);
      EXPECT_LT(err, 1e-2) << "window " << window << ", " << k.what;
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionBackend,
                         ::testing::Values(param{act_dtype::bf16, kv_cache_layout::vllm},
                                           param{act_dtype::fp16, kv_cache_layout::vllm},
                                           param{act_dtype::bf16, kv_cache_layout::flash_decoding},
                                           param{act_dtype::fp16, kv_cache_layout::flash_decoding}),
                         [](const auto& info) {
                           return std::string(info.param.layout == kv_cache_layout::vllm ? "vllm_" : "flash_decoding_") +
                                  (info.param.dt == act_dtype::bf16 ? "bf16" : "fp16");
                         });

}  // namespace
}  // namespace actorserve::testing
