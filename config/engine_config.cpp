#include "config/engine_config.hpp"

#include <fmt/format.h>

#include <charconv>
#include <filesystem>
#include <fstream>

#include "config/log.hpp"

namespace actorserve {
namespace {

error bad_flag(std::string_view flag, std::string_view why) {
  return make_error(error_code::invalid_argument, fmt::format("{}: {}", flag, why));
}

/// A TLS file flag must name a readable file.
status readable_file(std::string_view flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return bad_flag(flag, fmt::format("cannot read {}", path));
  return {};
}

status validate(const cluster_options& c) {
  if (c.listen && !c.engines.empty())
    return bad_flag("--engines", "an engine process (--listen) does not connect to other engines");
  if (c.balance_margin < 0)
    return bad_flag("--routing-balance-margin", fmt::format("must be >= 0, got {}", c.balance_margin));
  if (c.connect_timeout_s < 1)
    return bad_flag("--engine-connect-timeout", fmt::format("must be >= 1 second, got {}", c.connect_timeout_s));
  const auto& t = c.tls;
  const bool any = !t.cert.empty() || !t.key.empty() || !t.ca.empty();
  if (any && (t.cert.empty() || t.key.empty() || t.ca.empty()))
    return bad_flag(t.cert.empty() ? "--tls-cert" : t.key.empty() ? "--tls-key" : "--tls-ca",
                    "TLS needs --tls-cert, --tls-key and --tls-ca together");
  if (any && !c.listen && c.engines.empty())
    return bad_flag("--tls-cert", "TLS applies between front ends and engines: give --listen or --engines too");
  if (any) {
    if (auto st = readable_file("--tls-cert", t.cert); !st) return st;
    if (auto st = readable_file("--tls-key", t.key); !st) return st;
    if (auto st = readable_file("--tls-ca", t.ca); !st) return st;
  }
  return {};
}

}  // namespace

result<host_port> parse_host_port(std::string_view text, std::string_view flag) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size())
    return bad_flag(flag, fmt::format("'{}' is not HOST:PORT", text));
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string_view port_text = text.substr(colon + 1);
  uint32_t port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc{} || ptr != port_text.data() + port_text.size() || port > 65535)
    return bad_flag(flag, fmt::format("'{}' in '{}' is not a port (0-65535)", port_text, text));
  return host_port{std::string(host), static_cast<uint16_t>(port)};
}

kv_cache_layout cuda_kv_layout(const cache_options& c) {
  if (c.layout) return *c.layout;
  return c.block_size && *c.block_size < 64 ? kv_cache_layout::vllm : kv_cache_layout::flash_decoding;
}

int64_t cuda_block_size(const cache_options& c) {
  if (c.block_size) return *c.block_size;
  return cuda_kv_layout(c) == kv_cache_layout::flash_decoding ? 64 : 16;
}

int64_t cpu_block_size(const cache_options& c) { return c.block_size.value_or(16); }

std::string expert_parallel_cuda_refusal() {
  return "the CUDA executor splits every expert over the --tensor-parallel-size shards (tensor parallel inside "
         "each expert, the default); whole experts per shard run on the CPU executor only (--device cpu)";
}

status validate(const engine_config& cfg) {
  if (cfg.model.model_dir.empty()) return bad_flag("--model", "a model directory is required");
  if (cfg.model.max_model_len < 0)
    return bad_flag("--max-model-len", fmt::format("must be >= 0, got {}", cfg.model.max_model_len));
  const auto& s = cfg.scheduler;
  if (s.max_num_seqs < 1 || s.max_num_seqs > 65536)
    return bad_flag("--max-num-seqs", fmt::format("must be in [1, 65536], got {}", s.max_num_seqs));
  if (s.max_num_batched_tokens < 1)
    return bad_flag("--max-num-batched-tokens", fmt::format("must be >= 1, got {}", s.max_num_batched_tokens));
  if (!s.enable_chunked_prefill && cfg.model.max_model_len > s.max_num_batched_tokens)
    return bad_flag("--max-num-batched-tokens",
                    fmt::format("must be >= --max-model-len ({}) when chunked prefill is off, got {}",
                                cfg.model.max_model_len, s.max_num_batched_tokens));
  const auto& c = cfg.cache;
  if (c.block_size && (*c.block_size < 1 || *c.block_size > 256 || (*c.block_size & (*c.block_size - 1)) != 0))
    return bad_flag("--block-size", fmt::format("must be a power of two in [1, 256], got {}", *c.block_size));
  if (c.num_gpu_blocks_override && *c.num_gpu_blocks_override < 1)
    return bad_flag("--num-gpu-blocks-override",
                    fmt::format("must be >= 1, got {}", *c.num_gpu_blocks_override));
  if (c.kv_cache_memory_bytes && *c.kv_cache_memory_bytes < 1)
    return bad_flag("--kv-cache-memory-bytes", fmt::format("must be > 0 bytes, got {}", *c.kv_cache_memory_bytes));
  if (!(c.gpu_memory_utilization > 0.0 && c.gpu_memory_utilization <= 1.0))
    return bad_flag("--gpu-memory-utilization",
                    fmt::format("must be in (0, 1], got {}", c.gpu_memory_utilization));
  if (!(c.cpu_kv_cache_gib > 0.0))
    return bad_flag("--cpu-kv-cache-space", fmt::format("must be > 0 GiB, got {}", c.cpu_kv_cache_gib));
  if (cfg.executor.cpu_threads < 0)
    return bad_flag("--cpu-threads", fmt::format("must be >= 0, got {}", cfg.executor.cpu_threads));
  if (cfg.executor.tensor_parallel_size < 1)
    return bad_flag("--tensor-parallel-size", fmt::format("must be >= 1, got {}", cfg.executor.tensor_parallel_size));
  if (const auto& nccl = cfg.executor.nccl_library; !nccl.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(nccl, ec))
      return bad_flag("--nccl-library", fmt::format("{} is not a file (the path of libnccl.so.2)", nccl));
  }
  if (cfg.executor.enable_expert_parallel && cfg.executor.device == device_kind::cuda)
    return bad_flag("--enable-expert-parallel", expert_parallel_cuda_refusal());
  for (int64_t step : cfg.executor.inject_step_failures) {
    if (step < 1) return bad_flag("--inject-step-failures", fmt::format("step numbers must be >= 1, got {}", step));
  }
  const auto& sv = cfg.server;
  if (sv.port < 0 || sv.port > 65535)
    return bad_flag("--port", fmt::format("must be in [0, 65535], got {}", sv.port));
  if (sv.max_connections < 1)
    return bad_flag("--max-connections", fmt::format("must be >= 1, got {}", sv.max_connections));
  if (sv.max_body_bytes < 1024)
    return bad_flag("--max-body-bytes", fmt::format("must be >= 1024, got {}", sv.max_body_bytes));
  if (sv.idle_timeout_s < 1)
    return bad_flag("--idle-timeout", fmt::format("must be >= 1 second, got {}", sv.idle_timeout_s));
  if (sv.drain_timeout_s < 0)
    return bad_flag("--drain-timeout", fmt::format("must be >= 0 seconds, got {}", sv.drain_timeout_s));
  if (sv.io_threads < 1 || sv.io_threads > 64)
    return bad_flag("--io-threads", fmt::format("must be in [1, 64], got {}", sv.io_threads));
  if (sv.prompt_threads < 1 || sv.prompt_threads > 64)
    return bad_flag("--prompt-threads", fmt::format("must be in [1, 64], got {}", sv.prompt_threads));
  if (sv.max_seqs_per_request < 1)
    return bad_flag("--max-seqs-per-request", fmt::format("must be >= 1, got {}", sv.max_seqs_per_request));
  if (sv.max_seqs_per_connection < sv.max_seqs_per_request)
    return bad_flag("--max-seqs-per-connection",
                    fmt::format("must be >= --max-seqs-per-request ({}), got {}", sv.max_seqs_per_request,
                                sv.max_seqs_per_connection));
  if (sv.max_response_bytes < 1024)
    return bad_flag("--max-response-bytes", fmt::format("must be >= 1024, got {}", sv.max_response_bytes));
  if (cfg.chat.enable_auto_tool_choice && cfg.chat.tool_call_parser == tool_parser_kind::none)
    return bad_flag("--enable-auto-tool-choice", "needs --tool-call-parser llama3_json|hermes|mistral|deepseek_v3");
  if (auto st = validate(cfg.cluster); !st) return st;
  log::level lvl{};
  if (!log::parse_level(cfg.log_level, lvl))
    return bad_flag("--log-level", fmt::format("must be trace|debug|info|warn|error|off, got '{}'", cfg.log_level));
  return {};
}

const char* to_string(device_kind d) {
  switch (d) {
    case device_kind::auto_detect: return "auto";
    case device_kind::cpu: return "cpu";
    case device_kind::cuda: return "cuda";
  }
  return "?";
}

const char* to_string(dtype_choice d) {
  switch (d) {
    case dtype_choice::auto_detect: return "auto";
    case dtype_choice::float32: return "float32";
    case dtype_choice::bfloat16: return "bfloat16";
    case dtype_choice::float16: return "float16";
  }
  return "?";
}

const char* to_string(quantization_choice q) { return q == quantization_choice::fp8 ? "fp8" : "none"; }

const char* to_string(kv_cache_dtype d) { return d == kv_cache_dtype::fp8 ? "fp8" : "auto"; }

const char* to_string(load_format f) {
  switch (f) {
    case load_format::auto_detect: return "auto";
    case load_format::safetensors: return "safetensors";
    case load_format::dummy: return "dummy";
  }
  return "?";
}

const char* to_string(kv_cache_layout l) {
  return l == kv_cache_layout::vllm ? "vllm" : "flash-decoding";
}

const char* to_string(tool_parser_kind k) {
  switch (k) {
    case tool_parser_kind::none: return "none";
    case tool_parser_kind::llama3_json: return "llama3_json";
    case tool_parser_kind::hermes: return "hermes";
    case tool_parser_kind::mistral: return "mistral";
    case tool_parser_kind::deepseek_v3: return "deepseek_v3";
  }
  return "?";
}

const char* to_string(reasoning_parser_kind k) {
  switch (k) {
    case reasoning_parser_kind::none: return "none";
    case reasoning_parser_kind::deepseek_r1: return "deepseek_r1";
    case reasoning_parser_kind::qwen3: return "qwen3";
  }
  return "?";
}

}  // namespace actorserve

namespace actorserve {

const char* to_string(routing_kind k) {
  switch (k) {
    case routing_kind::cache_aware: return "cache-aware";
    case routing_kind::least_loaded: return "least-loaded";
    case routing_kind::round_robin: return "round-robin";
  }
  return "?";
}

}  // namespace actorserve
