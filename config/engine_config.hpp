#pragma once
/// The engine's and server's configuration as plain structs. Flag names follow vLLM where the
/// concept is shared; `validate()` names the offending flag in its error.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/error.hpp"

namespace actorserve {

enum class device_kind { auto_detect, cpu, cuda };
enum class dtype_choice { auto_detect, float32, bfloat16, float16 };
enum class kv_cache_layout { vllm, flash_decoding };
/// --kernels: automatic = the fastest kernels the GPU runs (the wgmma/TMA ones on Hopper);
/// portable = the kernels every GPU from compute capability 8.0 runs, on any GPU.
enum class kernel_choice { automatic, portable };
/// --quantization (vLLM's name): none keeps the checkpoint's weights; fp8 quantizes a float
/// checkpoint's linear weights to FP8 E4M3 at load (one scale per output channel).
enum class quantization_choice { none, fp8 };
/// --load-format (vLLM's name): auto and safetensors read the model directory's safetensors;
/// dummy reads only config.json and fills every weight with seeded pseudo-random values
/// (benchmarks of models whose weights are not on disk).
enum class load_format { auto_detect, safetensors, dummy };
/// --kv-cache-dtype (vLLM's name): auto = the model's dtype; fp8 = E4M3 with per-layer scales.
enum class kv_cache_dtype { auto_detect, fp8 };
/// --generation-config: auto = generation_config.json's sampling defaults apply; vllm = ignored.
enum class generation_config_source { auto_detect, vllm };
/// --tool-call-parser (vLLM's names).
enum class tool_parser_kind { none, llama3_json, hermes, mistral, deepseek_v3 };
/// --reasoning-parser (vLLM's names).
enum class reasoning_parser_kind { none, deepseek_r1, qwen3 };
/// --routing: how a front end picks an engine among --engines (docs/deployment.md).
enum class routing_kind { cache_aware, least_loaded, round_robin };

struct model_options {
  std::string model_dir;                    ///< --model: Hugging Face model directory
  std::string served_model_name;            ///< --served-model-name (default: directory name)
  std::string chat_template_file;           ///< --chat-template: overrides tokenizer_config's
  int64_t max_model_len = 0;                ///< --max-model-len (0: from config.json)
  dtype_choice dtype = dtype_choice::auto_detect;  ///< --dtype
  quantization_choice quantization = quantization_choice::none;  ///< --quantization
  load_format load = load_format::auto_detect;  ///< --load-format (dummy: seeded by --seed)
  generation_config_source generation_config = generation_config_source::auto_detect;  ///< --generation-config
};

/// How the chat API reads the model's output.
struct chat_options {
  bool enable_auto_tool_choice = false;     ///< --enable-auto-tool-choice: accept `tools`
  tool_parser_kind tool_call_parser = tool_parser_kind::none;               ///< --tool-call-parser
  reasoning_parser_kind reasoning_parser = reasoning_parser_kind::none;     ///< --reasoning-parser
};

struct scheduler_options {
  int64_t max_num_seqs = 256;               ///< --max-num-seqs
  int64_t max_num_batched_tokens = 2048;    ///< --max-num-batched-tokens (per-step token budget)
  bool enable_chunked_prefill = true;       ///< --enable-chunked-prefill / --no-enable-chunked-prefill
  /// --async-scheduling / --no-async-scheduling: plan step N+1 while step N runs (two in flight).
  bool async_scheduling = true;
};

struct cache_options {
  /// --block-size (tokens per KV block); unset: the layout's default (cuda_block_size,
  /// cpu_block_size).
  std::optional<int64_t> block_size;
  /// --num-gpu-blocks-override (any executor): the pool's size in blocks; it wins over
  /// --kv-cache-memory-bytes, as in vLLM (the command line warns when both are given).
  std::optional<int64_t> num_gpu_blocks_override;
  double gpu_memory_utilization = 0.9;      ///< --gpu-memory-utilization
  /// --kv-cache-memory-bytes: each GPU's (each tensor-parallel shard's) KV pool in bytes, so the
  /// pool no longer depends on what else uses the device; replaces --gpu-memory-utilization (and
  /// --cpu-kv-cache-space on the CPU executor).
  std::optional<int64_t> kv_cache_memory_bytes;
  double cpu_kv_cache_gib = 1.0;            ///< --cpu-kv-cache-space (GiB) for the CPU executor
  bool enable_prefix_caching = true;        ///< --enable-prefix-caching / --no-enable-prefix-caching
  /// --paged-kv-cache-type (the CUDA executor's); unset: cuda_kv_layout's choice.
  std::optional<kv_cache_layout> layout;
  kv_cache_dtype cache_dtype = kv_cache_dtype::auto_detect;   ///< --kv-cache-dtype
};

struct executor_options {
  device_kind device = device_kind::auto_detect;  ///< --device
  bool enforce_eager = false;               ///< --enforce-eager (no CUDA graphs)
  kernel_choice kernels = kernel_choice::automatic;  ///< --kernels auto|portable (CUDA executor)
  /// --profile-steps: the CUDA executor times each kernel class of its eager steps and prints
  /// the table to stderr when it stops.
  bool profile_steps = false;
  int64_t cpu_threads = 0;                  ///< --cpu-threads (0: all cores)
  /// !--disable-cascade-attn: decodes sharing prefix blocks attend to the prefix in one pass per
  /// group where the planner finds it reads fewer bytes (docs/attention.md, "Cascade attention").
  bool cascade_attention = true;
  /// --tensor-parallel-size / -tp: shards the model is split over (the CPU executor runs them in
  /// one process; the CUDA executor one per GPU, on GPUs 0..N-1).
  int64_t tensor_parallel_size = 1;
  /// --nccl-library: the path of libnccl.so.2 (gpu/cuda/parallel/nccl_library.hpp); empty: the
  /// dynamic loader's search, then beside the CUDA runtime and in /usr/local/cuda/lib64.
  std::string nccl_library;
  /// --enable-expert-parallel: a mixture-of-experts model's shards hold whole routed experts
  /// (contiguous ranges of expert ids) instead of a slice of every expert; attention, the shared
  /// experts and dense layers stay tensor parallel. The CPU executor only.
  bool enable_expert_parallel = false;
  uint64_t seed = 0;                        ///< --seed (default seed for unseeded requests)
  /// --inject-step-failures (test only): step numbers whose step_result reports a failure.
  std::vector<int64_t> inject_step_failures;
};

struct server_options {
  std::string host = "127.0.0.1";           ///< --host
  int64_t port = 8000;                      ///< --port
  std::string api_key;                      ///< --api-key, $ACTORSERVE_API_KEY or --api-key-file (empty: no auth)
  std::string api_key_file;                 ///< --api-key-file (read into api_key when flags are parsed)
  bool api_key_guards_metrics = false;      ///< --api-key-guards-metrics: /health and /metrics need the key too
  /// --allowed-origins: origins whose browser pages may call the API (CORS); "*" allows any.
  std::vector<std::string> allowed_origins;
  bool log_stats = true;                    ///< !--disable-log-stats: a stats line every 10 s while busy
  bool log_requests = false;                ///< --enable-log-requests: one access-log line per API request
  /// --metrics-compat vllm: series with a vLLM counterpart carry its `vllm:` name, so vLLM's
  /// dashboards and autoscaling rules work unchanged (default: actorserve's names).
  bool metrics_vllm_names = false;
  int64_t max_connections = 16384;          ///< --max-connections
  int64_t max_body_bytes = 8 << 20;         ///< --max-body-bytes
  int64_t idle_timeout_s = 60;              ///< --idle-timeout
  int64_t drain_timeout_s = 30;             ///< --drain-timeout (SIGTERM grace period)
  int64_t io_threads = 1;                   ///< --io-threads
  /// --prompt-threads: threads that parse request bodies, render chat templates and tokenize,
  /// so that no I/O thread waits on a long prompt.
  int64_t prompt_threads = 2;
  int64_t max_seqs_per_request = 1024;      ///< --max-seqs-per-request: prompts x n of one request
  int64_t max_seqs_per_connection = 4096;   ///< --max-seqs-per-connection: over a WebSocket's running requests
  int64_t max_response_bytes = 64 << 20;    ///< --max-response-bytes: what a non-streamed response may buffer
};

/// One engine process's address: --listen or an entry of --engines.
struct host_port {
  std::string host;
  uint16_t port = 0;
};

/// TLS between front ends and engines (libcaf_openssl): each side presents `cert`, signed by a
/// CA in `ca`; a peer without such a certificate is refused. All three or none.
struct tls_options {
  std::string cert;                         ///< --tls-cert: this process's certificate (PEM chain)
  std::string key;                          ///< --tls-key: its private key (PEM)
  std::string ca;                           ///< --tls-ca: the CA certificates peers must chain to
  bool enabled() const { return !cert.empty(); }
};

/// Engines on many hosts: `actorserve engine --listen`, `actorserve serve --engines`.
struct cluster_options {
  std::optional<host_port> listen;          ///< --listen HOST:PORT (`engine`): publish the engine there
  std::vector<host_port> engines;           ///< --engines HOST:PORT,... (`serve`): remote engines
  routing_kind routing = routing_kind::cache_aware;   ///< --routing
  /// --routing-balance-margin: cache-aware routing gives way to least-loaded when the preferred
  /// engine's load (requests) exceeds the least-loaded one's by more than this.
  int64_t balance_margin = 16;
  /// --engine-connect-timeout: seconds `serve --engines` waits at start for a first engine.
  int64_t connect_timeout_s = 60;
  tls_options tls;
};

struct engine_config {
  model_options model;
  scheduler_options scheduler;
  cache_options cache;
  executor_options executor;
  server_options server;
  chat_options chat;
  cluster_options cluster;
  std::string log_level = "info";           ///< --log-level
};

/// The CUDA executor's KV layout: --paged-kv-cache-type, else flash-decoding (measured faster
/// on the H200 at offline throughput and equal in serving, docs/attention.md), or vllm where
/// --block-size asks for blocks smaller than flash-decoding takes (64).
kv_cache_layout cuda_kv_layout(const cache_options& c);
/// The CUDA executor's block size: --block-size, else 64 for flash-decoding and 16 for vllm.
int64_t cuda_block_size(const cache_options& c);
/// The CPU executor's block size: --block-size, else 16 (it has one layout).
int64_t cpu_block_size(const cache_options& c);

/// Why --enable-expert-parallel is refused on the CUDA executor (after the flag's name).
std::string expert_parallel_cuda_refusal();

/// Checks ranges and combinations; the error names the flag and the bad value.
status validate(const engine_config& cfg);

const char* to_string(device_kind d);
const char* to_string(dtype_choice d);
const char* to_string(kv_cache_layout l);
const char* to_string(quantization_choice q);
const char* to_string(kv_cache_dtype d);
const char* to_string(load_format f);
const char* to_string(tool_parser_kind k);
const char* to_string(reasoning_parser_kind k);
const char* to_string(routing_kind k);

/// Parses "HOST:PORT" ("[::1]:PORT" for IPv6); the error names `flag`.
result<host_port> parse_host_port(std::string_view text, std::string_view flag);

}  // namespace actorserve
