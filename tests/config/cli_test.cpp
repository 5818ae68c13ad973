#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "config/cli.hpp"
#include "scratch_dir.hpp"

using namespace actorserve;

namespace {

result<command_line> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "actorserve");
  return parse_command_line(static_cast<int>(args.size()), args.data());
}

TEST(Cli, ServeTakesVllmFlagNames) {
  auto cl = parse({"serve", "--model", "m", "--max-num-seqs", "8", "--block-size", "32",
                   "--num-gpu-blocks-override", "100", "--no-enable-prefix-caching",
                   "--paged-kv-cache-type", "flash-decoding", "--device", "cpu", "--port", "0"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->cmd, command::serve);
  EXPECT_EQ(cl->engine.scheduler.max_num_seqs, 8);
  EXPECT_EQ(cl->engine.cache.block_size, 32);
  EXPECT_EQ(cl->engine.cache.num_gpu_blocks_override.value_or(0), 100);
  EXPECT_FALSE(cl->engine.cache.enable_prefix_caching);
  EXPECT_EQ(cl->engine.cache.layout, kv_cache_layout::flash_decoding);
  EXPECT_EQ(cl->engine.executor.device, device_kind::cpu);
}

TEST(Cli, ProfileStepsIsAnEngineFlag) {
  auto plain = parse({"serve", "--model", "m"});
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  EXPECT_FALSE(plain->engine.executor.profile_steps);
  auto profiled = parse({"generate", "--model", "m", "--prompt", "hi", "--profile-steps"});
  ASSERT_TRUE(profiled.ok()) << profiled.err().message;
  EXPECT_TRUE(profiled->engine.executor.profile_steps);
}

TEST(Cli, CascadeAttentionIsOnUnlessDisabledByVllmsFlag) {
  auto plain = parse({"serve", "--model", "m"});
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  EXPECT_TRUE(plain->engine.executor.cascade_attention);
  auto off = parse({"generate", "--model", "m", "--prompt", "hi", "--disable-cascade-attn"});
  ASSERT_TRUE(off.ok()) << off.err().message;
  EXPECT_FALSE(off->engine.executor.cascade_attention);
}

TEST(Cli, KernelsAreAutomaticUnlessPortable) {
  auto plain = parse({"serve", "--model", "m"});
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  EXPECT_EQ(plain->engine.executor.kernels, kernel_choice::automatic);
  auto portable = parse({"generate", "--model", "m", "--prompt", "hi", "--kernels", "portable"});
  ASSERT_TRUE(portable.ok()) << portable.err().message;
  EXPECT_EQ(portable->engine.executor.kernels, kernel_choice::portable);
  auto autom = parse({"serve", "--model", "m", "--kernels", "auto"});
  ASSERT_TRUE(autom.ok()) << autom.err().message;
  EXPECT_EQ(autom->engine.executor.kernels, kernel_choice::automatic);
  auto bad = parse({"serve", "--model", "m", "--kernels", "hopper"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("--kernels"), std::string::npos) << bad.err().message;
}

TEST(Cli, KvLayoutAndBlockSizeDefaultByExecutor) {
  // No flag: the CUDA executor takes flash-decoding with 64-token blocks, the CPU executor 16.
  auto cl = parse({"serve", "--model", "m"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  const cache_options& none = cl->engine.cache;
  EXPECT_FALSE(none.block_size.has_value());
  EXPECT_EQ(cuda_kv_layout(none), kv_cache_layout::flash_decoding);
  EXPECT_EQ(cuda_block_size(none), 64);
  EXPECT_EQ(cpu_block_size(none), 16);
  // Blocks below 64 tokens ask for vLLM's layout; the layout alone picks its own block size.
  cl = parse({"serve", "--model", "m", "--block-size", "16"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cuda_kv_layout(cl->engine.cache), kv_cache_layout::vllm);
  EXPECT_EQ(cuda_block_size(cl->engine.cache), 16);
  cl = parse({"serve", "--model", "m", "--paged-kv-cache-type", "vllm"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cuda_kv_layout(cl->engine.cache), kv_cache_layout::vllm);
  EXPECT_EQ(cuda_block_size(cl->engine.cache), 16);
  EXPECT_EQ(cpu_block_size(cl->engine.cache), 16);
  cl = parse({"serve", "--model", "m", "--block-size", "128"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cuda_kv_layout(cl->engine.cache), kv_cache_layout::flash_decoding);
  EXPECT_EQ(cuda_block_size(cl->engine.cache), 128);
  EXPECT_EQ(cpu_block_size(cl->engine.cache), 128);
}

TEST(Cli, BadValueNamesTheFlag) {
  auto cl = parse({"serve", "--model", "m", "--block-size", "24"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--block-size"), std::string::npos) << cl.err().message;
  cl = parse({"serve", "--model", "m", "--gpu-memory-utilization", "1.5"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--gpu-memory-utilization"), std::string::npos);
  cl = parse({"serve", "--model", "m", "--device", "tpu"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--device"), std::string::npos) << cl.err().message;
}

TEST(Cli, KvCacheMemoryBytesTakesBytesOrBinaryUnits) {
  auto plain = parse({"serve", "--model", "m"});
  ASSERT_TRUE(plain.ok()) << plain.err().message;
  EXPECT_FALSE(plain->engine.cache.kv_cache_memory_bytes) << "unset: the utilization sizes the pool";
  const std::pair<const char*, int64_t> cases[] = {
      {"1000", 1000}, {"3KiB", 3 << 10}, {"256MiB", int64_t{256} << 20}, {"40GiB", int64_t{40} << 30}};
  for (const auto& [text, bytes] : cases) {
    auto cl = parse({"generate", "--model", "m", "--prompt", "hi", "--kv-cache-memory-bytes", text});
    ASSERT_TRUE(cl.ok()) << text << ": " << cl.err().message;
    EXPECT_EQ(cl->engine.cache.kv_cache_memory_bytes.value_or(0), bytes) << text;
    EXPECT_TRUE(cl->warnings.empty()) << text;
  }
  auto engine = parse({"engine", "--model", "m", "--listen", "127.0.0.1:0", "--kv-cache-memory-bytes", "1GiB"});
  ASSERT_TRUE(engine.ok()) << engine.err().message;
  EXPECT_EQ(engine->engine.cache.kv_cache_memory_bytes.value_or(0), int64_t{1} << 30);
}

TEST(Cli, KvCacheMemoryBytesRefusesWhatIsNotAPositiveSize) {
  for (const char* bad : {"0", "-5", "1.5GiB", "12GB", "GiB", "", "9223372036854775807GiB", "1 MiB", "1MiBKiB"}) {
    auto cl = parse({"serve", "--model", "m", "--kv-cache-memory-bytes", bad});
    ASSERT_FALSE(cl.ok()) << "'" << bad << "'";
    EXPECT_NE(cl.err().message.find("--kv-cache-memory-bytes"), std::string::npos) << cl.err().message;
  }
  engine_config cfg;
  cfg.model.model_dir = "m";
  cfg.cache.kv_cache_memory_bytes = 0;
  auto st = validate(cfg);
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message.find("--kv-cache-memory-bytes: must be > 0"), std::string::npos) << st.err().message;
}

TEST(Cli, KvCacheMemoryBytesConflictsWithAnExplicitUtilizationOrCpuSpace) {
  for (const char* derived : {"--gpu-memory-utilization", "--cpu-kv-cache-space"}) {
    auto cl = parse({"serve", "--model", "m", "--kv-cache-memory-bytes", "1GiB", derived, "0.5"});
    ASSERT_FALSE(cl.ok()) << derived;
    EXPECT_NE(cl.err().message.find("--kv-cache-memory-bytes"), std::string::npos) << cl.err().message;
    EXPECT_NE(cl.err().message.find(derived), std::string::npos) << cl.err().message;
    auto alone = parse({"serve", "--model", "m", derived, "0.5"});
    EXPECT_TRUE(alone.ok()) << derived;
  }
}

TEST(Cli, BlockOverrideWinsOverKvCacheMemoryBytesAndSaysSo) {
  auto cl = parse({"serve", "--model", "m", "--kv-cache-memory-bytes", "1GiB", "--num-gpu-blocks-override", "64"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.cache.num_gpu_blocks_override.value_or(0), 64);
  ASSERT_EQ(cl->warnings.size(), 1u);
  EXPECT_NE(cl->warnings[0].find("--kv-cache-memory-bytes"), std::string::npos) << cl->warnings[0];
  EXPECT_NE(cl->warnings[0].find("--num-gpu-blocks-override"), std::string::npos) << cl->warnings[0];
  auto front = parse({"serve", "--model", "m", "--engines", "h:1", "--kv-cache-memory-bytes", "1GiB"});
  ASSERT_TRUE(front.ok()) << front.err().message;
  ASSERT_EQ(front->warnings.size(), 1u);
  EXPECT_NE(front->warnings[0].find("--kv-cache-memory-bytes: no effect on a front end"), std::string::npos)
      << front->warnings[0];
}

TEST(Cli, MissingModelIsAnError) {
  auto cl = parse({"serve"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--model"), std::string::npos) << cl.err().message;
}

TEST(Cli, GeneratePromptIds) {
  auto cl = parse({"generate", "--model", "m", "--prompt-ids", "12,7,99", "--prompt-ids", "5",
                   "--max-tokens", "4", "--logprobs", "3", "--temperature", "0"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->cmd, command::generate);
  ASSERT_EQ(cl->generate.prompt_ids.size(), 2u);
  EXPECT_EQ(cl->generate.prompt_ids[0], (std::vector<int32_t>{12, 7, 99}));
  EXPECT_EQ(cl->generate.sampling.num_logprobs, 3);
  EXPECT_TRUE(cl->generate.sampling.greedy());
}

TEST(Cli, GenerateRejectsBadIds) {
  auto cl = parse({"generate", "--model", "m", "--prompt-ids", "1,x,3"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--prompt-ids"), std::string::npos);
  EXPECT_NE(cl.err().message.find("'x'"), std::string::npos);
}

TEST(Cli, GenerateNeedsAPrompt) {
  EXPECT_FALSE(parse({"generate", "--model", "m"}).ok());
}

TEST(SamplingParams, ValidationNamesTheField) {
  sampling_params p;
  p.top_p = 0.0f;
  auto st = validate(p);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err().message.rfind("top_p", 0), 0u) << st.err().message;
  p = {};
  p.n = 0;
  EXPECT_FALSE(validate(p).ok());
  EXPECT_TRUE(validate(sampling_params{}).ok());
}

}  // namespace

TEST(Cli, TheModelMayComeFirstAsInVllmServe) {
  auto cl = parse({"serve", "models/llama", "--port", "0"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.model.model_dir, "models/llama");
  cl = parse({"serve", "models/llama", "--model", "models/llama"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  cl = parse({"serve", "models/llama", "--model", "models/other"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--model"), std::string::npos) << cl.err().message;
  cl = parse({"serve", "--port", "0"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--model"), std::string::npos) << cl.err().message;
}

TEST(Cli, DtypeTakesVllmsNames) {
  const std::pair<const char*, dtype_choice> names[] = {
      {"half", dtype_choice::float16},   {"float16", dtype_choice::float16}, {"bfloat16", dtype_choice::bfloat16},
      {"bf16", dtype_choice::bfloat16},  {"float", dtype_choice::float32},   {"float32", dtype_choice::float32},
      {"auto", dtype_choice::auto_detect}};
  for (const auto& [name, want] : names) {
    auto cl = parse({"serve", "m", "--dtype", name});
    ASSERT_TRUE(cl.ok()) << name << ": " << cl.err().message;
    EXPECT_EQ(cl->engine.model.dtype, want) << name;
  }
  auto cl = parse({"serve", "m", "--dtype", "int3"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--dtype"), std::string::npos) << cl.err().message;
}

TEST(Cli, HelpNamesChoicesPlainly) {
  auto cl = parse({"serve", "--help"});
  ASSERT_TRUE(cl.ok());
  EXPECT_NE(cl->output.find("half | float16"), std::string::npos) << cl->output;
  EXPECT_EQ(cl->output.find("->"), std::string::npos) << "CLI11's value map leaks into --help";
}

TEST(Cli, TheApiKeyComesFromTheEnvironmentOrAFile) {
  ::setenv("ACTORSERVE_API_KEY", "from-env", 1);
  auto cl = parse({"serve", "m"});
  ::unsetenv("ACTORSERVE_API_KEY");
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.server.api_key, "from-env");
  const actorserve::testing::scratch_dir dir("cli_api_key");
  const std::string file = (dir / "api_key.txt").string();
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("from-file\n", f);
  std::fclose(f);
  cl = parse({"serve", "m", "--api-key-file", file.c_str()});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.server.api_key, "from-file");
  cl = parse({"serve", "m", "--api-key-file", "/nonexistent/key"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--api-key-file"), std::string::npos) << cl.err().message;
  cl = parse({"serve", "m", "--api-key", "k", "--api-key-file", file.c_str()});
  ASSERT_FALSE(cl.ok());
}

TEST(Cli, Fp8FlagsTakeVllmsNames) {
  auto cl = parse({"serve", "m"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.model.quantization, quantization_choice::none);
  EXPECT_EQ(cl->engine.cache.cache_dtype, kv_cache_dtype::auto_detect);
  cl = parse({"serve", "m", "--quantization", "fp8", "--kv-cache-dtype", "fp8"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_TRUE(cl->warnings.empty());
  EXPECT_EQ(cl->engine.model.quantization, quantization_choice::fp8);
  EXPECT_EQ(cl->engine.cache.cache_dtype, kv_cache_dtype::fp8);
  cl = parse({"serve", "m", "--kv-cache-dtype", "fp8_e4m3"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.cache.cache_dtype, kv_cache_dtype::fp8);
  for (auto [flag, value] : {std::pair{"--quantization", "awq"}, std::pair{"--kv-cache-dtype", "fp8_e5m2"}}) {
    cl = parse({"serve", "m", flag, value});
    ASSERT_FALSE(cl.ok()) << flag << " " << value;
    EXPECT_NE(cl.err().message.find(flag), std::string::npos) << cl.err().message;
  }
}

TEST(Cli, VllmFlagsWithoutEffectWarnAndHarmfulValuesAreRefused) {
  auto cl = parse({"serve", "m", "--trust-remote-code", "--tokenizer-mode", "auto", "--pipeline-parallel-size", "1", "--swap-space", "4"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  ASSERT_EQ(cl->warnings.size(), 4u);
  EXPECT_NE(cl->warnings[0].find("--trust-remote-code"), std::string::npos) << cl->warnings[0];
  EXPECT_NE(cl->warnings[0].find("ignored"), std::string::npos) << cl->warnings[0];
  cl = parse({"serve", "m", "--pipeline-parallel-size", "2"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--pipeline-parallel-size"), std::string::npos) << cl.err().message;
  cl = parse({"serve", "m", "--no-such-flag"});
  EXPECT_FALSE(cl.ok());
}

TEST(Cli, TensorParallelSizeTakesVllmsSpellingsOnEveryDevice) {
  auto cl = parse({"serve", "m", "--device", "cpu"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.executor.tensor_parallel_size, 1);
  for (auto args : {std::vector<const char*>{"serve", "m", "--device", "cpu", "--tensor-parallel-size", "2"},
                    std::vector<const char*>{"serve", "m", "--device", "cpu", "-tp", "2"},
                    std::vector<const char*>{"generate", "--model", "m", "--prompt", "x", "-tp=2"},
                    std::vector<const char*>{"engine", "--model", "m", "--listen", "127.0.0.1:7000", "-tp", "2"}}) {
    cl = parse(args);
    ASSERT_TRUE(cl.ok()) << cl.err().message;
    EXPECT_EQ(cl->engine.executor.tensor_parallel_size, 2) << args.back();
    EXPECT_TRUE(cl->warnings.empty());
  }
  for (const char* bad : {"0", "-1"}) {
    cl = parse({"serve", "m", "--tensor-parallel-size", bad});
    ASSERT_FALSE(cl.ok()) << bad;
    EXPECT_NE(cl.err().message.find("--tensor-parallel-size"), std::string::npos) << cl.err().message;
  }
  // On CUDA one shard per GPU: how many GPUs are visible is the executor factory's question.
  for (const char* n : {"1", "2", "8"}) {
    cl = parse({"serve", "m", "--device", "cuda", "-tp", n});
    ASSERT_TRUE(cl.ok()) << cl.err().message;
    EXPECT_EQ(cl->engine.executor.tensor_parallel_size, std::stoi(n));
  }
}

TEST(Cli, NcclLibraryTakesAFileAndRefusesAMissingOneNamingIt) {
  auto cl = parse({"serve", "m"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_TRUE(cl->engine.executor.nccl_library.empty());
  const actorserve::testing::scratch_dir dir("cli_nccl_library");
  const std::string file = (dir / "libnccl.so.2").string();
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  cl = parse({"serve", "m", "--nccl-library", file.c_str()});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.executor.nccl_library, file);
  ASSERT_EQ(cl->warnings.size(), 1u) << "one shard opens no NCCL";
  EXPECT_NE(cl->warnings[0].find("--nccl-library: no effect"), std::string::npos) << cl->warnings[0];
  cl = parse({"serve", "m", "--device", "cpu", "-tp", "2", "--nccl-library", file.c_str()});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  ASSERT_EQ(cl->warnings.size(), 1u) << "the CPU executor's shards sum in memory";
  EXPECT_NE(cl->warnings[0].find("--nccl-library: no effect"), std::string::npos) << cl->warnings[0];
  cl = parse({"serve", "m", "--device", "cuda", "-tp", "2", "--nccl-library", file.c_str()});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_TRUE(cl->warnings.empty()) << cl->warnings[0];
  cl = parse({"serve", "m", "--nccl-library", "/no/such/dir/libnccl.so.2"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--nccl-library"), std::string::npos) << cl.err().message;
  EXPECT_NE(cl.err().message.find("/no/such/dir/libnccl.so.2"), std::string::npos) << cl.err().message;
  cl = parse({"serve", "m", "--nccl-library", dir.path().c_str()});
  ASSERT_FALSE(cl.ok()) << "a directory is no library";
  EXPECT_NE(cl.err().message.find("--nccl-library"), std::string::npos) << cl.err().message;
}

TEST(Cli, EnableExpertParallelIsAFlagOfEveryEngineCommandAndIsRefusedOnCuda) {
  auto cl = parse({"serve", "m", "--device", "cpu", "-tp", "2"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_FALSE(cl->engine.executor.enable_expert_parallel);
  for (auto args : {std::vector<const char*>{"serve", "m", "--device", "cpu", "-tp", "2", "--enable-expert-parallel"},
                    std::vector<const char*>{"generate", "--model", "m", "--prompt", "x", "--enable-expert-parallel"},
                    std::vector<const char*>{"engine", "--model", "m", "--listen", "127.0.0.1:7000",
                                             "--enable-expert-parallel", "-tp", "4"}}) {
    cl = parse(args);
    ASSERT_TRUE(cl.ok()) << cl.err().message;
    EXPECT_TRUE(cl->engine.executor.enable_expert_parallel) << args.front();
    EXPECT_TRUE(cl->warnings.empty());
  }
  // On CUDA even one shard is refused: its shards split every expert.
  cl = parse({"serve", "m", "--device", "cuda", "--enable-expert-parallel"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--enable-expert-parallel: the CUDA executor splits every expert"),
            std::string::npos)
      << cl.err().message;
  EXPECT_NE(cl.err().message.find("--device cpu"), std::string::npos) << cl.err().message;
}

TEST(Cli, MetricsCompatPicksTheSeriesNames) {
  auto cl = parse({"serve", "m"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_FALSE(cl->engine.server.metrics_vllm_names);
  cl = parse({"serve", "m", "--metrics-compat", "vllm"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_TRUE(cl->engine.server.metrics_vllm_names);
  cl = parse({"serve", "m", "--metrics-compat", "prometheus"});
  ASSERT_FALSE(cl.ok());
  EXPECT_NE(cl.err().message.find("--metrics-compat"), std::string::npos) << cl.err().message;
}

TEST(Cli, AllowedOriginsTakeAListOrVllmsJsonForm) {
  auto cl = parse({"serve", "m", "--allowed-origins", "http://a.test,http://b.test"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.server.allowed_origins, (std::vector<std::string>{"http://a.test", "http://b.test"}));
  cl = parse({"serve", "m", "--allowed-origins", R"(["*"])"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.server.allowed_origins, (std::vector<std::string>{"*"}));
}

TEST(Cli, ChatApiFlags) {
  auto cl = parse({"serve", "--model", "m", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                   "--reasoning-parser", "qwen3", "--generation-config", "vllm"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_TRUE(cl->engine.chat.enable_auto_tool_choice);
  EXPECT_EQ(cl->engine.chat.tool_call_parser, tool_parser_kind::hermes);
  EXPECT_EQ(cl->engine.chat.reasoning_parser, reasoning_parser_kind::qwen3);
  EXPECT_EQ(cl->engine.model.generation_config, generation_config_source::vllm);
  auto deepseek = parse({"serve", "--model", "m", "--enable-auto-tool-choice", "--tool-call-parser", "deepseek_v3"});
  ASSERT_TRUE(deepseek.ok()) << deepseek.err().message;
  EXPECT_EQ(deepseek->engine.chat.tool_call_parser, tool_parser_kind::deepseek_v3);
  auto defaults = parse({"serve", "--model", "m"});
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->engine.model.generation_config, generation_config_source::auto_detect);
  EXPECT_FALSE(defaults->engine.chat.enable_auto_tool_choice);
}

TEST(Cli, ChatApiFlagsRefuseBadValuesNamingTheFlag) {
  for (auto args : {std::vector<const char*>{"serve", "--model", "m", "--tool-call-parser", "pythonic"},
                    std::vector<const char*>{"serve", "--model", "m", "--reasoning-parser", "r2"},
                    std::vector<const char*>{"serve", "--model", "m", "--generation-config", "/some/dir"},
                    std::vector<const char*>{"serve", "--model", "m", "--enable-auto-tool-choice"}}) {
    auto cl = parse(args);
    ASSERT_FALSE(cl.ok());
    const std::string flag = args[3];
    EXPECT_NE(cl.err().message.find(flag), std::string::npos) << cl.err().message;
  }
}

namespace {

TEST(Cli, EngineCommandPublishesAtListen) {
  auto cl = parse({"engine", "--model", "m", "--listen", "127.0.0.1:7000", "--device", "cpu"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->cmd, command::engine);
  ASSERT_TRUE(cl->engine.cluster.listen);
  EXPECT_EQ(cl->engine.cluster.listen->host, "127.0.0.1");
  EXPECT_EQ(cl->engine.cluster.listen->port, 7000);
  EXPECT_EQ(cl->engine.executor.device, device_kind::cpu);
  auto v6 = parse({"engine", "--model", "m", "--listen", "[::1]:0"});
  ASSERT_TRUE(v6.ok()) << v6.err().message;
  EXPECT_EQ(v6->engine.cluster.listen->host, "::1");
}

TEST(Cli, ServeTakesEnginesAndRouting) {
  auto cl = parse({"serve", "--model", "m", "--engines", "10.0.0.1:7000,10.0.0.2:7001", "--routing", "round-robin",
                   "--routing-balance-margin", "4"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  ASSERT_EQ(cl->engine.cluster.engines.size(), 2u);
  EXPECT_EQ(cl->engine.cluster.engines[1].host, "10.0.0.2");
  EXPECT_EQ(cl->engine.cluster.engines[1].port, 7001);
  EXPECT_EQ(cl->engine.cluster.routing, routing_kind::round_robin);
  EXPECT_EQ(cl->engine.cluster.balance_margin, 4);
  auto plain = parse({"serve", "--model", "m"});
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->engine.cluster.engines.empty()) << "one process stays the default";
  EXPECT_EQ(plain->engine.cluster.routing, routing_kind::cache_aware);
}

TEST(Cli, EngineFlagsOnAFrontEndOfEnginesWarn) {
  auto cl = parse({"serve", "--model", "m", "--engines", "h:1", "--max-num-seqs", "8", "--no-enable-prefix-caching"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  ASSERT_EQ(cl->warnings.size(), 2u);
  EXPECT_NE(cl->warnings[0].find("--max-num-seqs: no effect on a front end"), std::string::npos) << cl->warnings[0];
  EXPECT_NE(cl->warnings[1].find("--enable-prefix-caching"), std::string::npos) << cl->warnings[1];
  auto local = parse({"serve", "--model", "m", "--max-num-seqs", "8"});
  ASSERT_TRUE(local.ok());
  EXPECT_TRUE(local->warnings.empty());
}

TEST(Cli, ClusterFlagErrorsNameTheFlag) {
  auto expect_error = [](std::vector<const char*> args, std::string_view flag) {
    auto cl = parse(std::move(args));
    ASSERT_FALSE(cl.ok());
    EXPECT_NE(cl.err().message.find(flag), std::string::npos) << cl.err().message;
  };
  expect_error({"engine", "--model", "m"}, "--listen");
  expect_error({"engine", "--model", "m", "--listen", "nohost"}, "--listen");
  expect_error({"engine", "--model", "m", "--listen", "h:99999"}, "--listen");
  expect_error({"serve", "--model", "m", "--engines", "h:1,h"}, "--engines");
  expect_error({"serve", "--model", "m", "--engines", "h:0"}, "--engines");
  expect_error({"serve", "--model", "m", "--engines", "h:1", "--routing", "random"}, "--routing");
  expect_error({"serve", "--model", "m", "--engines", "h:1", "--routing-balance-margin", "-1"},
               "--routing-balance-margin");
  expect_error({"serve", "--model", "m", "--engines", "h:1", "--tls-cert", "c.pem"}, "--tls-key");
  expect_error({"engine", "--model", "m", "--listen", "h:1", "--tls-cert", "/nonexistent/c.pem", "--tls-key",
                "/nonexistent/k.pem", "--tls-ca", "/nonexistent/ca.pem"},
               "--tls-cert");
  expect_error({"serve", "--model", "m", "--tls-cert", "c", "--tls-key", "k", "--tls-ca", "a"}, "--tls-cert");
}

}  // namespace

namespace {

TEST(Cli, LoadFormatTakesVllmsNamesAndRefusesOthersByName) {
  auto cl = parse({"serve", "m"});
  ASSERT_TRUE(cl.ok()) << cl.err().message;
  EXPECT_EQ(cl->engine.model.load, load_format::auto_detect);
  const std::pair<const char*, load_format> names[] = {
      {"auto", load_format::auto_detect}, {"safetensors", load_format::safetensors}, {"dummy", load_format::dummy}};
  for (const auto& [name, want] : names) {
    cl = parse({"serve", "m", "--load-format", name, "--seed", "4"});
    ASSERT_TRUE(cl.ok()) << name << ": " << cl.err().message;
    EXPECT_EQ(cl->engine.model.load, want) << name;
    EXPECT_TRUE(cl->warnings.empty()) << name;
    EXPECT_EQ(cl->engine.executor.seed, 4u);
  }
  cl = parse({"serve", "m", "--load-format", "pt"});
  ASSERT_FALSE(cl.ok());
  for (const char* word : {"--load-format", "pt", "auto", "safetensors", "dummy"})
    EXPECT_NE(cl.err().message.find(word), std::string::npos) << word << ": " << cl.err().message;
}

}  // namespace
