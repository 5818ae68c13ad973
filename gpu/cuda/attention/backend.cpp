#include "gpu/cuda/attention/backend.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "config/log.hpp"
#include "gpu/attention/prefix_tiles.hpp"
#include "gpu/cuda/attention/prefill_wgmma.hpp"
#include "gpu/cuda/attention/split_heuristic.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"

namespace actorserve::gpu::cuda {
namespace {

/// Prefill tiles of `rows` query rows (tokens x the GQA group), one per KV head, each from the
/// tile holding its first query's `window` start, the longest key ranges first (causal tiles
/// differ in work; the long ones must not form the last wave).
void plan_prefill(std::span<const attn_seq> seqs, int group, int num_kv_heads, int rows, int window,
                  attention_plan& plan) {
  append_query_tiles(seqs, group, num_kv_heads, rows, 2, window, tc_prefill_key_tile, plan.items);
  std::stable_sort(plan.items.begin(), plan.items.end(),
                   [](const attn_item& x, const attn_item& y) { return x.kv_end - x.kv_begin > y.kv_end - y.kv_begin; });
}

/// Decode pieces: every q_len == 1 sequence and KV head over keys [kv_start[s], context_len), cut
/// into `chunk`-token pieces (0: none). A cascade member (prefix_pieces[s] > 0) always gets a
/// combine whose first prefix_pieces[s] slots its prefix pieces fill (first_slot[s * KVH + h]).
void plan_decode(std::span<const attn_seq> seqs, int num_kv_heads, int32_t chunk, std::span<const int32_t> kv_start,
                 std::span<const int32_t> prefix_pieces, std::vector<int32_t>& first_slot, attention_plan& plan) {
  const size_t first = plan.items.size();
  first_slot.assign(seqs.size() * size_t(num_kv_heads), -1);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const attn_seq& sq = seqs[s];
    if (sq.q_len != 1) continue;
    const int32_t begin = kv_start.empty() ? 0 : kv_start[s], shared = prefix_pieces.empty() ? 0 : prefix_pieces[s];
    for (int h = 0; h < num_kv_heads; ++h) {
      attn_item it;
      it.seq = static_cast<int32_t>(s);
      it.bt_offset = sq.bt_offset;
      it.context_len = sq.context_len;
      it.q_begin = sq.q_start;
      it.q_len = 1;
      it.kv_head = h;
      it.kv_begin = begin;
      it.kv_end = sq.context_len;
      const int32_t len = sq.context_len - begin;
      if (shared == 0 && (chunk <= 0 || len <= chunk)) {
        plan.items.push_back(it);
        continue;
      }
      attn_combine cb;
      cb.q_begin = sq.q_start;
      cb.q_len = 1;
      cb.kv_head = h;
      cb.first_partial = plan.num_partials;
      first_slot[s * size_t(num_kv_heads) + size_t(h)] = plan.num_partials;
      plan.num_partials += shared;
      const int32_t step = chunk > 0 && len > chunk ? chunk : len;
      const int32_t pieces = len <= 0 ? 0 : (len + step - 1) / step;
      cb.num_splits = shared + pieces;
      for (int32_t p = 0; p < pieces; ++p) {
        attn_item piece = it;
        piece.pad = static_cast<int32_t>(plan.combines.size());  // its combine (merged in-kernel)
        piece.kv_begin = begin + p * step;
        piece.kv_end = std::min(sq.context_len, piece.kv_begin + step);
        piece.partial = plan.num_partials++;
        plan.items.push_back(piece);
      }
      plan.combines.push_back(cb);
    }
  }
  plan.num_decode_items = static_cast<int32_t>(plan.items.size() - first);
}

/// Per sequence, the first key its decode reads under `window`: the start of the `tile` holding
/// its query's first key in the window (the kernels mask the keys of that tile below it), so the
/// split heuristic and the pieces cover the windowed range only.
std::vector<int32_t> window_starts(std::span<const attn_seq> seqs, int window, int tile) {
  std::vector<int32_t> start(seqs.size(), 0);
  for (size_t s = 0; s < seqs.size(); ++s)
    if (seqs[s].q_len == 1) start[s] = window_tile_begin(seqs[s].context_len - 1, window, tile);
  return start;
}

/// The key counts of the decode pieces to cut: each decode's keys from kv_start (0: all).
std::vector<int32_t> decode_lengths(std::span<const attn_seq> seqs, std::span<const int32_t> kv_start) {
  std::vector<int32_t> lens;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int32_t len = seqs[s].context_len - (kv_start.empty() ? 0 : kv_start[s]);
    if (seqs[s].q_len == 1 && len > 0) lens.push_back(len);
  }
  return lens;
}

/// A group's prefix is cut into at most this many pieces (each a partial slot per member and KV
/// head), of at least cascade_min_piece_tokens keys: enough CTAs for a group too small to fill the
/// GPU with its member tiles alone.
constexpr int32_t cascade_max_prefix_pieces = 4;
constexpr int32_t cascade_min_piece_tokens = 512;

/// The prefix pieces' work items: one per tile (prefix_tiles), its members' rows naming the
/// slots their combines reserved for that piece (first_slot, plan_decode).
void plan_prefix_pieces(std::span<const attn_seq> seqs, const cascade_plan& cascade, std::span<const int32_t> pieces,
                        std::span<const int32_t> first_slot, const prefix_tiling& tiling, int block_size,
                        attention_plan& plan) {
  for (const prefix_tile& t : prefix_tiles(cascade, block_size, pieces, tiling)) {
    const cascade_group& g = cascade.groups[size_t(t.group)];
    const size_t lead = size_t(g.seqs.front());
    attn_item it;
    it.seq = static_cast<int32_t>(lead);
    it.bt_offset = seqs[lead].bt_offset;  // the prefix blocks are the same in every member's table
    it.context_len = g.num_prefix_blocks * block_size;
    it.q_begin = static_cast<int32_t>(plan.prefix_rows.size());
    it.q_len = t.member_count;
    it.kv_head = t.kv_head;
    it.kv_begin = t.kv_begin;
    it.kv_end = t.kv_end;
    for (int32_t m = t.member_begin; m < t.member_begin + t.member_count; ++m) {
      const size_t s = size_t(g.seqs[size_t(m)]);
      plan.prefix_rows.push_back({seqs[s].q_start, first_slot[s * size_t(tiling.num_kv_heads) + size_t(t.kv_head)] + t.piece});
    }
    plan.prefix_items.push_back(it);
  }
  for (size_t gi = 0; gi < cascade.groups.size(); ++gi)
    if (pieces[gi] > 0) plan.cascade_seqs += static_cast<int32_t>(cascade.groups[gi].seqs.size());
}

/// Tensor-core backends: prefill tiles, then decode pieces for one of the decode kernels.
class tc_backend : public attention_backend {
 public:
  tc_backend(const attention_shape& shape, bool vllm, const attention_tuning& tuning) : vllm_(vllm), tuning_(tuning) {
    shape_ = shape;
    name_ = vllm ? "vllm" : "flash-decoding";
    const bool tma = tuning.decode == decode_kernel::tma && runs_tma(loaded_gpu_target());
    ctas_per_sm_ = std::max(1, decode_ctas_per_sm(shape.dt, shape.head_dim, vllm, tma, shape.kv_fp8));
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
    // The cascade prefix pieces' stream and its fork / join events; without them the prefix
    // pieces run on the step's stream.
    if (!vllm_ && tuning_.cascade_overlap &&
        (cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking) != cudaSuccess ||
         cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming) != cudaSuccess ||
         cudaEventCreateWithFlags(&join_, cudaEventDisableTiming) != cudaSuccess)) {
      (void)cudaGetLastError();
      release_side_stream();
    }
  }
  tc_backend(const tc_backend&) = delete;
  tc_backend& operator=(const tc_backend&) = delete;
  ~tc_backend() override {
    if (counters_) (void)cudaFree(counters_);
    release_side_stream();
  }

  using attention_backend::plan;
  attention_plan plan(std::span<const attn_seq> seqs, const cascade_plan& cascade) const override {
    attention_plan p;
    const int KVH = shape_.num_kv_heads, G = shape_.num_heads / KVH;
    plan_prefill(seqs, G, KVH, prefill_rows(), shape_.window, p);
    std::vector<int32_t> group_pieces, kv_start, pieces, first_slot;
    const bool grouped = takes_cascade() && !cascade.empty();
    if (grouped) cascade_members(seqs, cascade, group_pieces, kv_start, pieces);
    // Without cascade (takes_cascade() is off with a window) the decodes start at their window.
    if (shape_.window > 0) kv_start = window_starts(seqs, shape_.window, decode_tile());
    const std::vector<int32_t> lens = decode_lengths(seqs, kv_start);
    plan_decode(seqs, KVH, lens.empty() ? 0 : decode_chunk(lens), kv_start, pieces, first_slot, p);
    if (grouped) plan_prefix_pieces(seqs, cascade, group_pieces, first_slot, tiling(), shape_.block_size, p);
    return p;
  }

  bool takes_cascade() const override { return !vllm_ && !shape_.kv_fp8 && shape_.window == 0; }

  int run(const attn_launch& a, cudaStream_t s) const override { return run_marked(a, s, [] {}); }

  bool prefill_reads_q16() const override {
    return tuning_.prefill_q16 && prefill_runs() == prefill_kernel::wgmma_tma_persistent;
  }

  int run_marked(const attn_launch& in, cudaStream_t s, const std::function<void()>& after_prefill) const override {
    // An FP8 cache (attn_launch::kv_fp8, built into the backend by attention_shape::kv_fp8) is
    // read by flash-decoding's cp.async decode kernel and the mma.sync prefill kernel; the
    // backend takes no cascade groups then, and make_attention_backend refuses the vLLM layout.
    // A windowed backend plans no prefix pieces either (the prefix kernel masks no window).
    if (in.kv_fp8 != shape_.kv_fp8 || (in.kv_fp8 && (vllm_ || in.prefix_grid > 0)) ||
        (shape_.window > 0 && in.prefix_grid > 0))
      return int(cudaErrorNotSupported);
    attn_launch a = in;
    a.window = shape_.window;
    // A layer with prefix pieces merges every combine in the separate kernel, after them.
    const bool cascade = a.prefix_grid > 0;
    const bool fused = counters_ != nullptr && tuning_.merge == split_merge::last_piece && !cascade;
    a.split_counters = fused ? counters_ : nullptr;
    if (int e = launch_tc_prefill(shape_.dt, a, tuning_.prefill, s)) return e;
    after_prefill();
    const bool beside = cascade && side_ != nullptr;
    if (beside) {  // the prefix pieces on the side stream, once Q is written
      if (int e = cudaEventRecord(fork_, s)) return e;
      if (int e = cudaStreamWaitEvent(side_, fork_, 0)) return e;
      if (int e = launch_cascade_prefix(shape_.dt, a, prefix_wgmma(), side_)) return e;
      if (int e = cudaEventRecord(join_, side_)) return e;
    }
    if (int e = vllm_ ? launch_vllm_decode(shape_.dt, a, s) : launch_fd_decode(shape_.dt, a, tuning_.decode, s))
      return e;
    if (beside) {
      if (int e = cudaStreamWaitEvent(s, join_, 0)) return e;
    } else if (cascade) {
      if (int e = launch_cascade_prefix(shape_.dt, a, prefix_wgmma(), s)) return e;
    }
    return fused ? 0 : launch_lse_combine(shape_.dt, a, s);
  }

 private:
  /// The prefill kernel this backend's launches run (effective_prefill_kernel).
  prefill_kernel prefill_runs() const {
    if (shape_.kv_fp8) return prefill_kernel::mma_sync;  // the only prefill kernel that reads E4M3 tiles
    return effective_prefill_kernel(tuning_.prefill, shape_.dt, shape_.head_dim, shape_.block_size);
  }

  /// Whether the cascade prefix pass runs on warpgroup MMAs: where the prefill does (an FP8 or
  /// windowed backend takes no prefix pieces).
  bool prefix_wgmma() const { return prefill_runs() != prefill_kernel::mma_sync; }

  /// Query rows per prefill item: 128 for the wgmma kernels (two warpgroups sharing each K/V
  /// tile, prefill_wgmma.hpp), 64 for mma.sync.
  int prefill_rows() const {
    return prefill_runs() == prefill_kernel::mma_sync ? tc_prefill_rows : wgmma_pair_rows;
  }

  /// How the prefix pass is tiled: one prefix CTA per SM for a wave beside the decode pieces
  /// (80 KiB of shared memory each, leaving room for a decode CTA) or on warpgroup MMAs (one
  /// 256-thread CTA an SM), else as many as decode CTAs fit.
  prefix_tiling tiling() const {
    prefix_tiling t;
    t.query_rows = prefix_wgmma() ? cascade_prefix_wgmma_rows : cascade_prefix_rows;
    t.group_heads = shape_.num_heads / shape_.num_kv_heads;
    t.num_kv_heads = shape_.num_kv_heads;
    t.key_tile = fd_kv_tile;
    t.wave = side_ || prefix_wgmma() ? shape_.num_sms : resident_slots_;
    t.max_pieces = cascade_max_prefix_pieces;
    t.min_piece_keys = cascade_min_piece_tokens;
    return t;
  }

  /// Per group, the pieces of its prefix (0 for a group that is not all decodes that hold the
  /// prefix: left on the per-sequence path); per sequence of the step, the first key of its own
  /// pieces (its group's prefix length, 0 outside a group) and its group's prefix pieces.
  void cascade_members(std::span<const attn_seq> seqs, const cascade_plan& cascade, std::vector<int32_t>& group_pieces,
                       std::vector<int32_t>& kv_start, std::vector<int32_t>& pieces) const {
    group_pieces = prefix_pieces(cascade, shape_.block_size, tiling());
    kv_start.assign(seqs.size(), 0);
    pieces.assign(seqs.size(), 0);
    for (size_t gi = 0; gi < cascade.groups.size(); ++gi) {
      const cascade_group& g = cascade.groups[gi];
      const int32_t P = g.num_prefix_blocks * shape_.block_size;
      bool decodes = P > 0 && !g.seqs.empty();
      for (int32_t s : g.seqs)
        decodes = decodes && s >= 0 && size_t(s) < seqs.size() && seqs[size_t(s)].q_len == 1 &&
                  seqs[size_t(s)].context_len >= P;
      if (!decodes) group_pieces[gi] = 0;
      for (int32_t s : g.seqs)
        if (decodes) {
          kv_start[size_t(s)] = P;
          pieces[size_t(s)] = group_pieces[gi];
        }
    }
  }

  /// Keys a decode CTA takes per pipeline step; split chunks and window starts are multiples.
  int decode_tile() const { return vllm_ ? 4 * vllm_warp_tokens : fd_kv_tile; }  // vllm: a block per warp

  int32_t decode_chunk(const std::vector<int32_t>& lens) const {
    split_inputs in;
    in.num_kv_heads = shape_.num_kv_heads;
    in.num_sms = shape_.num_sms;
    in.ctas_per_sm = ctas_per_sm_;
    in.tile = decode_tile();
    in.max_partials = max_partials_;
    if (!vllm_) in.long_piece_tokens = 2048;  // flash-decoding only
    return choose_kv_chunk(lens, in);
  }

  void release_side_stream() {
    if (join_) (void)cudaEventDestroy(join_);
    if (fork_) (void)cudaEventDestroy(fork_);
    if (side_) (void)cudaStreamDestroy(side_);
    side_ = nullptr;
    fork_ = join_ = nullptr;
  }

  bool vllm_ = false;
  attention_tuning tuning_;
  int ctas_per_sm_ = 1;
  int32_t* counters_ = nullptr;
  cudaStream_t side_ = nullptr;   ///< cascade prefix pieces beside the decode pieces (cascade_overlap)
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
};

/// Head dims without a tensor-core build: the generic CUDA-core kernel (attention_kernels.cu).
class generic_backend : public attention_backend {
 public:
  generic_backend(const attention_shape& shape, const char* requested) {
    shape_ = shape;
    name_ = fmt::format("{} (generic kernel)", requested);
    max_partials_ = 4 * shape.num_sms;
  }

  using attention_backend::plan;
  attention_plan plan(std::span<const attn_seq> seqs, const cascade_plan&) const override {
    return plan_attention(seqs, shape_.num_heads, shape_.num_kv_heads, 2 * shape_.num_sms, max_partials_,
                          shape_.window);
  }

  attention_grids decode_graph_grids(int batch, bool) const override {
    return {batch * shape_.num_kv_heads + max_partials_, 0, max_partials_, 0};
  }

  int partial_rows() const override { return attn_tile_rows; }

  int run(const attn_launch& in, cudaStream_t s) const override {
    if (in.kv_fp8) return int(cudaErrorNotSupported);  // the generic kernel reads a 16-bit cache only
    attn_launch a = in;
    a.window = shape_.window;
    return paged_attention(shape_.dt, a, s);
  }
};

error bad(const std::string& what) { return make_error(error_code::invalid_argument, what); }

}  // namespace

size_t attention_backend::block_bytes() const {
  return size_t(shape_.block_size) * shape_.num_kv_heads * shape_.head_dim * (shape_.kv_fp8 ? 1 : act_size(shape_.dt));
}

attention_grids attention_backend::grids(const attention_plan& p) const {
  attention_grids g;
  g.decode = p.num_decode_items;
  g.prefill = static_cast<int>(p.items.size()) - p.num_decode_items;
  g.combine = static_cast<int>(p.combines.size());
  g.prefix = static_cast<int>(p.prefix_items.size());
  return g;
}

attention_grids attention_backend::decode_graph_grids(int batch, bool cascade) const {
  // The decode kernels and the prefix kernel stride over their items, so any grid is correct;
  // this one covers every flash-decoding plan (at most max(B x KVH, one wave of slots)) without
  // looping. With prefix pieces there is at most one combine per sequence and KV head.
  const int base = batch * shape_.num_kv_heads;
  return {0, std::max(base, resident_slots_), cascade ? base : std::min(base, max_partials_),
          cascade ? resident_slots_ : 0};
}

int attention_backend::partial_capacity(int batch) const {
  if (!takes_cascade()) return max_partials_;
  return max_partials_ + batch * shape_.num_kv_heads * (cascade_max_prefix_pieces + 1);
}

int attention_backend::prefix_row_capacity(int batch) const {
  return takes_cascade() ? batch * shape_.num_kv_heads * cascade_max_prefix_pieces : 0;
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
  if (shape.kv_fp8 && vllm)
    return bad("--kv-cache-dtype fp8: --paged-kv-cache-type vllm has no FP8 kernel; start with "
               "--paged-kv-cache-type flash-decoding (and a --block-size from 64 to 256), or with --kv-cache-dtype auto");
  if (shape.kv_fp8 && (!tc_head_dim_supported(shape.head_dim) || group > 8))
    return bad(fmt::format("--kv-cache-dtype fp8: head_dim {} / GQA group {} runs on the generic CUDA-core kernel, "
                           "which reads a 16-bit cache only (the FP8 cache takes head dims 64 and 128 and groups up "
                           "to 8); start with --kv-cache-dtype auto",
                           shape.head_dim, group));
  if (!tc_head_dim_supported(shape.head_dim) || group > 8) {
    log::warn("attention: head_dim {} / GQA group {} has no tensor-core build; --paged-kv-cache-type {} runs "
              "on the generic CUDA-core kernel", shape.head_dim, group, name);
    return std::unique_ptr<attention_backend>(std::make_unique<generic_backend>(shape, name));
  }
  return std::unique_ptr<attention_backend>(std::make_unique<tc_backend>(shape, vllm, tuning));
}

}  // namespace actorserve::gpu::cuda
