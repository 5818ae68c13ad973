#include "config/cli.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

#include "config/vllm_flags.hpp"

namespace actorserve {
namespace {

/// A value map whose accepted words the option's own description names (CLI11's default text is
/// the map itself, e.g. `{auto->0,...}`).
template <class T>
CLI::Validator named_choices(const std::map<std::string, T>& choices) {
  return CLI::CheckedTransformer(choices, CLI::ignore_case).description("");
}

/// --kv-cache-memory-bytes: a positive integer of bytes, or one followed by KiB, MiB or GiB
/// (binary units, the only suffixes: vLLM's k/K pair of decimal and binary would be ambiguous).
int64_t parse_kv_cache_bytes(std::string_view text) {
  static constexpr std::string_view flag = "--kv-cache-memory-bytes";
  static constexpr std::pair<std::string_view, int> units[] = {{"KiB", 10}, {"MiB", 20}, {"GiB", 30}};
  int shift = 0;
  for (const auto& [suffix, bits] : units) {
    if (text.size() > suffix.size() && text.substr(text.size() - suffix.size()) == suffix) {
      text.remove_suffix(suffix.size());
      shift = bits;
      break;
    }
  }
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size())
    throw CLI::ValidationError(std::string(flag),
                               fmt::format("'{}' is not a whole number of bytes (optionally KiB, MiB or GiB)", text));
  if (n < 1) throw CLI::ValidationError(std::string(flag), fmt::format("must be > 0 bytes, got {}", n));
  if (n > (INT64_MAX >> shift)) throw CLI::ValidationError(std::string(flag), fmt::format("'{}' is too large", text));
  return n << shift;
}

void add_engine_flags(CLI::App& app, engine_config& cfg, std::string& positional_model) {
  auto& m = cfg.model;
  app.add_option("--model", m.model_dir, "Hugging Face model directory (or give it as the first argument)");
  app.add_option("MODEL", positional_model, "Hugging Face model directory, as vLLM's `vllm serve MODEL`");
  app.add_option("--served-model-name", m.served_model_name, "model name reported by the API");
  app.add_option("--chat-template", m.chat_template_file, "Jinja chat template file (overrides tokenizer_config.json)");
  app.add_option("--max-model-len", m.max_model_len, "context length (0: from config.json)");
  static const std::map<std::string, dtype_choice> dtypes{
      {"auto", dtype_choice::auto_detect}, {"float32", dtype_choice::float32}, {"float", dtype_choice::float32},
      {"bfloat16", dtype_choice::bfloat16}, {"bf16", dtype_choice::bfloat16},
      {"float16", dtype_choice::float16}, {"half", dtype_choice::float16}, {"fp16", dtype_choice::float16}};
  app.add_option("--dtype", m.dtype,
                 "weights and activations: auto (the checkpoint's), half | float16 | fp16, bfloat16 | bf16, "
                 "float | float32")
      ->transform(named_choices(dtypes));
  static const std::map<std::string, quantization_choice> quantizations{{"fp8", quantization_choice::fp8}};
  app.add_option("--quantization", m.quantization,
                 "fp8: quantize a bf16/fp16/fp32 checkpoint's linear weights to FP8 E4M3 at load (per output "
                 "channel); an FP8 checkpoint needs no flag (docs/fp8.md)")
      ->transform(named_choices(quantizations));
  app.add_option_function<std::string>(
      "--load-format",
      [&m](const std::string& v) {
        static const std::map<std::string, load_format> formats{
            {"auto", load_format::auto_detect}, {"safetensors", load_format::safetensors}, {"dummy", load_format::dummy}};
        auto it = formats.find(v);
        if (it == formats.end())
          throw CLI::ValidationError("--load-format", fmt::format("'{}' is not auto, safetensors or dummy", v));
        m.load = it->second;
      },
      "auto | safetensors: read the weights from the model's safetensors; dummy: read only config.json (and the "
      "tokenizer) and fill every weight with pseudo-random values seeded by --seed (benchmarks)");

  static const std::map<std::string, generation_config_source> gen_sources{
      {"auto", generation_config_source::auto_detect}, {"vllm", generation_config_source::vllm}};
  app.add_option("--generation-config", m.generation_config,
                 "auto|vllm: auto applies generation_config.json's sampling defaults to fields a request "
                 "leaves unset; vllm ignores them")
      ->transform(named_choices(gen_sources));

  auto& s = cfg.scheduler;
  app.add_option("--max-num-seqs", s.max_num_seqs, "max sequences per step");
  app.add_option("--max-num-batched-tokens", s.max_num_batched_tokens, "token budget per step");
  app.add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", s.enable_chunked_prefill,
               "split long prompts across steps");
  app.add_flag("--async-scheduling,!--no-async-scheduling", s.async_scheduling,
               "plan the next step while the current one runs (two steps in flight)");

  auto& c = cfg.cache;
  app.add_option("--block-size", c.block_size,
                 "tokens per KV block (default: 64 with flash-decoding, 16 with vllm and on the CPU executor)");
  app.add_option("--num-gpu-blocks-override", c.num_gpu_blocks_override,
                 "cap the KV pool at N blocks (any executor; wins over --kv-cache-memory-bytes)");
  app.add_option("--gpu-memory-utilization", c.gpu_memory_utilization, "fraction of GPU memory to use");
  app.add_option("--cpu-kv-cache-space", c.cpu_kv_cache_gib, "GiB of KV cache for the CPU executor");
  app.add_option_function<std::string>(
      "--kv-cache-memory-bytes", [&c](const std::string& v) { c.kv_cache_memory_bytes = parse_kv_cache_bytes(v); },
      "N[KiB|MiB|GiB]: the KV pool of each GPU (each tensor-parallel shard) in bytes, whatever else uses the "
      "device; replaces --gpu-memory-utilization and --cpu-kv-cache-space (not given with either); "
      "--num-gpu-blocks-override wins over it");
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", c.enable_prefix_caching,
               "reuse cached KV blocks of shared prompt prefixes");
  static const std::map<std::string, kv_cache_layout> layouts{
      {"vllm", kv_cache_layout::vllm}, {"flash-decoding", kv_cache_layout::flash_decoding}};
  app.add_option("--paged-kv-cache-type", c.layout,
                 "vllm|flash-decoding: the CUDA executor's KV layout (default: flash-decoding, or vllm when "
                 "--block-size is below 64)")
      ->transform(named_choices(layouts));
  static const std::map<std::string, kv_cache_dtype> cache_dtypes{{"auto", kv_cache_dtype::auto_detect},
                                                                  {"fp8", kv_cache_dtype::fp8},
                                                                  {"fp8_e4m3", kv_cache_dtype::fp8}};
  app.add_option("--kv-cache-dtype", c.cache_dtype,
                 "auto | fp8 (= fp8_e4m3): K/V stored as FP8 E4M3 with the checkpoint's k_scale / v_scale, else "
                 "1.0 (docs/fp8.md)")
      ->transform(named_choices(cache_dtypes));

  auto& e = cfg.executor;
  static const std::map<std::string, device_kind> devices{
      {"auto", device_kind::auto_detect}, {"cpu", device_kind::cpu}, {"cuda", device_kind::cuda}};
  app.add_option("--device", e.device, "auto | cuda | cpu")->transform(named_choices(devices));
  app.add_flag("--enforce-eager", e.enforce_eager, "disable CUDA graphs");
  static const std::map<std::string, kernel_choice> kernel_choices{{"auto", kernel_choice::automatic},
                                                                   {"portable", kernel_choice::portable}};
  app.add_option("--kernels", e.kernels,
                 "auto | portable: the CUDA executor's kernels; auto takes the fastest the GPU runs (wgmma/TMA "
                 "on Hopper), portable the cp.async/mma.sync ones every GPU from compute capability 8.0 runs "
                 "(docs/gpus.md)")
      ->transform(named_choices(kernel_choices));
  app.add_flag("--profile-steps", e.profile_steps,
               "CUDA: time each kernel class of the eager steps, print the table to stderr at shutdown");
  app.add_option("--cpu-threads", e.cpu_threads, "CPU executor threads, split over the tensor-parallel shards (0: all cores)");
  app.add_flag("!--disable-cascade-attn", e.cascade_attention,
               "attend to every decode's shared prefix per sequence, never in one pass per group (cascade "
               "attention; docs/attention.md)");
  app.add_option("--tensor-parallel-size", e.tensor_parallel_size,
                 "-tp N: split the model over N tensor-parallel shards (the CPU executor runs them in one process, "
                 "the CUDA executor one per GPU on GPUs 0..N-1; docs/tensor-parallel.md)");
  app.add_option("--nccl-library", e.nccl_library,
                 "PATH of libnccl.so.2 for tensor parallelism over GPUs (default: the dynamic loader's search, then "
                 "beside the CUDA runtime and /usr/local/cuda/lib64); e.g. a Python package's "
                 "nvidia/nccl/lib/libnccl.so.2 (docs/tensor-parallel.md)");
  app.add_flag("--enable-expert-parallel", e.enable_expert_parallel,
               "mixture-of-experts models: each of the -tp N shards holds whole routed experts, shard i the "
               "contiguous ids [i*E/N, (i+1)*E/N) of E, instead of a slice of every expert; attention, shared experts "
               "and dense layers stay tensor parallel (CPU executor; docs/tensor-parallel.md)");
  app.add_option("--seed", e.seed, "seed for requests that bring none");
  app.add_option("--inject-step-failures", e.inject_step_failures,
                 "TEST ONLY: comma-separated step numbers (e.g. 5 or 5,6,7) whose step the executor reports as "
                 "failed, to exercise the executor restart")
      ->delimiter(',');
  app.add_option("--log-level", cfg.log_level, "trace|debug|info|warn|error|off");
}

void add_chat_flags(CLI::App& app, chat_options& c) {
  app.add_flag("--enable-auto-tool-choice", c.enable_auto_tool_choice,
               "accept `tools` and parse tool calls from the output (needs --tool-call-parser)");
  static const std::map<std::string, tool_parser_kind> tool_parsers{{"llama3_json", tool_parser_kind::llama3_json},
                                                                    {"hermes", tool_parser_kind::hermes},
                                                                    {"mistral", tool_parser_kind::mistral},
                                                                    {"deepseek_v3", tool_parser_kind::deepseek_v3}};
  app.add_option("--tool-call-parser", c.tool_call_parser,
                 "llama3_json|hermes|mistral|deepseek_v3: the model's tool-call format")
      ->transform(named_choices(tool_parsers));
  static const std::map<std::string, reasoning_parser_kind> reasoning{
      {"deepseek_r1", reasoning_parser_kind::deepseek_r1}, {"qwen3", reasoning_parser_kind::qwen3}};
  app.add_option("--reasoning-parser", c.reasoning_parser,
                 "deepseek_r1|qwen3: split <think>...</think> into reasoning_content")
      ->transform(named_choices(reasoning));
}

void add_server_flags(CLI::App& app, server_options& s) {
  app.add_option("--host", s.host, "address to bind");
  app.add_option("--port", s.port, "port to bind (0: any free port)");
  app.add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY' (also from $ACTORSERVE_API_KEY)")
      ->envname("ACTORSERVE_API_KEY");
  app.add_option("--api-key-file", s.api_key_file, "read the API key from this file (kept out of `ps`)");
  app.add_flag("--api-key-guards-metrics", s.api_key_guards_metrics,
               "with an API key, /health and /metrics need it too (default: open, as in vLLM)");
  app.add_option("--allowed-origins", s.allowed_origins,
                 "origins whose pages may call the API from a browser (CORS), comma-separated or a JSON "
                 "list; * allows any (default: none)")
      ->delimiter(',');
  app.add_flag("!--disable-log-stats", s.log_stats, "no stats line every 10 s while the server is busy");
  static const std::map<std::string, bool> metric_names{{"actorserve", false}, {"vllm", true}};
  app.add_option("--metrics-compat", s.metrics_vllm_names,
                 "actorserve | vllm: the names of /metrics series (vllm: vLLM's, for its dashboards)")
      ->transform(named_choices(metric_names));
  app.add_flag("--enable-log-requests", s.log_requests,
               "one access-log line per API request (id, route, status, tokens, TTFT, duration; no prompt text)");
  app.add_option("--max-connections", s.max_connections, "concurrent connections at most");
  app.add_option("--max-body-bytes", s.max_body_bytes, "request body size limit");
  app.add_option("--idle-timeout", s.idle_timeout_s, "seconds before an idle connection is closed");
  app.add_option("--drain-timeout", s.drain_timeout_s, "seconds SIGTERM waits for in-flight requests");
  app.add_option("--io-threads", s.io_threads, "network I/O threads");
  app.add_option("--prompt-threads", s.prompt_threads,
                 "threads that parse bodies, render chat templates and tokenize prompts (off the I/O threads)");
  app.add_option("--max-seqs-per-request", s.max_seqs_per_request,
                 "sequences one request may create (prompts x n); more is a 400");
  app.add_option("--max-seqs-per-connection", s.max_seqs_per_connection,
                 "sequences the running requests of one WebSocket connection may hold together");
  app.add_option("--max-response-bytes", s.max_response_bytes,
                 "bytes a non-streamed response may buffer; more is a 400 (stream instead)");
}

void add_tls_flags(CLI::App& app, tls_options& t) {
  app.add_option("--tls-cert", t.cert, "TLS between front ends and engines: this process's certificate (PEM)");
  app.add_option("--tls-key", t.key, "TLS: this process's private key (PEM)");
  app.add_option("--tls-ca", t.ca, "TLS: CA certificates a peer's certificate must chain to (PEM)");
}

/// `serve`'s flags for remote engines (the text of --engines is parsed after CLI11 ran).
void add_cluster_flags(CLI::App& app, cluster_options& c, std::vector<std::string>& engines) {
  app.add_option("--engines", engines,
                 "HOST:PORT,... of engine processes (`actorserve engine`) to serve from; without it the engine "
                 "runs in this process")
      ->delimiter(',');
  static const std::map<std::string, routing_kind> routings{{"cache-aware", routing_kind::cache_aware},
                                                            {"least-loaded", routing_kind::least_loaded},
                                                            {"round-robin", routing_kind::round_robin}};
  app.add_option("--routing", c.routing, "cache-aware | least-loaded | round-robin: how a request picks an engine")
      ->transform(named_choices(routings));
  app.add_option("--routing-balance-margin", c.balance_margin,
                 "cache-aware routing picks the least-loaded engine instead when the cache's choice has this many "
                 "more requests queued");
  app.add_option("--engine-connect-timeout", c.connect_timeout_s,
                 "seconds to wait at start for the first of --engines to answer");
  add_tls_flags(app, c.tls);
}

void add_generate_flags(CLI::App& app, generate_options& g, std::vector<std::string>& id_lists) {
  app.add_option("--prompt", g.prompts, "prompt text (repeatable)");
  app.add_option("--prompt-ids", id_lists, "prompt as comma-separated token ids (repeatable)");
  app.add_option("--requests", g.requests_file, "JSON-lines file of requests");
  auto& p = g.sampling;
  app.add_option("--max-tokens", p.max_tokens, "tokens to generate at most");
  app.add_option("--temperature", p.temperature, "0 for greedy");
  app.add_option("--top-p", p.top_p);
  app.add_option("--top-k", p.top_k);
  app.add_option("--min-p", p.min_p);
  app.add_option("--repetition-penalty", p.repetition_penalty);
  app.add_option("--presence-penalty", p.presence_penalty);
  app.add_option("--frequency-penalty", p.frequency_penalty);
  app.add_option("--sampling-seed", p.seed, "per-request sampling seed");
  app.add_option("--logprobs", p.num_logprobs, "top-K logprobs per step");
  app.add_option("--n", p.n, "samples per prompt");
  app.add_flag("--ignore-eos", p.ignore_eos, "do not stop at EOS");
  app.add_option("--stop", p.stop, "stop string (repeatable)");
}

/// Whether `flag` was given on `app`'s command line (not only its default).
bool given_on_command_line(const CLI::App& app, const char* flag) {
  const CLI::Option* opt = app.get_option_no_throw(flag);
  return opt && opt->count() > 0;
}

/// A front end of --engines runs no engine: the engine's own flags belong to `actorserve engine`.
void warn_engine_flags_on_front_end(const CLI::App& serve, std::vector<std::string>& warnings) {
  static const char* const engine_only[] = {
      "--max-model-len", "--dtype", "--load-format", "--max-num-seqs", "--max-num-batched-tokens", "--enable-chunked-prefill",
      "--async-scheduling", "--block-size", "--num-gpu-blocks-override", "--gpu-memory-utilization",
      "--kv-cache-memory-bytes",
      "--cpu-kv-cache-space", "--enable-prefix-caching", "--paged-kv-cache-type", "--device",
      "--quantization", "--kv-cache-dtype", "--enforce-eager", "--kernels",
      "--profile-steps", "--cpu-threads", "--disable-cascade-attn", "--tensor-parallel-size",
      "--nccl-library", "--inject-step-failures"};
  for (const char* flag : engine_only) {
    if (given_on_command_line(serve, flag))
      warnings.push_back(fmt::format("{}: no effect on a front end of --engines; give it to `actorserve engine`", flag));
  }
}

/// --kv-cache-memory-bytes fixes the pool's size, which the utilization (or the CPU space)
/// would derive instead: given together on the command line they contradict each other.
/// --num-gpu-blocks-override wins over it (vLLM's order), and the command line says so.
status check_kv_cache_size_flags(const CLI::App& app, std::vector<std::string>& warnings) {
  auto given = [&app](const char* flag) { return given_on_command_line(app, flag); };
  if (!given("--kv-cache-memory-bytes")) return {};
  for (const char* derived : {"--gpu-memory-utilization", "--cpu-kv-cache-space"}) {
    if (given(derived))
      return make_error(error_code::invalid_argument,
                        fmt::format("--kv-cache-memory-bytes and {} both size the KV cache; give one", derived));
  }
  if (given("--num-gpu-blocks-override"))
    warnings.push_back("--kv-cache-memory-bytes: --num-gpu-blocks-override is given too and sets the KV pool's "
                       "size in blocks; the byte size has no effect");
  return {};
}

/// The model comes from --model or the first argument, not from two different places.
status resolve_model(engine_config& cfg, const std::string& positional) {
  if (positional.empty()) return {};
  if (!cfg.model.model_dir.empty() && cfg.model.model_dir != positional)
    return make_error(error_code::invalid_argument,
                      fmt::format("--model: '{}' and the model argument '{}' differ; give one", cfg.model.model_dir,
                                  positional));
  cfg.model.model_dir = positional;
  return {};
}

/// --api-key-file: the key is the file's first line (trailing whitespace dropped).
status resolve_api_key(server_options& s) {
  if (s.api_key_file.empty()) return {};
  if (!s.api_key.empty())
    return make_error(error_code::invalid_argument, "--api-key-file: give the key once (--api-key or $ACTORSERVE_API_KEY is set too)");
  std::ifstream in(s.api_key_file);
  if (!in) return make_error(error_code::invalid_argument, "--api-key-file: cannot read " + s.api_key_file);
  std::getline(in, s.api_key);
  while (!s.api_key.empty() && std::isspace(static_cast<unsigned char>(s.api_key.back()))) s.api_key.pop_back();
  if (s.api_key.empty()) return make_error(error_code::invalid_argument, "--api-key-file: " + s.api_key_file + " holds no key");
  return {};
}

/// --allowed-origins also takes vLLM's JSON list form: ["http://a", "http://b"].
void normalize_origins(std::vector<std::string>& origins) {
  std::vector<std::string> out;
  for (std::string o : origins) {
    auto strip = [&o](char c) {
      while (!o.empty() && (o.front() == c || o.front() == ' ')) o.erase(0, 1);
      while (!o.empty() && (o.back() == c || o.back() == ' ')) o.pop_back();
    };
    strip('[');
    strip(']');
    strip('"');
    strip('\'');
    if (!o.empty()) out.push_back(o);
  }
  origins = std::move(out);
}

}  // namespace

result<std::vector<int32_t>> parse_id_list(std::string_view text, std::string_view flag) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string_view::npos) end = text.size();
    auto item = text.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int32_t v = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc{} || ptr != item.data() + item.size() || v < 0)
      return make_error(error_code::invalid_argument,
                        fmt::format("{}: '{}' is not a non-negative token id", flag, item));
    ids.push_back(v);
    pos = end + 1;
  }
  return ids;
}

result<command_line> parse_command_line(int argc, const char* const* argv) {
  command_line out;
  CLI::App app{"actorserve: an LLM inference server", "actorserve"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "actorserve 0.1.0");
  auto* serve = app.add_subcommand("serve", "run the OpenAI-compatible HTTP/WebSocket server");
  std::string serve_model, gen_model;
  add_engine_flags(*serve, out.engine, serve_model);
  add_server_flags(*serve, out.engine.server);
  add_vllm_flags_without_effect(*serve, out.warnings);
  add_chat_flags(*serve, out.engine.chat);
  auto* gen = app.add_subcommand("generate", "generate offline and print JSON");
  engine_config gen_cfg;
  std::vector<std::string> id_lists;
  add_engine_flags(*gen, gen_cfg, gen_model);
  add_generate_flags(*gen, out.generate, id_lists);
  std::vector<std::string> engine_list;
  add_cluster_flags(*serve, out.engine.cluster, engine_list);
  auto* host = app.add_subcommand("engine", "run one engine and publish it for front ends (`serve --engines`)");
  engine_config host_cfg;
  std::string host_model, listen;
  add_engine_flags(*host, host_cfg, host_model);
  host->add_option("--listen", listen, "HOST:PORT to publish the engine on (a private interface; port 0: any)")
      ->required();
  add_tls_flags(*host, host_cfg.cluster.tls);
  // vLLM's -tp: CLI11 takes only one-letter short names, so it becomes the long flag first.
  std::vector<std::string> spelled;
  std::vector<const char*> args;
  spelled.reserve(static_cast<size_t>(argc));
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i > 0 && (a == "-tp" || a.rfind("-tp=", 0) == 0)) a = "--tensor-parallel-size" + a.substr(3);
    spelled.push_back(std::move(a));
  }
  for (const auto& a : spelled) args.push_back(a.c_str());
  try {
    app.parse(argc, args.data());
  } catch (const CLI::CallForHelp& e) {
    out.exit_now = true;
    out.output = app.help("", CLI::AppFormatMode::All);
    return out;
  } catch (const CLI::CallForVersion& e) {
    out.exit_now = true;
    out.output = e.what();
    return out;
  } catch (const CLI::ParseError& e) {
    return make_error(error_code::invalid_argument, e.what());
  }
  if (serve->parsed()) {
    if (auto st = resolve_model(out.engine, serve_model); !st) return st.err();
    if (auto st = resolve_api_key(out.engine.server); !st) return st.err();
    normalize_origins(out.engine.server.allowed_origins);
    for (const auto& text : engine_list) {
      auto hp = parse_host_port(text, "--engines");
      if (!hp) return hp.err();
      if (hp->port == 0) return make_error(error_code::invalid_argument, "--engines: '" + text + "' needs a port");
      out.engine.cluster.engines.push_back(std::move(*hp));
    }
    if (!out.engine.cluster.engines.empty()) warn_engine_flags_on_front_end(*serve, out.warnings);
  }
  if (host->parsed()) {
    out.cmd = command::engine;
    out.engine = host_cfg;
    if (auto st = resolve_model(out.engine, host_model); !st) return st.err();
    auto hp = parse_host_port(listen, "--listen");
    if (!hp) return hp.err();
    out.engine.cluster.listen = std::move(*hp);
  }
  if (gen->parsed()) {
    out.cmd = command::generate;
    out.engine = gen_cfg;
    if (auto st = resolve_model(out.engine, gen_model); !st) return st.err();
    for (const auto& text : id_lists) {
      auto ids = parse_id_list(text, "--prompt-ids");
      if (!ids) return ids.err();
      out.generate.prompt_ids.push_back(std::move(ids.value()));
    }
    if (out.generate.prompts.empty() && out.generate.prompt_ids.empty() && out.generate.requests_file.empty())
      return make_error(error_code::invalid_argument,
                        "generate: give --prompt, --prompt-ids or --requests");
    if (auto st = validate(out.generate.sampling); !st)
      return make_error(error_code::invalid_argument, "--" + st.err().message);
  }
  for (const CLI::App* sub : {serve, host, gen}) {
    if (!sub->parsed()) continue;
    if (auto st = check_kv_cache_size_flags(*sub, out.warnings); !st) return st.err();
  }
  if (auto st = validate(out.engine); !st) return st.err();
  const auto& x = out.engine.executor;
  if (!x.nccl_library.empty() && (x.tensor_parallel_size == 1 || x.device == device_kind::cpu))
    out.warnings.push_back("--nccl-library: no effect: NCCL is opened only for --tensor-parallel-size > 1 on GPUs");
  return out;
}

}  // namespace actorserve
