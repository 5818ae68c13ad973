#include "gpu/cpu/tensor_parallel_model.hpp"

#include <algorithm>
#include <stdexcept>

#include "gpu/cpu/kernels.hpp"
#include "gpu/cpu/shard_exchange.hpp"
#include "gpu/model/shard_weights.hpp"

namespace actorserve::gpu::cpu {

tensor_parallel_model::tensor_parallel_model(const model_weight_views& views, shard_plan plan, int64_t num_blocks,
                                             int64_t block_size, mla_form form, bool quantize_fp8)
    : plan_(std::move(plan)) {
  if (quantize_fp8 && plan_.size() != 1)
    throw std::invalid_argument("tensor_parallel_model: FP8 quantization at load needs one shard");
  for (int64_t s = 0; s < plan_.size(); ++s) {
    model_config cfg = plan_.shard_config(s);
    const kv_cache_layout layout = kv_cache_layout::of(cfg);
    paged_kv_cache cache(cfg.num_layers, num_blocks, block_size, layout);
    model_weights_f32 weights = shard_weights_f32(views, plan_, s);
    if (quantize_fp8) quantize_linear_weights_e4m3(views, weights);
    cpu_model model(std::move(cfg), std::move(weights), plan_.vocab(s).begin, form);
    shards_.push_back(std::make_unique<shard>(shard{std::move(model), std::move(cache), {}, {}, {}}));
  }
}

size_t tensor_parallel_model::bytes_per_block(const shard_plan& plan, int64_t block_size) {
  size_t bytes = 0;
  for (int64_t s = 0; s < plan.size(); ++s) {
    const model_config cfg = plan.shard_config(s);
    bytes += paged_kv_cache::bytes_per_block(cfg.num_layers, block_size, kv_cache_layout::of(cfg));
  }
  return bytes;
}

void tensor_parallel_model::set_fp8_kv_scales(const std::vector<float>& k_scales, const std::vector<float>& v_scales) {
  for (auto& sh : shards_) sh->model.set_fp8_kv_scales(k_scales, v_scales);
}

void tensor_parallel_model::copy_block(int64_t src, int64_t dst) {
  for (auto& sh : shards_) sh->cache.copy_block(src, dst);
}

void tensor_parallel_model::reduce_partials(size_t n) {
  partials_.clear();
  for (auto& sh : shards_) partials_.push_back(sh->partial.data());
  all_reduce_sum(partials_, n);
}

void tensor_parallel_model::forward(thread_pool& pool, std::span<const forward_seq> seqs, const cascade_plan& cascade,
                                    std::vector<float>& logits) {
  const size_t h = static_cast<size_t>(config().hidden_size);
  for (auto& sh : shards_) sh->model.begin_step(seqs, cascade);
  const size_t T = shards_.front()->model.num_tokens(), n = T * h;
  for (auto& sh : shards_) {
    sh->x.resize(n);
    sh->partial.resize(n);
    sh->model.embed(seqs, sh->partial.data());
  }
  reduce_partials(n);
  for (auto& sh : shards_) std::copy(sh->partial.begin(), sh->partial.begin() + static_cast<ptrdiff_t>(n), sh->x.begin());
  for (int64_t l = 0; l < config().num_layers; ++l) {
    for (auto& sh : shards_) sh->model.attention(pool, sh->cache, l, seqs, sh->x.data(), sh->partial.data());
    reduce_partials(n);
    for (auto& sh : shards_) add_inplace(sh->x.data(), sh->partial.data(), n);
    for (auto& sh : shards_) sh->model.ffn(pool, l, sh->x.data(), sh->partial.data());
    reduce_partials(n);
    for (auto& sh : shards_) add_inplace(sh->x.data(), sh->partial.data(), n);
  }

  // Final norm and LM head only at the last new token of the sequences that want logits.
  std::vector<size_t> rows;
  for (size_t s = 0, first = 0; s < seqs.size(); first += seqs[s].tokens.size(), ++s)
    if (seqs[s].want_logits && !seqs[s].tokens.empty()) rows.push_back(first + seqs[s].tokens.size() - 1);
  if (rows.empty()) return;
  std::vector<const float*> parts;
  std::vector<shard_slice> slices;
  for (size_t s = 0; s < shards_.size(); ++s) {
    shard& sh = *shards_[s];
    slices.push_back(plan_.vocab(static_cast<int64_t>(s)));
    sh.logits.resize(rows.size() * static_cast<size_t>(slices.back().size()));
    sh.model.lm_head(pool, sh.x.data(), rows, sh.logits.data());
    parts.push_back(sh.logits.data());
  }
  const size_t base = logits.size();
  logits.resize(base + rows.size() * static_cast<size_t>(config().vocab_size));
  gather_columns(parts, slices, rows.size(), logits.data() + base);
}

}  // namespace actorserve::gpu::cpu
