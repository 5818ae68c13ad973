#include "gpu/model/shard_plan.hpp"

#include <fmt/format.h>

namespace actorserve::gpu {
namespace {

error refuse(int64_t size, const std::string& why) {
  return make_error(error_code::invalid_argument, fmt::format("--tensor-parallel-size {}: {}", size, why));
}

error refuse_expert_parallel(const std::string& why) {
  return make_error(error_code::invalid_argument, "--enable-expert-parallel: " + why);
}

/// What whole experts per shard need: a mixture-of-experts model with at least one routed expert
/// per shard, and shared experts (tensor parallel still) wide enough to split.
status check_expert_parallel(const model_config& cfg, int64_t size) {
  if (!cfg.moe)
    return refuse_expert_parallel(fmt::format(
        "{} has no routed experts; the flag applies to mixture-of-experts models (Mixtral, Qwen3-MoE, DeepSeek-V2)",
        cfg.architecture));
  if (cfg.moe->num_experts < size)
    return refuse_expert_parallel(fmt::format("--tensor-parallel-size {} exceeds the model's {} routed experts (each "
                                              "shard holds at least one)",
                                              size, cfg.moe->num_experts));
  const int64_t shared = cfg.moe->expert_intermediate_size * cfg.moe->num_shared_experts;
  if (shared > 0 && shared < size)
    return refuse(size, fmt::format("exceeds the shared experts' intermediate size {}", shared));
  return {};
}

}  // namespace

result<shard_plan> shard_plan::make(const model_config& cfg, int64_t size, moe_parallelism moe) {
  if (size < 1) return refuse(size, "must be >= 1");
  if (cfg.num_heads % size != 0)
    return refuse(size, fmt::format("must divide the model's {} attention heads", cfg.num_heads));
  if (!cfg.mla && cfg.num_kv_heads % size != 0 && size % cfg.num_kv_heads != 0)
    return refuse(size, fmt::format("must divide the model's {} KV heads or be a multiple of them", cfg.num_kv_heads));
  if (cfg.intermediate_size < size)
    return refuse(size, fmt::format("exceeds the model's intermediate size {}", cfg.intermediate_size));
  if (moe == moe_parallelism::expert) {
    if (auto st = check_expert_parallel(cfg, size); !st) return st.err();
  } else if (cfg.moe && cfg.moe->expert_intermediate_size < size) {
    return refuse(size, fmt::format("exceeds the experts' intermediate size {}", cfg.moe->expert_intermediate_size));
  }
  return shard_plan(cfg, size, moe);
}

shard_slice shard_plan::kv_heads(int64_t s) const {
  if (!kv_heads_replicated()) return balanced(cfg_.num_kv_heads, s);
  const int64_t head = s / (size_ / cfg_.num_kv_heads);
  return {head, head + 1};
}

shard_slice shard_plan::experts(int64_t s) const {
  if (!cfg_.moe) return {};
  if (moe_ == moe_parallelism::expert) return balanced(cfg_.moe->num_experts, s);
  return {0, cfg_.moe->num_experts};
}

shard_slice shard_plan::expert_intermediate(int64_t s) const {
  if (!cfg_.moe) return {};
  if (moe_ == moe_parallelism::expert) return {0, cfg_.moe->expert_intermediate_size};
  return balanced(cfg_.moe->expert_intermediate_size, s);
}

int64_t shard_plan::expert_elements(int64_t s) const {
  return experts(s).size() * 3 * cfg_.hidden_size * expert_intermediate(s).size();
}

shard_slice shard_plan::shared_expert_intermediate(int64_t s) const {
  return cfg_.moe ? balanced(cfg_.moe->expert_intermediate_size * cfg_.moe->num_shared_experts, s) : shard_slice{};
}

model_config shard_plan::shard_config(int64_t s) const {
  model_config c = cfg_;
  c.num_heads = q_heads(s).size();
  // Latent attention caches one latent for every head; its config keeps num_key_value_heads equal
  // to the heads (mla_config's rule), so a shard's equals its heads.
  c.num_kv_heads = cfg_.mla ? c.num_heads : kv_heads(s).size();
  c.intermediate_size = intermediate(s).size();
  if (c.moe) c.moe->expert_intermediate_size = expert_intermediate(s).size();
  c.vocab_size = vocab(s).size();
  return c;
}

}  // namespace actorserve::gpu
