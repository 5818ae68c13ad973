#pragma once
/// Internals of the CUDA executor (see cuda_executor.hpp): the class, split over
/// cuda_executor.cpp (start-up, memory planning, completion thread) and cuda_step.cpp (copying a
/// step that step_builder staged into pinned memory and enqueuing its forward pass, eagerly or
/// through a CUDA graph).
#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "gpu/cuda/attention/backend.hpp"
#include "gpu/cuda/cuda_executor.hpp"
#include "gpu/cuda/model/cuda_model.hpp"
#include "gpu/cuda/act_dtype.hpp"
#include "gpu/cuda/sampling/sampler.hpp"
#include "gpu/cuda/step/step_builder.hpp"
#include "gpu/cuda/step/step_profile.hpp"

namespace actorserve::gpu::cuda {

/// Byte offsets of the step metadata inside the staging buffers (the same on host and device).
/// Everything up to `penalties` sits at fixed offsets so captured graphs stay valid.
struct meta_layout {
  size_t ids = 0, positions = 0, slots = 0, token_seqs = 0, q32 = 0, sample_rows = 0, seqs = 0, counts = 0, items = 0, combines = 0,
         sample_seqs = 0, block_tables = 0, masks = 0, previous = 0, penalties = 0;
  /// The last layer's attention over the sampled rows only (launch_shape::sampled_only).
  size_t last_seqs = 0, last_counts = 0, last_items = 0, last_combines = 0;
  /// Cascade prefix pieces' member rows (their items follow the step's items).
  size_t prefix_rows = 0, prefix_row_capacity = 0;
  size_t item_capacity = 0, last_item_capacity = 0, block_table_capacity = 0, mask_capacity = 0;
};

/// One pinned staging area; two alternate so a step is staged while the previous one runs. The
/// completion thread waits on `end` (recorded after the output copies) rather than a host
/// callback in the stream, which would hold the next step back until the callback returned.
struct host_slot {
  char* meta = nullptr;          ///< pinned metadata, meta_layout offsets
  size_t meta_capacity = 0;
  sample_out* out = nullptr;     ///< pinned sampler output
  float* logits = nullptr;       ///< pinned copy of the logits (keep_logits only)
  uint32_t* grammar = nullptr;   ///< pinned grammar mask rows ([max rows, mask words])
  /// Pinned copy of the routed-token counters after the step ([sparse layer][expert]; MoE models)
  uint32_t* expert_counts = nullptr;
  cudaEvent_t start = nullptr, end = nullptr;
  bool busy = false;
};

class cuda_executor;

/// A submitted step waiting for its completion on the executor's thread.
struct pending_step {
  cuda_executor* owner = nullptr;
  uint64_t step_id = 0;
  executor::done_fn done;
  int slot = 0;
  status outcome;
  bool ready = false;                ///< failed before launch: `outcome` holds why
  bool launched = false;             ///< enqueued: done once its slot's `end` event completes
  std::vector<uint64_t> seq_ids;     ///< sampled sequences, batch order
  std::vector<int32_t> out_rows;     ///< their rows in the sampler output
  std::vector<int32_t> num_top;      ///< top logprobs each asked for
  int32_t logit_rows = 0;            ///< rows of logits copied (keep_logits)
  int mark = -1, prev_mark = -1;     ///< end_marks_ of this step and of the step launched before it
  int32_t cascade_seqs = 0;          ///< sequences whose decode took a shared-prefix pass
};

/// Sizes of one launch of the forward pass.
struct launch_shape {
  int tokens = 0;        ///< rows through the layers
  int sample_rows = 0;   ///< rows through lm_head and the sampler
  attention_grids attn;  ///< attention launch sizes
  /// The last layer runs past its K/V writes on the sample rows only (gathered to rows_residual_
  /// and rows_q_), its attention as a decode of one query per sampled sequence (last_attn).
  bool sampled_only = false;
  attention_grids last_attn;
  /// Latent attention: the sequences computed in the up-projected form (none in a decode graph)
  /// and the rows of the absorbed form (staged_step's).
  std::span<const attn_seq> up_projected;
  int absorbed_rows = 0;
  int block_copies = 0;
  size_t pairs_offset = 0;
  /// The sampler ends the forward pass; false when the step has grammar masks, which are copied
  /// in and sampled after it (enqueue_grammar_sampling) so that the pass never waits for them.
  bool sampler = true;
};

class cuda_executor final : public executor, public cuda_executor_probe {
 public:
  static result<std::unique_ptr<executor>> create(const std::string& model_dir, const cuda_executor_options& opts);
  cuda_executor() = default;
  ~cuda_executor() override;

  const executor_info& info() const override { return info_; }
  void submit(step_batch batch, done_fn done) override;
  std::vector<std::vector<float>> last_logits() const override;
  bool supports_token_masks() const override { return true; }
  int64_t graph_replays() const override { return graph_replays_.load(); }
  int64_t sampled_only_steps() const override { return sampled_only_steps_.load(); }
  int64_t moe_cublas_chunks() const override { return moe_.cublas_chunks(); }
  int64_t fused_qkv_gemvs() const override { return fused_qkv_gemvs_.load(); }
  int64_t fused_gate_up_gemvs() const override { return fused_gate_up_gemvs_.load(); }

  /// create()'s two halves, apart for a tensor-parallel group (start_shard_executors): load the
  /// weights and allocate everything but the KV pool, then plan the pool with a worst-case step,
  /// the first that goes through the collective. `before_step` runs once the step's pool is
  /// allocated, just before the step; false fails the planning (another shard failed).
  status load(const std::string& model_dir, const cuda_executor_options& opts);
  status plan_memory(const std::function<bool()>& before_step = {});

 private:
  status allocate_buffers();
  status allocate_kv_pool(int64_t num_blocks);
  status ensure_meta_capacity(host_slot& slot, size_t bytes);
  /// Stages `b` (builder_) and copies it into `slot`, then enqueues copies, the forward pass, the
  /// output copies and the completion callback. An error leaves nothing enqueued for the host to
  /// wait on.
  status stage_and_launch(const step_batch& b, host_slot& slot, pending_step& p);
  /// What a step may hold with a pool of `num_blocks` blocks (the builder's limits).
  step_limits limits(int64_t num_blocks) const;
  status enqueue_forward(const launch_shape& shape);
  bool tensor_parallel() const { return opts_.tensor_parallel_size > 1; }
  /// Tensor parallel: the sampled rows' logits of this shard's vocabulary slice (x_ times its
  /// lm_head rows), gathered from every shard and arranged in vocabulary order into logits_.
  status sharded_lm_head(int rows);
  status launch_decode_graph(int bucket, const launch_shape& shape);
  /// After the forward pass of a step with grammar masks: waits on this thread for each mask to
  /// be filled or abandoned (an abandoned one allows every token: its token is dropped), stages
  /// them into `slot`, and enqueues their copy and the sampler.
  status enqueue_grammar_sampling(const staged_step& st, host_slot& slot, int rows);
  void finish(pending_step& p);
  void worker_loop();
  /// Stages and enqueues one step on the calling thread (submit's work; a shard's launcher's).
  void launch_step(step_batch batch, done_fn done);
  /// Tensor parallel: launches the queued steps in order on this shard's own thread.
  void launcher_loop();

  cuda_executor_options opts_;
  executor_info info_;
  std::unique_ptr<device_model> model_;
  std::unique_ptr<attention_backend> attention_;
  act_dtype dt_ = act_dtype::bf16;
  cudaStream_t stream_ = nullptr;
  gemm_runner gemm_;
  int num_sms_ = 0;
  int max_tokens_ = 0, max_rows_ = 0, max_partials_ = 0, max_blocks_per_seq_ = 0;
  int qkv_width_ = 0;
  int shared_inter_ = 0;             ///< the shared experts' MLP width (DeepSeek-V2); 0 without
  int ffn_width_ = 0;                ///< the widest dense MLP (dense_mlp_width): 0 when every layer is sparse
  // Device buffers.
  std::vector<void*> buffers_;
  float *residual_ = nullptr, *qkv_ = nullptr, *delta_ = nullptr, *gate_up_ = nullptr, *logits_ = nullptr;
  float *partial_o_ = nullptr, *partial_lse_ = nullptr, *kept_logits_ = nullptr;
  /// Tensor parallel: this shard's logits ([max_rows_][its vocabulary slice], rows packed) and
  /// every shard's gathered ([shards][max_rows_ * vocab_stride_]); vocab_stride_ is the largest
  /// slice, so every shard gathers the same count.
  float *shard_logits_ = nullptr, *gathered_logits_ = nullptr;
  int vocab_stride_ = 0;
  void *x_ = nullptr, *attn_ = nullptr, *act_ = nullptr;
  void* q16_ = nullptr;              ///< rope's 16-bit scaled q, when the prefill kernel reads it
  moe_ffn moe_;                      ///< the sparse layers' FFN and its buffers (MoE models)
  /// The tokens the router sent to each expert since start, [sparse layer][expert] modulo 2^32
  /// (moe_route_args::counts); each step copies them out and finish() reports the difference
  /// from the previous step's copy (step_result::expert_tokens).
  uint32_t* expert_counts_ = nullptr;
  std::vector<uint32_t> expert_counts_seen_;  ///< the counters as the last finished step read them
  std::vector<int> moe_slot_;        ///< each layer's index among the sparse layers; -1 for a dense one
  mla_attention mla_;                ///< latent attention and its buffers (DeepSeek-V2)
  /// The sampled rows' residual and fp32 q in the last layer of a prefill-carrying step
  /// ([max_rows, hidden] and [max_rows, H * D]); unused with cuda_tuning::last_layer_all_rows.
  float *rows_residual_ = nullptr, *rows_q_ = nullptr;
  /// The QKV GEMM's output in the activation dtype for rope in prefill-carrying steps (with q16_,
  /// opt-in: cuda_tuning::qkv_16bit); gate_up_'s memory where it is large enough.
  void* qkv16_ = nullptr;
  sample_out* out_ = nullptr;
  uint32_t* grammar_masks_ = nullptr;  ///< the grammar mask rows of a step ([max rows, mask words])
  char* meta_ = nullptr;             ///< device copy of the staged metadata
  size_t meta_capacity_ = 0;
  meta_layout layout_;
  void* kv_pool_ = nullptr;
  /// One block of one cache: K or V of one layer, or one layer's latents (latent attention).
  size_t block_bytes_ = 0;
  size_t cache_stride_ = 0;          ///< one whole cache
  int num_caches_ = 0;               ///< caches in the pool: 2 per layer (K, V), or 1 (latent)
  // Staging and completion.
  host_slot slots_[2];
  /// Tensor parallel: outgrown pinned staging, freed with the executor (ensure_meta_capacity).
  std::vector<char*> retired_meta_;
  int next_slot_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<pending_step>> pending_;
  bool stopping_ = false;
  std::thread worker_;
  std::mutex submit_mu_;
  // Tensor parallel: submit queues the step and the launcher thread stages and enqueues it. A
  // step's host calls may block until the device has run earlier work (a full launch queue, an
  // NCCL call waiting for its peers), which on a shard waits for the other shards' collectives:
  // one thread that enqueued every shard's step in turn (executor_group's) would deadlock.
  std::thread launcher_;
  std::mutex launch_mu_;                ///< guards launch_queue_ and launcher_stopping_
  std::condition_variable launch_cv_;
  std::deque<std::pair<step_batch, done_fn>> launch_queue_;
  bool launcher_stopping_ = false;
  mutable std::mutex logits_mu_;
  std::vector<std::vector<float>> last_logits_;
  // Idle accounting: an end mark per launched step (a ring: a step's finish reads the mark of the
  // step before it, which at most two later launches could overwrite).
  static constexpr int kMarks = 4;
  cudaEvent_t end_marks_[kMarks] = {};
  uint64_t launches_ = 0;
  int last_mark_ = -1;               ///< mark of the last launched step; -1 after a failed one
  // Async scheduling: (sequence, sampler row) of each sequence sampled by the last launched
  // step, sorted by sequence (prev_rows_), and the step being staged (cur_rows_).
  std::vector<std::pair<uint64_t, int32_t>> prev_rows_, cur_rows_;
  // The host half of a step (made with the pool, which sets its block range) and the staged
  // step it fills, reused (no per-step allocations); guarded by submit_mu_.
  std::unique_ptr<step_builder> builder_;
  staged_step staged_;
  // CUDA graphs per decode bucket: with the sampler (key 2 * bucket) and without it, for steps
  // with grammar masks (2 * bucket + 1).
  std::map<int, cudaGraphExec_t> graphs_;
  std::atomic<int64_t> graph_replays_{0};
  std::atomic<int64_t> sampled_only_steps_{0};
  std::atomic<int64_t> fused_qkv_gemvs_{0}, fused_gate_up_gemvs_{0};
  // Opt-in per-class timing of the eager steps (staged under submit_mu_, collected by the worker).
  step_profile profile_;
};

}  // namespace actorserve::gpu::cuda
