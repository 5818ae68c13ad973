#include "gpu/cuda/attention/backend.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "config/log.hpp"
#include "gpu/cuda/attention/prefill_wgmma.hpp"
#include "gpu/cuda/attention/split_heuristic.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::gpu::cuda {
namespace {

/// Prefill tiles of `rows` query rows (tokens x the GQA group), one per KV head, the longest
/// key ranges first (causal tiles differ in work; the long ones must not form the last wave).
void plan_prefill(std::span<const attn_seq> seqs, int group, int num_kv_heads, int rows, attention_plan& plan) {
  append_query_tiles(seqs, group, num_kv_heads, rows, 2, plan.items);
  std::stable_sort(plan.items.begin(), plan.items.end(),
                   [](const attn_item& x, const attn_item& y) { return x.kv_end - x.kv_begin > y.kv_end - y.kv_begin; });
}

/// Decode pieces: every q_len == 1 sequence and KV head, cut into `chunk`-token pieces (0: none).
void plan_decode(std::span<const attn_seq> seqs, int num_kv_heads, int32_t chunk, attention_plan& plan) {
  const size_t first = plan.items.size();
  for (size_t s = 0; s < seqs.size(); ++s) {
    const attn_seq& sq = seqs[s];
    if (sq.q_len != 1) continue;
    for (int h = 0; h < num_kv_heads; ++h) {
      attn_item it;
      it.seq = static_cast<int32_t>(s);
      it.bt_offset = sq.bt_offset;
      it.context_len = sq.context_len;
      it.q_begin = sq.q_start;
      it.q_len = 1;
      it.kv_head = h;
      it.kv_end = sq.context_len;
      if (chunk <= 0 || sq.context_len <= chunk) {
        plan.items.push_back(it);
        continue;
      }
      attn_combine cb;
      cb.q_begin = sq.q_start;
      cb.q_len = 1;
      cb.kv_head = h;
      cb.first_partial = plan.num_partials;
      cb.num_splits = (sq.context_len + chunk - 1) / chunk;
      for (int32_t p = 0; p < cb.num_splits; ++p) {
        attn_item piece = it;
        piece.pad = static_cast<int32_t>(plan.combines.size());  // its combine (merged in-kernel)
        piece.kv_begin = p * chunk;
        piece.kv_end = std::min(sq.context_len, (p + 1) * chunk);
        piece.partial = plan.num_partials++;
        plan.items.push_back(piece);
      }
      plan.combines.push_back(cb);
    }
  }
  plan.num_decode_items = static_cast<int32_t>(plan.items.size() - first);
}

std::vector<int32_t> decode_lengths(std::span<const attn_seq> seqs) {
  std::vector<int32_t> lens;
  for (const attn_seq& s : seqs)
    if (s.q_len == 1) lens.push_back(s.context_len);
  return lens;
}

/// Tensor-core backends: prefill tiles, then decode pieces for one of the decode kernels.
class tc_backend : public attention_backend {
 public:
  tc_backend(const attention_shape& shape, bool vllm, const attention_tuning& tuning) : vllm_(vllm), tuning_(tuning) {
    shape_ = shape;
    name_ = vllm ? "vllm" : "flash-decoding";
    const bool tma = tuning.decode == decode_kernel::tma && runs_tma(loaded_gpu_target());
    ctas_per_sm_ = std::max(1, decode_ctas_per_sm(shape.dt, shape.head_dim, vllm, tma));
    // Both backends split at most one wave of resident decode CTAs (split_heuristic.hpp).
    resident_slots_ = shape.num_sms * ctas_per_sm_;
    // The in-kernel merge keeps rows x pieces weights in the decode kernels' stages (96 KiB, or
    // 64 KiB where two stages run; launch.hpp: max_split_pieces, max_merge_rows).
    max_partials_ = std::min(2 * resident_slots_, max_split_pieces);
    // One counter per combine (at most one per two partials) for the in-kernel merge; without
    // a device the separate merge kernel stays the fallback.
    if (cudaMalloc(reinterpret_cast<void**>(&counters_), sizeof(int32_t) * size_t(max_partials_)) != cudaSuccess ||
        cudaMemset(counters_, 0, sizeof(int32_t) * size_t(max_partials_)) != cudaSuccess) {
      (void)cudaGetLastError();
      if (counters_) (void)cudaFree(counters_);
      counters_ = nullptr;
    }
  }
  tc_backend(const tc_backend&) = delete;
  tc_backend& operator=(const tc_backend&) = delete;
  ~tc_backend() override {
    if (counters_) (void)cudaFree(counters_);
  }

  attention_plan plan(std::span<const attn_seq> seqs) const override {
    attention_plan p;
    plan_prefill(seqs, shape_.num_heads / shape_.num_kv_heads, shape_.num_kv_heads, prefill_rows(), p);
    const std::vector<int32_t> lens = decode_lengths(seqs);
    plan_decode(seqs, shape_.num_kv_heads, lens.empty() ? 0 : decode_chunk(lens), p);
    return p;
  }

  int run(const attn_launch& a, cudaStream_t s) const override { return run_marked(a, s, [] {}); }

  bool prefill_reads_q16() const override {
    return tuning_.prefill_q16 && prefill_runs() == prefill_kernel::wgmma_tma_persistent;
  }

  int run_marked(const attn_launch& in, cudaStream_t s, const std::function<void()>& after_prefill) const override {
    attn_launch a = in;
    const bool fused = counters_ != nullptr && tuning_.merge == split_merge::last_piece;
    a.split_counters = fused ? counters_ : nullptr;
    if (int e = launch_tc_prefill(shape_.dt, a, tuning_.prefill, s)) return e;
    after_prefill();
    if (int e = vllm_ ? launch_vllm_decode(shape_.dt, a, s) : launch_fd_decode(shape_.dt, a, tuning_.decode, s))
      return e;
    return fused ? 0 : launch_lse_combine(shape_.dt, a, s);
  }

 private:
  /// The prefill kernel this backend's launches run (effective_prefill_kernel).
  prefill_kernel prefill_runs() const {
    return effective_prefill_kernel(tuning_.prefill, shape_.dt, shape_.head_dim, shape_.block_size);
  }

  /// Query rows per prefill item: 128 for the wgmma kernels (two warpgroups sharing each K/V
  /// tile, prefill_wgmma.hpp), 64 for mma.sync.
  int prefill_rows() const {
    return prefill_runs() == prefill_kernel::mma_sync ? tc_prefill_rows : wgmma_pair_rows;
  }

  int32_t decode_chunk(const std::vector<int32_t>& lens) const {
    split_inputs in;
    in.num_kv_heads = shape_.num_kv_heads;
    in.num_sms = shape_.num_sms;
    in.ctas_per_sm = ctas_per_sm_;
    in.tile = vllm_ ? 4 * vllm_warp_tokens : fd_kv_tile;  // vllm: one block per warp per step
    in.max_partials = max_partials_;
    if (!vllm_) in.long_piece_tokens = 2048;  // flash-decoding only
    return choose_kv_chunk(lens, in);
  }

  bool vllm_ = false;
  attention_tuning tuning_;
  int ctas_per_sm_ = 1;
  int32_t* counters_ = nullptr;
};

/// Head dims without a tensor-core build: the generic CUDA-core kernel (attention_kernels.cu).
class generic_backend : public attention_backend {
 public:
  generic_backend(const attention_shape& shape, const char* requested) {
    shape_ = shape;
    name_ = fmt::format("{} (generic kernel)", requested);
    max_partials_ = 4 * shape.num_sms;
  }

  attention_plan plan(std::span<const attn_seq> seqs) const override {
    return plan_attention(seqs, shape_.num_heads, shape_.num_kv_heads, 2 * shape_.num_sms, max_partials_);
  }

  attention_grids decode_graph_grids(int batch) const override {
    return {batch * shape_.num_kv_heads + max_partials_, 0, max_partials_};
  }

  int run(const attn_launch& a, cudaStream_t s) const override { return paged_attention(shape_.dt, a, s); }
};

error bad(const std::string& what) { return make_error(error_code::invalid_argument, what); }

}  // namespace

size_t attention_backend::block_bytes() const {
  return size_t(shape_.block_size) * shape_.num_kv_heads * shape_.head_dim * act_size(shape_.dt);
}

attention_grids attention_backend::grids(const attention_plan& p) const {
  attention_grids g;
  g.decode = p.num_decode_items;
  g.prefill = static_cast<int>(p.items.size()) - p.num_decode_items;
  g.combine = static_cast<int>(p.combines.size());
  return g;
}

attention_grids attention_backend::decode_graph_grids(int batch) const {
  // The decode kernels stride over their items, so any grid is correct; this one covers every
  // flash-decoding plan (at most max(B x KVH, one wave of slots)) without looping.
  const int base = batch * shape_.num_kv_heads;
  return {0, std::max(base, resident_slots_), std::min(base, max_partials_)};
}

result<std::unique_ptr<attention_backend>> make_attention_backend(kv_cache_layout layout,
                                                                  const attention_shape& shape_in,
                                                                  const attention_tuning& tuning) {
  attention_shape shape = shape_in;
  const bool vllm = layout == kv_cache_layout::vllm;
  const char* name = to_string(layout);
  const int bs = shape.block_size;
  if (vllm && bs != 8 && bs != 16 && bs != 32)
    return bad(fmt::format("--block-size {}: --paged-kv-cache-type vllm takes 8, 16 or 32", bs));
  if (!vllm && (bs < 64 || bs > 256 || bs % 16 != 0))
    return bad(fmt::format("--block-size {}: --paged-kv-cache-type flash-decoding takes a multiple of 16 "
                           "from 64 to 256", bs));
  if (shape.num_kv_heads <= 0 || shape.num_heads % shape.num_kv_heads != 0)
    return bad(fmt::format("attention: {} query heads are not a multiple of {} KV heads", shape.num_heads,
                           shape.num_kv_heads));
  const int group = shape.num_heads / shape.num_kv_heads;
  if (group > 16)
    return bad(fmt::format("attention: GQA group of {} query heads per KV head (at most 16 supported)", group));
  if (shape.head_dim <= 0 || shape.head_dim % 8 != 0 || shape.head_dim > 256)
    return bad(fmt::format("attention: head_dim {} unsupported (64 and 128 on tensor cores; other multiples of 8 "
                           "up to 256 on the generic kernel)", shape.head_dim));
  if (shape.num_sms <= 0) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&shape.num_sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      shape.num_sms = 1;
    }
  }
  if (!tc_head_dim_supported(shape.head_dim) || group > 8) {
    log::warn("attention: head_dim {} / GQA group {} has no tensor-core build; --paged-kv-cache-type {} runs "
              "on the generic CUDA-core kernel", shape.head_dim, group, name);
    return std::unique_ptr<attention_backend>(std::make_unique<generic_backend>(shape, name));
  }
  return std::unique_ptr<attention_backend>(std::make_unique<tc_backend>(shape, vllm, tuning));
}

}  // namespace actorserve::gpu::cuda
