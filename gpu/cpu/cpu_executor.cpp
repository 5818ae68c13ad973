#include "gpu/cpu/cpu_executor.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "config/log.hpp"
#include "gpu/model/model_weights.hpp"
#include "gpu/model/shard_plan.hpp"
#include "gpu/sampling/cpu_sampler.hpp"

namespace actorserve::gpu {
namespace {

error bad_step(uint64_t step_id, const std::string& what) {
  return make_error(error_code::invalid_argument, fmt::format("step {}: {}", step_id, what));
}

}  // namespace

/// What every shard is made from: the model files (read once), the plan and the cache size.
struct cpu_executor::loaded_model {
  const model_files& files;
  const shard_plan& plan;
  int64_t max_len = 0;
  int64_t num_blocks = 0;
  std::vector<float> k_scales, v_scales;   ///< --kv-cache-dtype fp8, per layer
};

namespace {

/// --kv-cache-dtype fp8: the checkpoint's per-layer self_attn.k_scale / v_scale, else 1.0.
status read_fp8_kv_scales(const model_files& files, std::vector<float>& k_scales, std::vector<float>& v_scales) {
  for (int64_t l = 0; l < files.config.num_layers; ++l) {
    for (auto [name, out] : {std::pair{"k_scale", &k_scales}, std::pair{"v_scale", &v_scales}}) {
      const std::string tensor = fmt::format("model.layers.{}.self_attn.{}", l, name);
      float s = 1.0f;
      if (files.store.contains(tensor)) {
        auto v = files.store.get_scalar(tensor);
        if (!v) return make_error(v.err().code, fmt::format("--kv-cache-dtype fp8: {}", v.err().message));
        s = v.value();
      }
      out->push_back(s);
    }
  }
  return {};
}

/// Bytes of one KV block over all shards (fp32 K and V of every layer).
size_t group_bytes_per_block(const shard_plan& plan, int64_t block_size) {
  size_t bytes = 0;
  for (int64_t r = 0; r < plan.size(); ++r) bytes += cpu::model_shard::bytes_per_block(plan, r, block_size);
  return bytes;
}

/// The pool's blocks, the same in every shard: opts.num_blocks where set; else as many as
/// --kv-cache-memory-bytes holds of the largest shard's blocks (each shard's pool within it);
/// else as many as --cpu-kv-cache-space holds of all shards' blocks together.
result<int64_t> plan_num_blocks(const cpu_executor_options& opts, const shard_plan& plan) {
  if (opts.num_blocks > 0) return int64_t{opts.num_blocks};
  if (opts.kv_cache_memory_bytes) {
    size_t shard_block = 0;
    for (int64_t r = 0; r < plan.size(); ++r)
      shard_block = std::max(shard_block, cpu::model_shard::bytes_per_block(plan, r, opts.block_size));
    const int64_t num_blocks = *opts.kv_cache_memory_bytes / static_cast<int64_t>(shard_block);
    if (num_blocks < 1 || num_blocks > INT32_MAX)
      return make_error(error_code::out_of_memory,
                        fmt::format("--kv-cache-memory-bytes {}: holds {} KV blocks of {} bytes (a shard's fp32 K and "
                                    "V of {} tokens in every layer); a pool takes 1 to {} blocks",
                                    *opts.kv_cache_memory_bytes, num_blocks, shard_block, opts.block_size, INT32_MAX));
    return num_blocks;
  }
  const size_t per_block = group_bytes_per_block(plan, opts.block_size);
  const int64_t num_blocks = opts.kv_cache_bytes / static_cast<int64_t>(per_block);
  if (num_blocks < 1 || num_blocks > INT32_MAX)
    return make_error(error_code::out_of_memory,
                      fmt::format("KV cache of {} bytes holds {} blocks of {} bytes", opts.kv_cache_bytes, num_blocks,
                                  per_block));
  return num_blocks;
}

}  // namespace

result<std::vector<std::unique_ptr<cpu_executor>>> cpu_executor::create_shards(
    const std::string& model_dir, const cpu_executor_options& opts, std::shared_ptr<host_collective> collective) {
  if (opts.block_size < 1 || opts.block_size > 4096)
    return make_error(error_code::invalid_argument, fmt::format("block_size {} is out of range", opts.block_size));
  if (opts.num_blocks < 0 || opts.threads < 0 || opts.max_model_len < 0)
    return make_error(error_code::invalid_argument, "num_blocks, threads and max_model_len must not be negative");
  const int64_t tp = opts.tensor_parallel_size;
  if (tp > 1 && (!collective || collective->size() != tp))
    return make_error(error_code::invalid_argument,
                      fmt::format("--tensor-parallel-size {}: the shards need a collective of {} ranks", tp, tp));
  auto files = open_model_files(model_dir, opts.weights);
  if (!files) return files.err();
  const model_config& cfg = files->config;
  const int64_t max_len = opts.max_model_len > 0 ? opts.max_model_len : cfg.max_position_embeddings;
  if (max_len > cfg.max_position_embeddings)
    return make_error(error_code::invalid_argument,
                      fmt::format("max_model_len {} exceeds the model's max_position_embeddings {}", max_len,
                                  cfg.max_position_embeddings));
  auto plan = shard_plan::make(cfg, tp, opts.expert_parallel ? moe_parallelism::expert : moe_parallelism::tensor);
  if (!plan) return plan.err();
  if (opts.quantize_weights_fp8 && !cfg.quantization && tp > 1)
    return make_error(error_code::unsupported,
                      "--quantization fp8: per-channel scales are computed over whole weights, which the CPU "
                      "executor does before slicing only at --tensor-parallel-size 1 (FP8 checkpoints shard "
                      "at any size)");
  auto planned = plan_num_blocks(opts, plan.value());
  if (!planned) return planned.err();
  const int64_t num_blocks = planned.value();
  loaded_model m{files.value(), plan.value(), max_len, num_blocks, {}, {}};
  if (opts.kv_cache_fp8)
    if (auto st = read_fp8_kv_scales(m.files, m.k_scales, m.v_scales); !st) return st.err();
  const int all_threads = opts.threads > 0 ? opts.threads : static_cast<int>(std::thread::hardware_concurrency());
  const int threads = std::max(1, all_threads / static_cast<int>(tp));
  std::vector<std::unique_ptr<cpu_executor>> shards;
  for (int64_t r = 0; r < tp; ++r) {
    auto shard = create_shard(m, r, collective, opts, threads);
    if (!shard) return shard.err();
    shards.push_back(std::move(shard).value());
  }
  if (cfg.quantization)
    for (const fp8_group& g : cfg.quantization->groups)
      log::info("cpu executor: FP8 checkpoint ({} {}: {} weights, {} activations) dequantized to fp32; activations "
                "compute in fp32",
                to_string(cfg.quantization->method), g.name, to_string(g.scheme.weights),
                to_string(g.scheme.activations));
  else if (opts.quantize_weights_fp8)
    log::info("cpu executor: --quantization fp8: linear weights rounded to FP8 E4M3 per output channel");
  if (opts.kv_cache_fp8)
    log::info("cpu executor: --kv-cache-dtype fp8: {} rounded to FP8 E4M3 as they are stored",
              cfg.mla ? "latent rows (one scale a layer: self_attn.k_scale, else 1.0)" : "K/V");
  else if (cfg.quantization && cfg.quantization->kv_cache_scales)
    log::warn("cpu executor: {}", kv_cache_scheme_unused("fp32"));
  log::info("cpu executor: {} ({} layers, hidden {}), {} tensor-parallel shard(s){}, {} KV blocks of {} tokens ({} "
            "layout, {} bytes a token over all shards), {} threads a shard",
            cfg.architecture, cfg.num_layers, cfg.hidden_size, tp,
            opts.expert_parallel ? " holding whole experts (expert parallel)" : "", num_blocks, opts.block_size,
            shards.front()->model_->cache_layout().is_latent() ? "latent" : "per-head",
            group_bytes_per_block(plan.value(), opts.block_size) / static_cast<size_t>(opts.block_size), threads);
  return shards;
}

result<std::unique_ptr<cpu_executor>> cpu_executor::create_shard(const loaded_model& m, int64_t rank,
                                                                 std::shared_ptr<host_collective> collective,
                                                                 const cpu_executor_options& opts, int threads) {
  const model_config& cfg = m.files.config;
  std::unique_ptr<cpu_executor> ex(new cpu_executor());
  try {
    ex->model_ = std::make_unique<cpu::model_shard>(m.files.views, m.plan, rank, std::move(collective), m.num_blocks,
                                                    opts.block_size, opts.mla_form,
                                                    opts.quantize_weights_fp8 && !cfg.quantization);
  } catch (const std::bad_alloc&) {
    return make_error(error_code::out_of_memory, fmt::format("cannot allocate {} KV blocks", m.num_blocks));
  }
  if (opts.kv_cache_fp8) ex->model_->set_fp8_kv_scales(m.k_scales, m.v_scales);
  ex->info_.name = "cpu";
  ex->info_.vocab_size = static_cast<int32_t>(cfg.vocab_size);
  ex->info_.max_model_len = static_cast<int32_t>(m.max_len);
  ex->info_.block_size = opts.block_size;
  ex->info_.num_blocks = static_cast<int32_t>(m.num_blocks);
  ex->info_.host_kv_cache_bytes =
      m.num_blocks * static_cast<int64_t>(cpu::model_shard::bytes_per_block(m.plan, rank, opts.block_size));
  ex->info_.eos_token_ids = cfg.eos_token_ids;
  ex->info_.num_experts = cfg.moe ? static_cast<int32_t>(cfg.moe->num_experts) : 0;
  ex->info_.moe_layers = ex->model_->moe_layers();
  // NOTE: the shared-prefix pass assumes every query of a group sees the whole prefix, which a
  // sliding window shorter than the context breaks; latent attention (DeepSeek-V2) keeps its own
  // per-sequence forms. Every shard plans the same groups (the plan reads only the batch).
  const bool window_bites = cfg.sliding_window && *cfg.sliding_window < m.max_len;
  ex->cascade_ = opts.cascade_attention && !cfg.mla && !window_bites;
  const int64_t fp32 = sizeof(float);
  ex->cascade_costs_ = {2 * cfg.num_kv_heads * cfg.head_dim * fp32, 2 * cfg.num_heads * (cfg.head_dim + 2) * fp32};
  ex->pool_ = std::make_unique<thread_pool>(threads);
  ex->worker_ = std::thread([p = ex.get()] { p->worker_loop(); });
  return ex;
}

result<std::unique_ptr<cpu_executor>> cpu_executor::create(const std::string& model_dir,
                                                           const cpu_executor_options& opts) {
  if (opts.tensor_parallel_size != 1)
    return make_error(error_code::invalid_argument,
                      fmt::format("--tensor-parallel-size {}: cpu_executor::create makes one whole-model executor; "
                                  "make_cpu_executor makes the shards",
                                  opts.tensor_parallel_size));
  auto shards = create_shards(model_dir, opts, nullptr);
  if (!shards) return shards.err();
  return std::move(shards.value().front());
}

std::vector<std::vector<float>> cpu_executor::last_logits() const {
  std::lock_guard lock(compute_mu_);
  return kept_logits_;
}

cpu_executor::~cpu_executor() {
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void cpu_executor::submit(step_batch batch, done_fn done) {
  {
    std::lock_guard lock(queue_mu_);
    queue_.push_back({std::move(batch), std::move(done)});
  }
  queue_cv_.notify_one();
}

void cpu_executor::worker_loop() {
  for (;;) {
    queued_step step;
    bool cancel = false;
    {
      std::unique_lock lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      step = std::move(queue_.front());
      queue_.pop_front();
      cancel = stopping_;
    }
    step_result r;
    if (cancel) {
      // NOTE: steps still queued at shutdown are answered, never dropped silently.
      r.step_id = step.batch.step_id;
      r.outcome = make_error(error_code::cancelled, "executor shut down");
    } else {
      r = run_step_sync(step.batch, keep_logits_ ? &kept_logits_ : nullptr);
    }
    if (step.done) step.done(std::move(r));
  }
}

status cpu_executor::validate(const step_batch& batch) const {
  const int64_t nb = info_.num_blocks, bs = info_.block_size;
  for (const auto& [src, dst] : batch.block_copies)
    if (src < 0 || src >= nb || dst < 0 || dst >= nb)
      return bad_step(batch.step_id, fmt::format("block copy ({}, {}) is outside the pool of {} blocks", src, dst, nb));
  for (const auto& s : batch.seqs) {
    const int64_t end = static_cast<int64_t>(s.num_computed) + static_cast<int64_t>(s.new_tokens.size());
    if (s.new_tokens.empty()) return bad_step(batch.step_id, fmt::format("seq {} has no new tokens", s.seq_id));
    if (s.num_computed < 0) return bad_step(batch.step_id, fmt::format("seq {} has num_computed < 0", s.seq_id));
    if (end > info_.max_model_len)
      return bad_step(batch.step_id, fmt::format("seq {} reaches position {} beyond max_model_len {}", s.seq_id,
                                                 end - 1, info_.max_model_len));
    if (s.block_table.empty()) return bad_step(batch.step_id, fmt::format("seq {} has an empty block table", s.seq_id));
    if (static_cast<int64_t>(s.block_table.size()) * bs < end)
      return bad_step(batch.step_id, fmt::format("seq {}: {} blocks cannot hold {} tokens", s.seq_id,
                                                 s.block_table.size(), end));
    for (int32_t b : s.block_table)
      if (b < 0 || b >= nb)
        return bad_step(batch.step_id,
                        fmt::format("seq {}: block id {} is outside the pool of {} blocks", s.seq_id, b, nb));
    if (s.new_tokens.size() == 1 && s.new_tokens[0] == previous_token) {
      if (!last_sampled_.count(s.seq_id))
        return bad_step(batch.step_id, fmt::format("seq {}: no token sampled in the previous step", s.seq_id));
      continue;
    }
    for (int32_t t : s.new_tokens)
      if (t < 0 || t >= info_.vocab_size)
        return bad_step(batch.step_id, fmt::format("seq {}: token id {} is outside the vocabulary", s.seq_id, t));
  }
  return {};
}

cascade_plan cpu_executor::plan_cascade_step(std::span<const cpu::forward_seq> seqs) const {
  if (!cascade_) return {};
  std::vector<cascade_input> in;
  in.reserve(seqs.size());
  for (const auto& s : seqs)
    in.push_back({s.block_table, static_cast<int32_t>(s.num_computed), static_cast<int32_t>(s.tokens.size())});
  return plan_cascade(in, info_.block_size, cascade_costs_);
}

step_result cpu_executor::run_step_sync(const step_batch& batch, std::vector<std::vector<float>>* last_logits) {
  std::lock_guard lock(compute_mu_);
  const auto t0 = std::chrono::steady_clock::now();
  step_result r;
  r.step_id = batch.step_id;
  if (has_last_end_) r.idle_before_ms = std::chrono::duration<double, std::milli>(t0 - last_end_).count();
  if (status st = validate(batch); !st) {
    r.outcome = st;
    last_sampled_.clear();
    return r;
  }
  try {
    for (const auto& [src, dst] : batch.block_copies) model_->copy_block(src, dst);
    // Placeholders become the tokens the previous step sampled (steps run in submission order).
    resolved_.clear();
    for (const auto& s : batch.seqs)
      if (s.new_tokens.size() == 1 && s.new_tokens[0] == previous_token)
        resolved_.push_back(last_sampled_.at(s.seq_id));
    std::vector<cpu::forward_seq> seqs;
    seqs.reserve(batch.seqs.size());
    size_t k = 0;
    for (const auto& s : batch.seqs) {
      const bool placeholder = s.new_tokens.size() == 1 && s.new_tokens[0] == previous_token;
      std::span<const int32_t> toks = placeholder ? std::span<const int32_t>(&resolved_[k++], 1)
                                                  : std::span<const int32_t>(s.new_tokens);
      seqs.push_back({s.num_computed, toks, s.block_table, s.sample || last_logits != nullptr});
    }
    logits_.clear();
    const cascade_plan cascade = plan_cascade_step(seqs);
    model_->forward(*pool_, seqs, cascade, logits_);
    r.cascade_seqs = cascade.num_grouped();
    r.expert_tokens = model_->expert_tokens();
    const size_t vocab = static_cast<size_t>(info_.vocab_size);
    size_t row = 0;
    if (last_logits) last_logits->clear();
    for (const auto& s : batch.seqs) {
      if (!s.sample && !last_logits) continue;
      std::span<float> logits(logits_.data() + row * vocab, vocab);
      ++row;
      if (last_logits) last_logits->emplace_back(logits.begin(), logits.end());
      if (!s.sample) continue;
      sampled_token tok = sample_token(logits, s, info_.eos_token_ids);
      tok.seq_id = s.seq_id;
      r.tokens.push_back(std::move(tok));
    }
  } catch (const std::exception& e) {
    r.outcome = make_error(error_code::internal, fmt::format("step {}: {}", batch.step_id, e.what()));
    r.tokens.clear();
  }
  last_sampled_.clear();
  for (const auto& t : r.tokens) last_sampled_[t.seq_id] = t.token_id;
  last_end_ = std::chrono::steady_clock::now();
  has_last_end_ = true;
  r.device_ms = std::chrono::duration<double, std::milli>(last_end_ - t0).count();
  return r;
}

result<std::unique_ptr<executor_group>> make_cpu_executor_group(const std::string& model_dir,
                                                               const cpu_executor_options& opts,
                                                               const shard_wrapper& wrap) {
  auto collective = opts.tensor_parallel_size > 1 ? std::make_shared<host_collective>(opts.tensor_parallel_size)
                                                  : nullptr;
  auto shards = cpu_executor::create_shards(model_dir, opts, collective);
  if (!shards) return shards.err();
  std::vector<std::unique_ptr<executor>> members;
  for (auto& shard : shards.value()) {
    const auto rank = static_cast<int64_t>(members.size());
    members.push_back(wrap ? wrap(rank, std::move(shard)) : std::move(shard));
  }
  return std::make_unique<executor_group>(std::move(members), [collective] {
    if (collective) collective->abort();
  });
}

result<std::unique_ptr<executor>> make_cpu_executor(const std::string& model_dir, const cpu_executor_options& opts) {
  if (opts.tensor_parallel_size > 1) {
    auto group = make_cpu_executor_group(model_dir, opts);
    if (!group) return group.err();
    return std::unique_ptr<executor>(std::move(group).value());
  }
  auto ex = cpu_executor::create(model_dir, opts);
  if (!ex) return ex.err();
  return std::unique_ptr<executor>(std::move(ex).value());
}

}  // namespace actorserve::gpu
