#include "gpu/cuda/cuda_executor.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "config/log.hpp"
#include "config/model_config.hpp"
#include "gpu/cuda/cuda_executor_impl.hpp"
#include "gpu/cuda/cuda_status.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/parallel/device_collective.hpp"
#include "gpu/cuda/programmatic_launch.hpp"
#include "gpu/cuda/attention/paged_attention.hpp"
#include "gpu/cuda/sampling/sampler.hpp"
#include "gpu/cuda_model_support.hpp"

namespace actorserve::gpu {

namespace cuda {
namespace {

constexpr size_t kCublasWorkspace = size_t(32) << 20;
constexpr size_t kInitialTail = size_t(4) << 20;   ///< penalties + block copies, grows on demand
constexpr int kMasksPerSeq = 64;

size_t align16(size_t v) { return (v + 15) & ~size_t(15); }

}  // namespace

result<std::unique_ptr<executor>> cuda_executor::create(const std::string& model_dir,
                                                        const cuda_executor_options& opts) {
  auto ex = std::make_unique<cuda_executor>();
  if (auto st = ex->load(model_dir, opts); !st) return st.err();
  if (auto st = ex->plan_memory(); !st) return st.err();
  return std::unique_ptr<executor>(std::move(ex));
}

status cuda_executor::load(const std::string& model_dir, const cuda_executor_options& opts) {
  opts_ = opts;
  // Before any weight is bound: a model the kernels would compute wrongly is refused by name.
  auto model_cfg = load_model_config(model_dir);
  if (!model_cfg) return model_cfg.err();
  if (auto st = check_cuda_model_support(model_cfg.value(), opts.max_model_len); !st)
    return make_error(st.err().code, fmt::format("{}: {}", model_dir, st.err().message));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= opts.device) {
    (void)cudaGetLastError();
    return make_error(error_code::unavailable, fmt::format("no CUDA device {} (found {})", opts.device, count));
  }
  AS_CUDA_TRY(cudaSetDevice(opts.device));
  // The kernels this GPU and the loaded code run: the Hopper ones on 9.x unless --kernels portable.
  auto target = current_gpu_target();
  if (!target) return target.err();
  const gpu_target& t = target.value();
  opts_.tuning = cuda_tuning_for(opts.tuning, t, opts.kernels);
  set_programmatic_launch(opts_.tuning.programmatic_launch);
  log::info("CUDA device {}: compute capability {}.{}, kernel code compiled for sm_{}{}; kernels ({}): {}",
            opts.device, t.sm_major, t.sm_minor, t.code_arch, t.code_sm90a ? "a" : "",
            opts.kernels == kernel_choice::portable ? "--kernels portable" : "--kernels auto",
            describe_kernels(opts_.tuning));
  AS_CUDA_TRY(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, opts.device));
  AS_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (opts.profile_steps) profile_.enable();
  const int shards = opts.tensor_parallel_size;
  if (shards > 1 && (!opts.collective || opts.collective->size() != shards ||
                     opts.collective->rank() != opts.tensor_parallel_rank))
    return make_error(error_code::invalid_argument,
                      fmt::format("--tensor-parallel-size {}: shard {} has no collective of its rank and size", shards,
                                  opts.tensor_parallel_rank));
  auto model = load_device_model(model_dir, opts.dtype, opts.quantize_fp8, stream_, opts.weights,
                                 opts.tensor_parallel_rank, shards);
  if (!model) return model.err();
  model_ = std::move(model.value());
  dt_ = model_->dt;
  const model_config& c = model_->cfg;
  if (auto st = gemm_.init(stream_, kCublasWorkspace); !st) return st;
  if (auto st = gemm_.reserve_fp8_scratch(dt_, model_->fp8_max_elements); !st) return st;
  gemm_.set_bulk_gemv(opts_.tuning.bulk);
  if (!opts_.tuning.fp8_activations) gemm_.set_fp8_paths(fp8_gemv_max_m, std::numeric_limits<int>::max());
  const int64_t max_len = opts.max_model_len > 0 ? opts.max_model_len : c.max_position_embeddings;
  if (max_len <= 0)
    return make_error(error_code::invalid_argument, "--max-model-len: the model gives no max_position_embeddings");
  if (opts.block_size <= 0 || opts.max_num_batched_tokens <= 0 || opts.max_num_seqs <= 0)
    return make_error(error_code::invalid_argument, "block size, max batched tokens and max seqs must be positive");
  info_.name = "cuda";
  info_.vocab_size = static_cast<int32_t>(model_->plan->config().vocab_size);   // every shard samples the whole
  info_.max_model_len = static_cast<int32_t>(max_len);
  info_.block_size = opts.block_size;
  info_.eos_token_ids = c.eos_token_ids;
  max_tokens_ = opts.max_num_batched_tokens;
  max_rows_ = opts.max_num_seqs;
  // The FP8 GEMM's per-token activation codes: up to the step's rows, of the longest FP8 weight row.
  if (auto st = gemm_.reserve_fp8_activations(std::max(max_rows_, max_tokens_), int(model_->fp8_max_cols)); !st)
    return st;
  if (opts.kv_cache_fp8 && c.mla)
    return make_error(error_code::unsupported,
                      fmt::format("--kv-cache-dtype fp8: {} caches the latent of multi-head latent attention, which "
                                  "has no FP8 form here; start with --kv-cache-dtype auto",
                                  c.architecture));
  attention_shape ashape;
  ashape.dt = dt_;
  ashape.num_heads = static_cast<int>(c.num_heads);
  ashape.num_kv_heads = static_cast<int>(c.num_kv_heads);
  ashape.head_dim = static_cast<int>(c.head_dim);
  ashape.block_size = opts.block_size;
  ashape.num_sms = num_sms_;
  ashape.kv_fp8 = opts.kv_cache_fp8;
  // A window of at least the context masks nothing: full attention computes the same function.
  if (c.sliding_window && *c.sliding_window < max_len) ashape.window = static_cast<int>(*c.sliding_window);
  auto backend = make_attention_backend(opts.kv_layout, ashape, opts_.tuning.attention);
  if (!backend) return backend.err();
  attention_ = std::move(backend.value());
  // Split pieces, and cascade members' prefix and suffix slots for a batch of max_num_seqs.
  max_partials_ = attention_->partial_capacity(opts.max_num_seqs);
  max_blocks_per_seq_ = static_cast<int>((max_len + opts.block_size - 1) / opts.block_size);
  qkv_width_ = static_cast<int>((c.num_heads + 2 * c.num_kv_heads) * c.head_dim);
  if (c.mla) {
    // One cache per layer of (kv_lora_rank + qk_rope_head_dim)-wide latent rows; the backend's
    // planner still sizes the step metadata, its kernels do not run.
    block_bytes_ = size_t(opts.block_size) * size_t(c.mla->cache_dim()) * act_size(dt_);
    num_caches_ = static_cast<int>(c.num_layers);
    log::info("attention: multi-head latent attention (decode absorbed, prefill up-projected), {} values per token "
              "and layer, block size {}",
              c.mla->cache_dim(), opts.block_size);
  } else {
    block_bytes_ = attention_->block_bytes();
    num_caches_ = static_cast<int>(2 * c.num_layers);
    log::info("attention backend: {}, block size {}{}{}", attention_->name(), attention_->block_size(),
              opts.kv_cache_fp8 ? ", KV cache FP8 E4M3 with per-layer scales (--kv-cache-dtype fp8)" : "",
              ashape.window > 0 ? fmt::format(", sliding window of {} keys (no cascade attention: a shared "
                                              "prefix is not seen whole by every query)", ashape.window)
                                : std::string());
  }
  if (!opts.kv_cache_fp8 && c.quantization && c.quantization->kv_cache_scales)
    log::warn("attention: {}", kv_cache_scheme_unused(dt_ == act_dtype::bf16 ? "bf16" : "fp16"));
  if (c.moe) shared_inter_ = static_cast<int>(model_->plan->shared_expert_intermediate(model_->rank).size());
  ffn_width_ = static_cast<int>(dense_mlp_width(c, shared_inter_));
  if (auto st = allocate_buffers(); !st) return st;
  for (host_slot& s : slots_) {
    AS_CUDA_TRY(cudaEventCreate(&s.start));
    // The completion thread sleeps on `end` (a spinning wait is no faster and costs a core:
    // docs/attention.md, Decisions).
    AS_CUDA_TRY(cudaEventCreateWithFlags(&s.end, cudaEventBlockingSync));
  }
  for (cudaEvent_t& e : end_marks_) AS_CUDA_TRY(cudaEventCreate(&e));
  worker_ = std::thread([this] { worker_loop(); });
  if (tensor_parallel()) launcher_ = std::thread([this] { launcher_loop(); });
  return {};
}

status cuda_executor::allocate_buffers() {
  const model_config& c = model_->cfg;
  const size_t T = max_tokens_, rows = std::max(max_rows_, max_tokens_), es = act_size(dt_);
  // o_proj's input: H heads of head_dim, or of v_head_dim with latent attention.
  const size_t attn_width = c.num_heads * (c.mla ? c.mla->v_head_dim : c.head_dim);
  auto alloc = [&](size_t bytes, void** out) -> status {
    if (auto e = cudaMalloc(out, std::max<size_t>(bytes, 16)); e != cudaSuccess) {
      (void)cudaGetLastError();
      return make_error(error_code::out_of_memory,
                        fmt::format("out of device memory allocating {:.1f} MiB of activations (lower "
                                    "--max-num-batched-tokens or --max-num-seqs)", bytes / 1048576.0));
    }
    buffers_.push_back(*out);
    return {};
  };
  void* p = nullptr;
  struct want { size_t bytes; void** where; };
  const want wants[] = {
      {T * c.hidden_size * 4, reinterpret_cast<void**>(&residual_)},
      {T * qkv_width_ * 4, reinterpret_cast<void**>(&qkv_)},
      {T * c.hidden_size * 4, reinterpret_cast<void**>(&delta_)},
      {T * 2 * ffn_width_ * 4, reinterpret_cast<void**>(&gate_up_)},
      {size_t(max_rows_) * info_.vocab_size * 4, reinterpret_cast<void**>(&logits_)},
      {size_t(max_partials_) * attention_->partial_rows() * c.head_dim * 4, reinterpret_cast<void**>(&partial_o_)},
      {size_t(max_partials_) * attention_->partial_rows() * 2 * 4, reinterpret_cast<void**>(&partial_lse_)},
      {rows * c.hidden_size * es, &x_},
      {T * attn_width * es, &attn_},
      {T * ffn_width_ * es, &act_},
      {size_t(max_rows_) * sizeof(sample_out), reinterpret_cast<void**>(&out_)},
      {size_t(max_rows_) * size_t(grammar_mask_words(info_.vocab_size)) * 4,
       reinterpret_cast<void**>(&grammar_masks_)},
      {size_t(max_rows_) * c.hidden_size * 4, reinterpret_cast<void**>(&rows_residual_)},
      {size_t(max_rows_) * c.num_heads * c.head_dim * 4, reinterpret_cast<void**>(&rows_q_)},
  };
  for (const want& w : wants) {
    if (auto st = alloc(w.bytes, &p); !st) return st;
    *w.where = p;
  }
  if (attention_->prefill_reads_q16()) {  // rope's 16-bit copy of q for the prefill kernel
    if (auto st = alloc(T * c.num_heads * c.head_dim * es, &p); !st) return st;
    q16_ = p;
    if (opts_.tuning.qkv_16bit) {  // gate_up_ is free while qkv is consumed
      if (size_t(2) * ffn_width_ * 4 >= size_t(qkv_width_) * es) {
        qkv16_ = gate_up_;
      } else {
        if (auto st = alloc(T * qkv_width_ * es, &p); !st) return st;
        qkv16_ = p;
      }
    }
  }
  if (c.moe) {
    const moe_ffn::alloc_fn moe_alloc = [&](size_t bytes, void** out) { return alloc(bytes, out); };
    const moe_config& m = *c.moe;
    const int chunk = moe_chunk_tokens_for(static_cast<int>(m.num_experts), static_cast<int>(m.top_k),
                                           static_cast<int>(c.hidden_size),
                                           static_cast<int>(m.expert_intermediate_size), static_cast<int>(es));
    const bool e4m3_experts = std::any_of(model_->layers.begin(), model_->layers.end(),
                                          [](const device_layer& l) {
                                            return l.experts.gate_up_fp8.scale || l.experts.down_fp8.scale;
                                          });
    if (auto st = moe_.init(m, static_cast<int>(c.hidden_size), dt_, static_cast<int>(rows), moe_alloc, chunk,
                            e4m3_experts);
        !st)
      return st;
    moe_.set_cublas_min_rows_per_expert(opts_.tuning.moe_cublas_min_rows_per_expert);
    for (size_t l = 0; l < model_->layers.size(); ++l) {
      moe_slot_.push_back(model_->layers[l].experts.router ? static_cast<int>(info_.moe_layers.size()) : -1);
      if (model_->layers[l].experts.router) info_.moe_layers.push_back(static_cast<int32_t>(l));
    }
    info_.num_experts = static_cast<int32_t>(m.num_experts);
    const size_t counters = info_.moe_layers.size() * size_t(m.num_experts);
    if (auto st = alloc(counters * sizeof(uint32_t), &p); !st) return st;
    expert_counts_ = static_cast<uint32_t*>(p);
    expert_counts_seen_.assign(counters, 0);
    // Waited for here as mla_attention::init waits for its memset: the step's stream does not.
    AS_CUDA_TRY(cudaMemset(expert_counts_, 0, counters * sizeof(uint32_t)));
    AS_CUDA_TRY(cudaStreamSynchronize(cudaStreamLegacy));
    for (const device_layer& l : model_->layers)
      if (l.experts.router) {  // one sparse layer's experts serve for the shapes of all
        if (auto st = moe_.warm_cublas(gemm_, l.experts, stream_); !st) return st;
        break;
      }
  }
  if (c.mla) {
    const mla_attention::alloc_fn mla_alloc = [&](size_t bytes, void** out) { return alloc(bytes, out); };
    if (auto st = mla_.init(c, dt_, model_->inv_freq, model_->rope_attention_factor, static_cast<int>(rows),
                            info_.max_model_len, num_sms_, opts_.tuning.attention.latent_cluster_merge,
                            mla_alloc);
        !st)
      return st;
  }
  if (tensor_parallel()) {
    const int64_t shards = model_->plan->size();
    vocab_stride_ = static_cast<int>((info_.vocab_size + shards - 1) / shards);
    const size_t part = size_t(max_rows_) * size_t(vocab_stride_) * 4;
    if (auto st = alloc(part, &p); !st) return st;
    shard_logits_ = static_cast<float*>(p);
    if (auto st = alloc(part * size_t(shards), &p); !st) return st;
    gathered_logits_ = static_cast<float*>(p);
  }
  if (opts_.keep_logits) {
    if (auto st = alloc(size_t(max_rows_) * info_.vocab_size * 4, &p); !st) return st;
    kept_logits_ = static_cast<float*>(p);
  }
  // Metadata layout: fixed-capacity arrays first, then the growable tail.
  meta_layout& L = layout_;
  L.prefix_row_capacity = size_t(attention_->prefix_row_capacity(max_rows_));
  L.item_capacity = size_t(max_tokens_) * c.num_kv_heads + max_partials_ + L.prefix_row_capacity;
  L.last_item_capacity = size_t(max_rows_) * c.num_kv_heads + max_partials_;
  L.block_table_capacity = size_t(max_rows_) * max_blocks_per_seq_;
  L.mask_capacity = size_t(max_rows_) * kMasksPerSeq;
  size_t off = 0;
  auto take = [&](size_t bytes) { const size_t at = off; off = align16(off + bytes); return at; };
  L.ids = take(T * 4);
  L.positions = take(T * 4);
  L.slots = take(T * 4);
  L.token_seqs = take(T * 4);
  L.q32 = take(T * 4);
  L.sample_rows = take(size_t(max_rows_) * 4);
  L.seqs = take(size_t(max_rows_) * sizeof(attn_seq));
  L.counts = take(16);
  L.items = take(L.item_capacity * sizeof(attn_item));
  L.combines = take(size_t(max_partials_) * sizeof(attn_combine));
  L.prefix_rows = take(std::max<size_t>(L.prefix_row_capacity, 1) * sizeof(attn_prefix_row));
  L.last_seqs = take(size_t(max_rows_) * sizeof(attn_seq));
  L.last_counts = take(16);
  L.last_items = take(L.last_item_capacity * sizeof(attn_item));
  L.last_combines = take(size_t(max_partials_) * sizeof(attn_combine));
  L.sample_seqs = take(size_t(max_rows_) * sizeof(sample_seq));
  L.block_tables = take(L.block_table_capacity * 4);
  L.masks = take(L.mask_capacity * 4);
  L.previous = take(size_t(max_rows_) * 2 * 4);
  L.penalties = off;
  meta_capacity_ = off + kInitialTail;
  AS_CUDA_TRY(cudaMalloc(&meta_, meta_capacity_));
  for (host_slot& s : slots_) {
    if (auto st = ensure_meta_capacity(s, meta_capacity_); !st) return st;
    AS_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&s.out), size_t(max_rows_) * sizeof(sample_out),
                              cudaHostAllocDefault));
    AS_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&s.grammar),
                              size_t(max_rows_) * size_t(grammar_mask_words(info_.vocab_size)) * 4, cudaHostAllocDefault));
    if (opts_.keep_logits)
      AS_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&s.logits), size_t(max_rows_) * info_.vocab_size * 4,
                                cudaHostAllocDefault));
    if (!expert_counts_seen_.empty())
      AS_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&s.expert_counts),
                                expert_counts_seen_.size() * sizeof(uint32_t), cudaHostAllocDefault));
  }
  return {};
}

status cuda_executor::ensure_meta_capacity(host_slot& slot, size_t bytes) {
  if (slot.meta_capacity >= bytes) return {};
  // NOTE: cudaFreeHost waits for the whole device. A tensor-parallel shard keeps its outgrown
  // staging until it is destroyed: on a GPU that shards share, that wait would meet another
  // shard's collective kernel, which waits for this shard's next step (the one staged here).
  if (slot.meta && tensor_parallel()) retired_meta_.push_back(slot.meta);
  else if (slot.meta) cudaFreeHost(slot.meta);
  slot.meta = nullptr;
  const size_t cap = std::max(bytes, slot.meta_capacity * 2);
  AS_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&slot.meta), cap, cudaHostAllocDefault));
  slot.meta_capacity = cap;
  return {};
}

status cuda_executor::allocate_kv_pool(int64_t num_blocks) {
  if (kv_pool_) cudaFree(kv_pool_);
  kv_pool_ = nullptr;
  const size_t caches = size_t(num_caches_);
  cache_stride_ = size_t(num_blocks) * block_bytes_;
  if (auto e = cudaMalloc(&kv_pool_, std::max<size_t>(caches * cache_stride_, 16)); e != cudaSuccess) {
    (void)cudaGetLastError();
    kv_pool_ = nullptr;
    return make_error(error_code::out_of_memory,
                      fmt::format("out of device memory allocating the KV cache: {} blocks ({:.1f} MiB)", num_blocks,
                                  caches * cache_stride_ / 1048576.0));
  }
  info_.num_blocks = static_cast<int32_t>(num_blocks);
  builder_ = std::make_unique<step_builder>(limits(num_blocks), *attention_);
  return {};
}

step_limits cuda_executor::limits(int64_t num_blocks) const {
  step_limits l;
  l.max_rows = max_rows_;
  l.max_tokens = max_tokens_;
  l.block_size = info_.block_size;
  l.vocab_size = info_.vocab_size;
  l.max_model_len = info_.max_model_len;
  l.num_blocks = num_blocks;
  l.block_table_capacity = layout_.block_table_capacity;
  l.mask_capacity = layout_.mask_capacity;
  l.item_capacity = layout_.item_capacity;
  l.last_item_capacity = layout_.last_item_capacity;
  l.prefix_row_capacity = layout_.prefix_row_capacity;
  // Cascade: reading a shared prefix once per group against once per member, in bytes per layer.
  const model_config& c = model_->cfg;
  const int64_t es = int64_t(act_size(dt_));
  // Latent attention runs its own kernels (docs/mla.md); the backend says whether it takes cascade
  // groups (not over the FP8 cache, whose prefix pass would read 16-bit keys, nor under a sliding
  // window, where a member's query does not see the whole prefix).
  l.cascade = opts_.cascade_attention && !c.mla && attention_->takes_cascade();
  l.cascade_costs = {2 * c.num_kv_heads * c.head_dim * es, 2 * c.num_heads * (c.head_dim + 2) * 4};
  l.enforce_eager = opts_.enforce_eager;
  l.last_layer_all_rows = opts_.tuning.last_layer_all_rows || model_->cfg.mla.has_value();
  l.latent_attention = model_->cfg.mla.has_value();
  l.eos_token_ids = info_.eos_token_ids;
  return l;
}

status cuda_executor::plan_memory(const std::function<bool()>& before_step) {
  // A worst-case step: max_num_batched_tokens prompt tokens (in sequences of at most
  // max_model_len), every sequence sampled, on a temporary pool just large enough.
  const int bs = opts_.block_size, max_len = info_.max_model_len;
  step_batch probe;
  int64_t blocks = 0;
  for (int left = max_tokens_; left > 0 && int(probe.seqs.size()) < max_rows_;) {
    step_sequence s;
    s.seq_id = probe.seqs.size();
    const int len = std::min(left, max_len);
    s.new_tokens.assign(size_t(len), 0);
    for (int b = 0; b < (len + bs - 1) / bs; ++b) s.block_table.push_back(static_cast<int32_t>(blocks++));
    s.sample = true;
    s.params.temperature = 0.0f;
    probe.seqs.push_back(std::move(s));
    left -= len;
  }
  if (auto st = allocate_kv_pool(blocks); !st) return st;
  if (before_step && !before_step())
    return make_error(error_code::unavailable, "another tensor-parallel shard failed to start");
  {
    std::lock_guard lock(submit_mu_);
    pending_step p;
    if (auto st = stage_and_launch(probe, slots_[0], p); !st) return st;
    AS_CUDA_TRY(cudaStreamSynchronize(stream_));  // start-up only; p must outlive its callback
    if (opts_.collective)
      if (auto st = opts_.collective->async_error(); !st) return st;
    prev_rows_.clear();
    last_mark_ = -1;  // the first real step has no step before it
    // The worst-case step's routed tokens are no request's: the first real step counts from here.
    if (slots_[0].expert_counts)
      std::copy_n(slots_[0].expert_counts, expert_counts_seen_.size(), expert_counts_seen_.begin());
  }
  size_t free_b = 0, total_b = 0;
  AS_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  const size_t probe_pool = size_t(num_caches_) * cache_stride_;
  cudaFree(kv_pool_);
  kv_pool_ = nullptr;
  const double used = double(total_b - free_b) - double(probe_pool);
  const size_t per_block = size_t(num_caches_) * block_bytes_;
  // The flag that sizes the pool, for the errors: the override, else the byte size, else the
  // utilization's share of what the worst-case step leaves.
  const char* sizing_flag = opts_.num_blocks_override    ? "--num-gpu-blocks-override"
                            : opts_.kv_cache_memory_bytes ? "--kv-cache-memory-bytes"
                                                          : "--gpu-memory-utilization";
  auto log_budget = [&](const std::string& setting, double budget) {
    log::info("GPU memory: {:.2f} GiB total, {:.2f} GiB in use after the worst-case step (weights {:.2f} GiB); "
              "KV budget at {} {} is {:.2f} GiB", total_b / 1073741824.0, used / 1073741824.0,
              model_->bytes / 1073741824.0, sizing_flag, setting, std::max(0.0, budget) / 1073741824.0);
  };
  int64_t num_blocks = 0;
  if (opts_.num_blocks_override) {
    num_blocks = *opts_.num_blocks_override;
  } else if (opts_.kv_cache_memory_bytes) {
    // Exactly the bytes asked for, whatever else holds memory on the device.
    num_blocks = *opts_.kv_cache_memory_bytes / int64_t(per_block);
    log_budget(fmt::format("{}", *opts_.kv_cache_memory_bytes), double(*opts_.kv_cache_memory_bytes));
  } else {
    const double budget = double(total_b) * opts_.gpu_memory_utilization - used;
    num_blocks = budget > 0 ? static_cast<int64_t>(budget / double(per_block)) : 0;
    log_budget(fmt::format("{}", opts_.gpu_memory_utilization), budget);
  }
  if (num_blocks < max_blocks_per_seq_)
    return make_error(error_code::out_of_memory,
                      fmt::format("KV cache too small: {} blocks of {} tokens cannot hold one sequence of "
                                  "--max-model-len {} (needs {}); raise {} or lower --max-model-len",
                                  num_blocks, bs, max_len, max_blocks_per_seq_, sizing_flag));
  if (auto st = allocate_kv_pool(num_blocks); !st)
    return make_error(st.err().code,
                      fmt::format("{}: {}; {:.2f} GiB of the device's {:.2f} GiB are free after the worst-case step",
                                  sizing_flag, st.err().message, (double(free_b) + double(probe_pool)) / 1073741824.0,
                                  total_b / 1073741824.0));
  log::info("KV cache: {} blocks of {} tokens ({:.2f} GiB); max concurrency at {} tokens per sequence: {:.2f}x",
            num_blocks, bs, double(num_blocks) * per_block / 1073741824.0, max_len,
            double(num_blocks) * bs / double(max_len));
  // What the latent buys (one GPU; a tensor-parallel shard would split per-head caches' heads).
  if (const auto& mla = model_->cfg.mla; mla && !tensor_parallel()) {
    const double per_head = double(mla->per_head_cache_dim(model_->cfg.num_heads)) / double(mla->cache_dim());
    log::info("KV cache: {} tokens as latents; a per-head cache of the same bytes would hold {} ({:.1f}x fewer)",
              num_blocks * bs, static_cast<int64_t>(double(num_blocks * bs) / per_head), per_head);
  }
  return {};
}

cuda_executor::~cuda_executor() {
  (void)cudaSetDevice(opts_.device);  // frees this executor's device memory from any thread
  if (launcher_.joinable()) {  // the queued steps launch (and then complete) first
    {
      std::lock_guard lock(launch_mu_);
      launcher_stopping_ = true;
    }
    launch_cv_.notify_all();
    launcher_.join();
  }
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return pending_.empty(); });
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (stream_) cudaStreamSynchronize(stream_);
  if (const std::string profile = profile_.report(); !profile.empty()) fmt::print(stderr, "{}", profile);
  for (auto& [bucket, g] : graphs_) cudaGraphExecDestroy(g);
  for (char* meta : retired_meta_) cudaFreeHost(meta);
  for (host_slot& s : slots_) {
    if (s.meta) cudaFreeHost(s.meta);
    if (s.out) cudaFreeHost(s.out);
    if (s.grammar) cudaFreeHost(s.grammar);
    if (s.logits) cudaFreeHost(s.logits);
    if (s.expert_counts) cudaFreeHost(s.expert_counts);
    if (s.start) cudaEventDestroy(s.start);
    if (s.end) cudaEventDestroy(s.end);
  }
  for (cudaEvent_t e : end_marks_)
    if (e) cudaEventDestroy(e);
  for (void* p : buffers_) cudaFree(p);
  if (meta_) cudaFree(meta_);
  if (kv_pool_) cudaFree(kv_pool_);
  model_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

void cuda_executor::worker_loop() {
  for (;;) {
    pending_step* front = nullptr;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return (!pending_.empty() && (pending_.front()->ready || pending_.front()->launched)) ||
               (stopping_ && pending_.empty());
      });
      if (pending_.empty()) return;
      front = pending_.front().get();
    }
    // Only this thread pops: `front` stays at the head while it waits for the device.
    if (!front->ready) {
      if (const cudaError_t e = cudaEventSynchronize(slots_[front->slot].end); e != cudaSuccess)
        front->outcome = cuda_status(e, "waiting for a step");
      // A collective ended by an abort or a timeout finishes without a CUDA error; its output is
      // garbage and the step fails.
      else if (opts_.collective)
        if (status st = opts_.collective->async_error(); !st) front->outcome = st;
    }
    std::unique_ptr<pending_step> p;
    {
      std::lock_guard lock(mu_);
      p = std::move(pending_.front());
      pending_.pop_front();
    }
    finish(*p);
    cv_.notify_all();
  }
}

void cuda_executor::finish(pending_step& p) {
  step_result r;
  r.step_id = p.step_id;
  r.outcome = p.outcome;
  r.cascade_seqs = p.cascade_seqs;
  host_slot& slot = slots_[p.slot];
  if (p.outcome.ok()) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, slot.start, slot.end) == cudaSuccess) r.device_ms = ms;
    // The device sat idle from the previous step's end until this step's first copy.
    if (p.prev_mark >= 0 && cudaEventElapsedTime(&ms, end_marks_[p.prev_mark], slot.start) == cudaSuccess)
      r.idle_before_ms = std::max(0.0f, ms);
    (void)cudaGetLastError();
    r.tokens.reserve(p.seq_ids.size());
    for (size_t i = 0; i < p.seq_ids.size(); ++i) {
      const sample_out& o = slot.out[p.out_rows[i]];
      sampled_token t;
      t.seq_id = p.seq_ids[i];
      t.token_id = o.token;
      t.logprob = o.logprob;
      for (int k = 0; k < p.num_top[i]; ++k) t.top_logprobs.push_back({o.top_ids[k], o.top_logprobs[k]});
      r.tokens.push_back(std::move(t));
    }
    if (opts_.keep_logits) {
      std::vector<std::vector<float>> rows;
      const size_t V = size_t(info_.vocab_size);
      for (size_t i = 0; i < p.out_rows.size(); ++i)
        rows.emplace_back(slot.logits + p.out_rows[i] * V, slot.logits + (p.out_rows[i] + 1) * V);
      std::lock_guard lock(logits_mu_);
      last_logits_ = std::move(rows);
    }
    // Steps finish in launch order, so each difference is one step's routed tokens.
    if (slot.expert_counts) {
      r.expert_tokens.resize(expert_counts_seen_.size());
      for (size_t i = 0; i < expert_counts_seen_.size(); ++i) {
        r.expert_tokens[i] = static_cast<uint32_t>(slot.expert_counts[i] - expert_counts_seen_[i]);
        expert_counts_seen_[i] = slot.expert_counts[i];
      }
    }
  }
  if (p.outcome.ok()) profile_.collect(p.slot);  // before the slot's events are reused
  {
    std::lock_guard lock(mu_);
    slot.busy = false;
  }
  cv_.notify_all();
  if (p.done) p.done(std::move(r));
}

std::vector<std::vector<float>> cuda_executor::last_logits() const {
  std::lock_guard lock(logits_mu_);
  return last_logits_;
}

}  // namespace cuda

result<std::unique_ptr<executor>> make_cuda_executor(const std::string& model_dir,
                                                    const cuda_executor_options& options) {
  return cuda::cuda_executor::create(model_dir, options);
}

}  // namespace actorserve::gpu
