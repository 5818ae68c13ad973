// The executor factory: device choice and the mapping of engine_config to executor options.
#include "gpu/executor_factory.hpp"

#include <fmt/format.h>

#include <numeric>
#include <vector>

#include "config/log.hpp"
#include "config/model_config.hpp"
#include "gpu/cpu/cpu_executor.hpp"
#include "gpu/cuda_model_support.hpp"
#include "gpu/fault_injection.hpp"

#ifdef ACTORSERVE_HAS_CUDA
#include "gpu/cuda/cuda_executor.hpp"
#include "gpu/cuda/device_info.hpp"
#include "gpu/cuda/parallel/collective_group.hpp"
#include "gpu/cuda/parallel/shard_executors.hpp"
#include "gpu/executor_group.hpp"
#endif

namespace actorserve::gpu {

namespace {

/// --load-format dummy generates the weights, seeded by --seed.
weight_source weights_from(const engine_config& cfg) {
  return {cfg.model.load == load_format::dummy, cfg.executor.seed};
}

cpu_executor_options cpu_options_from(const engine_config& cfg) {
  cpu_executor_options o;
  o.block_size = static_cast<int32_t>(cpu_block_size(cfg.cache));
  o.num_blocks = cfg.cache.num_gpu_blocks_override ? static_cast<int32_t>(*cfg.cache.num_gpu_blocks_override) : 0;
  o.kv_cache_bytes = static_cast<int64_t>(cfg.cache.cpu_kv_cache_gib * double(int64_t{1} << 30));
  o.kv_cache_memory_bytes = cfg.cache.kv_cache_memory_bytes;
  o.threads = static_cast<int32_t>(cfg.executor.cpu_threads);
  o.max_model_len = static_cast<int32_t>(cfg.model.max_model_len);
  o.tensor_parallel_size = static_cast<int32_t>(cfg.executor.tensor_parallel_size);
  o.expert_parallel = cfg.executor.enable_expert_parallel;
  o.quantize_weights_fp8 = cfg.model.quantization == quantization_choice::fp8;
  o.kv_cache_fp8 = cfg.cache.cache_dtype == kv_cache_dtype::fp8;
  o.cascade_attention = cfg.executor.cascade_attention;
  o.weights = weights_from(cfg);
  return o;
}

#ifdef ACTORSERVE_HAS_CUDA
/// `tuning`: the kernel choices in place of cuda_tuning's defaults (null: the defaults).
cuda_executor_options cuda_options_from(const engine_config& cfg, const cuda_tuning* tuning) {
  cuda_executor_options o;
  if (tuning) o.tuning = *tuning;
  o.dtype = cfg.model.dtype;
  o.block_size = static_cast<int32_t>(cuda_block_size(cfg.cache));
  o.kv_layout = cuda_kv_layout(cfg.cache);
  o.num_blocks_override = cfg.cache.num_gpu_blocks_override;
  o.gpu_memory_utilization = cfg.cache.gpu_memory_utilization;
  o.kv_cache_memory_bytes = cfg.cache.kv_cache_memory_bytes;  // per shard: each GPU's pool
  o.max_num_batched_tokens = static_cast<int32_t>(cfg.scheduler.max_num_batched_tokens);
  o.max_num_seqs = static_cast<int32_t>(cfg.scheduler.max_num_seqs);
  o.max_model_len = static_cast<int32_t>(cfg.model.max_model_len);
  o.enforce_eager = cfg.executor.enforce_eager;
  o.cascade_attention = cfg.executor.cascade_attention;
  o.quantize_fp8 = cfg.model.quantization == quantization_choice::fp8;
  o.kv_cache_fp8 = cfg.cache.cache_dtype == kv_cache_dtype::fp8;
  o.profile_steps = cfg.executor.profile_steps;
  o.kernels = cfg.executor.kernels;
  o.weights = weights_from(cfg);
  return o;
}

/// --device cuda -tp N: shard r on GPU r with rank r's collective (NCCL, and the one-shot
/// all-reduce for small messages), in a lock-step group whose abort hook aborts them all.
result<std::unique_ptr<executor>> make_cuda_group(const engine_config& cfg, const cuda_tuning* tuning) {
  const int n = static_cast<int>(cfg.executor.tensor_parallel_size);
  std::vector<int> devices(static_cast<size_t>(n));
  std::iota(devices.begin(), devices.end(), 0);
  cuda::collective_group_options co;
  co.nccl_library = cfg.executor.nccl_library;
  auto made = cuda::make_device_collectives(devices, co);
  if (!made) return make_error(made.err().code, fmt::format("--tensor-parallel-size {}: {}", n, made.err().message));
  std::vector<std::shared_ptr<cuda::device_collective>> collectives;
  for (auto& c : made.value()) collectives.push_back(std::move(c));
  auto shards = cuda::start_shard_executors(cfg.model.model_dir, cuda_options_from(cfg, tuning), devices, collectives);
  if (!shards) return shards.err();
  auto abort = [collectives] {
    for (const auto& c : collectives) c->abort();
  };
  return std::unique_ptr<executor>(std::make_unique<executor_group>(std::move(shards).value(), abort));
}
#endif

result<std::unique_ptr<executor>> make_device_executor(const engine_config& cfg, const cuda_tuning* tuning) {
  if (cfg.executor.enable_expert_parallel && (cfg.executor.device == device_kind::cuda || picks_cuda(cfg)))
    return make_error(error_code::unsupported, "--enable-expert-parallel: " + expert_parallel_cuda_refusal());
#ifdef ACTORSERVE_HAS_CUDA
  if (picks_cuda(cfg)) {
    const int64_t shards = cfg.executor.tensor_parallel_size, visible = cuda::device_count();
    if (shards > 1 && shards > visible)
      return make_error(error_code::unavailable,
                        fmt::format("--tensor-parallel-size {}: the CUDA executor runs one shard per GPU and {} "
                                    "GPU(s) are visible", shards, visible));
    if (visible == 0) return make_error(error_code::unavailable, "--device cuda: no CUDA device is visible");
    if (auto st = check_cuda_support(cfg); !st) return st.err();
    if (shards > 1) return make_cuda_group(cfg, tuning);
    return make_cuda_executor(cfg.model.model_dir, cuda_options_from(cfg, tuning));
  }
#else
  (void)tuning;
  if (cfg.executor.device == device_kind::cuda)
    return make_error(error_code::unsupported, "--device cuda: this build has no CUDA executor (ACTORSERVE_ENABLE_CUDA=OFF)");
#endif
  // N > 1: N shard cpu_executors (one KV pool size for all, the threads split over them) in an
  // executor_group whose abort hook aborts their host collective.
  return make_cpu_executor(cfg.model.model_dir, cpu_options_from(cfg));
}

}  // namespace

bool picks_cuda(const engine_config& cfg) {
#ifdef ACTORSERVE_HAS_CUDA
  const auto device = cfg.executor.device;
  return device == device_kind::cuda || (device == device_kind::auto_detect && cuda::device_count() > 0);
#else
  (void)cfg;
  return false;
#endif
}

status check_cuda_support(const engine_config& cfg) {
  auto model = load_model_config(cfg.model.model_dir);
  if (!model) return model.err();
  if (auto st = check_cuda_fp8_options(model.value(), cuda_kv_layout(cfg.cache),
                                       cfg.cache.cache_dtype == kv_cache_dtype::fp8);
      !st)
    return make_error(st.err().code, fmt::format("{}: {}", cfg.model.model_dir, st.err().message));
  if (auto st = check_cuda_model_support(model.value(), cfg.model.max_model_len); !st)
    return make_error(st.err().code, fmt::format("{}: {}", cfg.model.model_dir, st.err().message));
  return {};
}

int64_t block_size_for(const engine_config& cfg) {
  return picks_cuda(cfg) ? cuda_block_size(cfg.cache) : cpu_block_size(cfg.cache);
}

namespace {

result<std::unique_ptr<executor>> make_executor_with(const engine_config& cfg, const cuda_tuning* tuning) {
  if (cfg.model.load == load_format::dummy)
    log::warn("--load-format dummy: every weight is pseudo-random (seed {}); outputs are meaningless, timings are "
              "the real shapes'", cfg.executor.seed);
  auto ex = make_device_executor(cfg, tuning);
  if (!ex) return ex.err();
  return inject_step_failures(std::move(ex.value()), cfg.executor.inject_step_failures);
}

}  // namespace

result<std::unique_ptr<executor>> make_executor(const engine_config& cfg) { return make_executor_with(cfg, nullptr); }

result<std::unique_ptr<executor>> make_executor(const engine_config& cfg, const cuda_tuning& tuning) {
  if (!picks_cuda(cfg))
    return make_error(error_code::invalid_argument,
                      "CUDA kernel choices (the benchmarks' tuning flags) need the CUDA executor: --device cuda");
  return make_executor_with(cfg, &tuning);
}

}  // namespace actorserve::gpu
