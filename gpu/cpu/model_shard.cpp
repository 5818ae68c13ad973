#include "gpu/cpu/model_shard.hpp"

#include <algorithm>
#include <stdexcept>

#include "gpu/cpu/kernels.hpp"
#include "gpu/model/shard_weights.hpp"

namespace actorserve::gpu::cpu {
namespace {

cpu_model load_shard(const model_weight_views& views, const shard_plan& plan, int64_t rank, mla_form form,
                     bool quantize_fp8) {
  if (quantize_fp8 && plan.size() != 1)
    throw std::invalid_argument("model_shard: FP8 quantization at load needs one shard");
  model_weights_f32 weights = shard_weights_f32(views, plan, rank);
  if (quantize_fp8) quantize_linear_weights_e4m3(views, weights);
  return cpu_model(plan.shard_config(rank), std::move(weights), plan.vocab(rank).begin, form);
}

}  // namespace

model_shard::model_shard(const model_weight_views& views, const shard_plan& plan, int64_t rank,
                         std::shared_ptr<host_collective> collective, int64_t num_blocks, int64_t block_size,
                         mla_form form, bool quantize_fp8)
    : whole_(plan.config()),
      rank_(static_cast<int>(rank)),
      vocab_(plan.vocab(rank)),
      collective_(std::move(collective)),
      model_(load_shard(views, plan, rank, form, quantize_fp8)),
      cache_(model_.config().num_layers, num_blocks, block_size, kv_cache_layout::of(model_.config())) {
  if (plan.size() > 1 && (!collective_ || collective_->size() != plan.size()))
    throw std::invalid_argument("model_shard: a plan of several shards needs a collective of as many ranks");
}

size_t model_shard::bytes_per_block(const shard_plan& plan, int64_t rank, int64_t block_size) {
  const model_config cfg = plan.shard_config(rank);
  return paged_kv_cache::bytes_per_block(cfg.num_layers, block_size, kv_cache_layout::of(cfg));
}

void model_shard::set_fp8_kv_scales(const std::vector<float>& k_scales, const std::vector<float>& v_scales) {
  model_.set_fp8_kv_scales(k_scales, v_scales);
}

void model_shard::all_reduce(size_t n) {
  if (collective_) collective_->all_reduce_sum(rank_, partial_.data(), n);
}

void model_shard::forward(thread_pool& pool, std::span<const forward_seq> seqs, const cascade_plan& cascade,
                          std::vector<float>& logits) {
  const size_t h = static_cast<size_t>(whole_.hidden_size);
  model_.begin_step(seqs, cascade);
  const size_t n = model_.num_tokens() * h;
  x_.resize(n);
  partial_.resize(n);
  model_.embed(seqs, partial_.data());
  all_reduce(n);
  std::copy(partial_.begin(), partial_.begin() + static_cast<ptrdiff_t>(n), x_.begin());
  for (int64_t l = 0; l < whole_.num_layers; ++l) {
    model_.attention(pool, cache_, l, seqs, x_.data(), partial_.data());
    all_reduce(n);
    add_inplace(x_.data(), partial_.data(), n);
    model_.ffn(pool, l, x_.data(), partial_.data());
    all_reduce(n);
    add_inplace(x_.data(), partial_.data(), n);
  }

  // Final norm and LM head only at the last new token of the sequences that want logits (every
  // shard sees the same `seqs`, so all of them take this branch alike).
  std::vector<size_t> rows;
  for (size_t s = 0, first = 0; s < seqs.size(); first += seqs[s].tokens.size(), ++s)
    if (seqs[s].want_logits && !seqs[s].tokens.empty()) rows.push_back(first + seqs[s].tokens.size() - 1);
  if (rows.empty()) return;
  const size_t vocab = static_cast<size_t>(whole_.vocab_size), base = logits.size();
  logits.resize(base + rows.size() * vocab);
  if (!collective_) {
    model_.lm_head(pool, x_.data(), rows, logits.data() + base);
    return;
  }
  logits_.resize(rows.size() * static_cast<size_t>(vocab_.size()));
  model_.lm_head(pool, x_.data(), rows, logits_.data());
  collective_->gather_columns(rank_, logits_.data(), vocab_, rows.size(), vocab, logits.data() + base);
}

}  // namespace actorserve::gpu::cpu
