#pragma once
/// The attention-backend interface of the CUDA executor: a backend owns the KV block size and
/// layout, plans each step's attention work on the host (plan) and runs it per layer (run).
/// Selected by --paged-kv-cache-type (vllm | flash-decoding) and --block-size; the block manager
/// only sees block ids and the block size. docs/attention.md describes both backends.
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "config/engine_config.hpp"
#include "config/error.hpp"
#include "gpu/cuda/attention/launch.hpp"
#include "gpu/cuda/attention/attention_plan.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/attention/cascade_plan.hpp"

namespace actorserve::gpu::cuda {

/// What an attention backend is built for.
struct attention_shape {
  act_dtype dt = act_dtype::bf16;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int block_size = 16;       ///< tokens per KV block
  int num_sms = 0;           ///< 0: read from the current device
  /// --kv-cache-dtype fp8: one E4M3 byte per cache element (attn_launch::kv_fp8); only the
  /// flash-decoding layout at head dims 64 and 128 and GQA groups up to 8 takes it.
  bool kv_fp8 = false;
  /// Sliding window in keys (0: none): plan() starts each item at the tile holding its first
  /// query's first key, run() hands it to the kernels (attn_launch::window), which mask the keys
  /// below each query's window; no cascade groups are taken then (a member's query would not see
  /// its whole shared prefix).
  int window = 0;
};

/// Grid sizes of one attention launch (upper bounds when a CUDA graph replays them).
struct attention_grids {
  int prefill = 0, decode = 0, combine = 0;
  int prefix = 0;   ///< cascade prefix pieces (0: none)
};

class attention_backend {
 public:
  virtual ~attention_backend() = default;
  /// "vllm" or "flash-decoding"; " (generic kernel)" when the head dim falls back.
  const std::string& name() const { return name_; }
  /// Tokens per KV block (the block manager's unit).
  int block_size() const { return shape_.block_size; }
  /// Bytes of one KV block of one cache (K or V of one layer): [block_size, KVH, D] elements of
  /// the activation dtype, or E4M3 bytes (half as many bytes: twice the blocks in the same memory).
  size_t block_bytes() const;
  /// Partial slots (partial_rows() x head_dim floats each) the split pieces of one step may use.
  int max_partials() const { return max_partials_; }
  /// Rows of one partial slot.
  virtual int partial_rows() const { return tc_partial_rows; }
  /// Whether plan() takes cascade groups (cascade attention: a group's shared prefix read once
  /// per KV head for all its members).
  virtual bool takes_cascade() const { return false; }
  /// Partial slots (and combines) a step of up to `batch` sequences may use: max_partials() for
  /// split pieces, plus, where the backend takes cascade groups, each member's prefix pieces and
  /// suffix per KV head.
  int partial_capacity(int batch) const;
  /// Cascade prefix items (and member rows) a step of up to `batch` sequences may have.
  int prefix_row_capacity(int batch) const;
  /// The step's work list for `seqs` (a sequence with q_len 1 is a decode).
  attention_plan plan(std::span<const attn_seq> seqs) const { return plan(seqs, cascade_plan{}); }
  /// The same with `cascade`'s groups (indices into `seqs`) reading their shared prefix in prefix
  /// pieces, when takes_cascade(); other backends ignore it.
  virtual attention_plan plan(std::span<const attn_seq> seqs, const cascade_plan& cascade) const = 0;
  /// Launch sizes of a plan.
  attention_grids grids(const attention_plan& p) const;
  /// Launch sizes that cover any plan of a decode-only step of `batch` sequences (with cascade
  /// groups or without).
  virtual attention_grids decode_graph_grids(int batch, bool cascade = false) const;
  /// Enqueues one layer's attention on `s`; a cudaError_t as int (0 = success).
  virtual int run(const attn_launch& a, cudaStream_t s) const = 0;
  /// Whether this backend's prefill kernel reads attn_launch::q16 when a step sets it (the
  /// executor then has rope_kv_write fill it): the persistent wgmma kernel, unless
  /// attention_tuning::prefill_q16 is off.
  virtual bool prefill_reads_q16() const { return false; }
  /// run() calling `after_prefill` between the prefill launch and the decode launches (the step
  /// profile's mark); a backend with a single launch calls it first.
  virtual int run_marked(const attn_launch& a, cudaStream_t s, const std::function<void()>& after_prefill) const {
    after_prefill();
    return run(a, s);
  }

 protected:
  attention_shape shape_;
  std::string name_;
  int max_partials_ = 0;
  int resident_slots_ = 1;   ///< decode CTAs resident at once (SMs x occupancy)
};

/// Builds the backend for `layout` with the kernels `tuning` picks, checking block size, head
/// dim and GQA group: a clear invalid_argument error names the flag. Head dims other than 64 and
/// 128 run on the generic CUDA-core kernel (paged_attention) with a warning.
result<std::unique_ptr<attention_backend>> make_attention_backend(kv_cache_layout layout,
                                                                  const attention_shape& shape,
                                                                  const attention_tuning& tuning = {});

}  // namespace actorserve::gpu::cuda
