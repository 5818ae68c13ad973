#include "gpu/model/shard_plan.hpp"

#include <fmt/format.h>

namespace actorserve::gpu {
namespace {

error refuse(int64_t size, const std::string& why) {
  return make_error(error_code::invalid_argument, fmt::format("--tensor-parallel-size {}: {}", size, why));
}

}  // namespace

result<shard_plan> shard_plan::make(const model_config& cfg, int64_t size) {
  if (size < 1) return refuse(size, "must be >= 1");
  if (cfg.num_heads % size != 0)
    return refuse(size, fmt::format("must divide the model's {} attention heads", cfg.num_heads));
  if (!cfg.mla && cfg.num_kv_heads % size != 0 && size % cfg.num_kv_heads != 0)
    return refuse(size, fmt::format("must divide the model's {} KV heads or be a multiple of them", cfg.num_kv_heads));
  if (cfg.intermediate_size < size)
    return refuse(size, fmt::format("exceeds the model's intermediate size {}", cfg.intermediate_size));
  if (cfg.moe && cfg.moe->expert_intermediate_size < size)
    return refuse(size, fmt::format("exceeds the experts' intermediate size {}", cfg.moe->expert_intermediate_size));
  return shard_plan(cfg, size);
}

shard_slice shard_plan::kv_heads(int64_t s) const {
  if (!kv_heads_replicated()) return balanced(cfg_.num_kv_heads, s);
  const int64_t head = s / (size_ / cfg_.num_kv_heads);
  return {head, head + 1};
}

shard_slice shard_plan::expert_intermediate(int64_t s) const {
  return cfg_.moe ? balanced(cfg_.moe->expert_intermediate_size, s) : shard_slice{};
}

shard_slice shard_plan::shared_expert_intermediate(int64_t s) const {
  return cfg_.moe ? balanced(cfg_.moe->expert_intermediate_size * cfg_.moe->num_shared_experts, s) : shard_slice{};
}

model_config shard_plan::shard_config(int64_t s) const {
  model_config c = cfg_;
  c.num_heads = q_heads(s).size();
  if (!cfg_.mla) c.num_kv_heads = kv_heads(s).size();
  c.intermediate_size = intermediate(s).size();
  if (c.moe) c.moe->expert_intermediate_size = expert_intermediate(s).size();
  c.vocab_size = vocab(s).size();
  return c;
}

}  // namespace actorserve::gpu
