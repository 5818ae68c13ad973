// bench_make_random_model: writes a random-weight bf16 Hugging Face model directory of any
// Llama-family, mixture-of-experts or DeepSeek-V2 shape (a named preset with its real config.json
// values, or explicit sizes), for benchmarks that need a real-sized model without downloading one.
//   bench_make_random_model --preset llama-3-8b --output /tmp/llama3-8b
//   bench_make_random_model --preset mixtral-8x7b --output /tmp/mixtral-8x7b
//   bench_make_random_model --preset mixtral-8x7b --config-only --output /tmp/mixtral   (then --load-format dummy)
//   bench_make_random_model --preset deepseek-v2-lite --output /tmp/deepseek-v2-lite
//   bench_make_random_model --preset tiny --layers 4 --hidden-size 256 --output /tmp/tiny --verify
//   bench_make_random_model --preset tiny-moe --num-experts 32 --output /tmp/moe --verify
//   bench_make_random_model --preset deepseek-tiny --output /tmp/deepseek-tiny --verify
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "bench/common/random_model.hpp"
#include "config/model_config.hpp"
#include "gpu/cpu/cpu_executor.hpp"
#include "gpu/model/model_weights.hpp"
#include "protocol/tokenizer/tokenizer.hpp"

namespace {

using namespace actorserve;

std::string default_tokenizer() {
  std::vector<std::string> roots;
  if (const char* env = std::getenv("ACTORSERVE_TEST_DATA"); env && *env) roots.emplace_back(env);
  roots.emplace_back("tests/data");
  roots.emplace_back(ACTORSERVE_SOURCE_DIR "/tests/data");
  for (const auto& r : roots) {
    std::string p = r + "/models/llama-tiny/tokenizer.json";
    if (std::filesystem::exists(p)) return p;
  }
  return "tests/data/models/llama-tiny/tokenizer.json";
}

/// Loads what was written: config.json, the weights bound by name and shape, and (for small
/// models) a CPU executor that runs one greedy step with finite logits.
int verify(const std::string& dir, const bench::model_shape& shape, bool config_only) {
  auto cfg = load_model_config(dir);
  if (!cfg) return fmt::print(stderr, "verify: {}\n", cfg.err().message), 1;
  auto files = gpu::open_model_files(dir, gpu::weight_source{config_only, 0});
  if (!files) return fmt::print(stderr, "verify: {}\n", files.err().message), 1;
  fmt::print("verify: config.json loads ({} layers, hidden {}, vocab {}); every weight bound by name and shape\n",
             cfg->num_layers, cfg->hidden_size, cfg->vocab_size);
  auto tok = protocol::tokenizer::from_model_dir(dir);
  if (!tok) return fmt::print(stderr, "verify: {}\n", tok.err().message), 1;
  const int32_t last = static_cast<int32_t>(cfg->vocab_size - 1);
  fmt::print("verify: tokenizer vocab {}; the last model id {} decodes to '{}'\n", tok->vocab_size(), last,
             tok->decode(std::span<const int32_t>(&last, 1), false));
  if (shape.num_parameters() > 400'000'000) {
    fmt::print("verify: CPU executor step skipped (model over 400M parameters)\n");
    return 0;
  }
  gpu::cpu_executor_options o;
  o.num_blocks = 8;
  o.weights.dummy = config_only;
  auto ex = gpu::cpu_executor::create(dir, o);
  if (!ex) return fmt::print(stderr, "verify: {}\n", ex.err().message), 1;
  gpu::step_batch batch;
  gpu::step_sequence seq;
  seq.new_tokens = {1, 7, 42, static_cast<int32_t>(cfg->vocab_size - 1)};
  seq.block_table = {0};
  seq.sample = true;
  seq.params.temperature = 0;
  batch.seqs.push_back(seq);
  std::vector<std::vector<float>> logits;
  auto r = ex.value()->run_step_sync(batch, &logits);
  if (!r.outcome) return fmt::print(stderr, "verify: step failed: {}\n", r.outcome.err().message), 1;
  double sum = 0, sq = 0;
  for (float v : logits.at(0)) {
    if (!std::isfinite(v)) return fmt::print(stderr, "verify: non-finite logit\n"), 1;
    sum += v;
    sq += double(v) * v;
  }
  const double n = static_cast<double>(logits[0].size());
  fmt::print("verify: CPU executor step ok: greedy token {}, logits mean {:.4f} std {:.4f}\n", r.tokens.at(0).token_id,
             sum / n, std::sqrt(std::max(0.0, sq / n - (sum / n) * (sum / n))));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes a random-weight bf16 Llama-family model directory (config, shards, index, tokenizer)"};
  std::string preset = "llama-3-8b";
  bench::random_model_options opts;
  opts.tokenizer_json = default_tokenizer();
  int64_t hidden = 0, inter = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, max_pos = 0;
  int64_t experts = 0, experts_per_tok = 0, moe_inter = 0;
  std::string arch;
  double shard_gb = 5.0;
  bool tie = false, no_extend = false, do_verify = false;
  std::string names;
  for (const auto& n : bench::preset_names()) names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
  app.add_option("--preset", preset, "shape preset: " + names)->capture_default_str();
  app.add_option("--output,-o", opts.output_dir, "directory to write")->required();
  app.add_option("--tokenizer", opts.tokenizer_json, "tokenizer.json to copy")->capture_default_str();
  bool synthetic = false;
  app.add_flag("--synthetic-tokenizer", synthetic, "write a byte-level tokenizer of 256 bytes + BOS/EOS instead of a copy");
  app.add_flag("--no-extend-tokenizer", no_extend, "copy the tokenizer as is (model ids past its vocab decode to nothing)");
  app.add_option("--hidden-size", hidden);
  app.add_option("--intermediate-size", inter);
  app.add_option("--layers,--num-hidden-layers", layers);
  app.add_option("--heads,--num-attention-heads", heads);
  app.add_option("--kv-heads,--num-key-value-heads", kv_heads);
  app.add_option("--head-dim", head_dim);
  app.add_option("--vocab-size", vocab);
  app.add_option("--max-position-embeddings", max_pos);
  app.add_option("--architecture", arch, "llama | mistral | qwen2 | qwen3 | mixtral | qwen3_moe");
  app.add_option("--num-experts", experts, "routed experts per layer (mixtral, qwen3_moe, DeepSeek presets)");
  app.add_option("--experts-per-token,--num-experts-per-tok", experts_per_tok, "experts each token is routed to");
  app.add_option("--moe-intermediate-size", moe_inter, "each expert's intermediate size (qwen3_moe, DeepSeek presets)");
  app.add_flag("--tie-word-embeddings", tie);
  app.add_option("--seed", opts.seed)->capture_default_str();
  app.add_option("--std", opts.std, "weight standard deviation")->capture_default_str();
  app.add_option("--threads", opts.threads, "writer threads (0: all cores)");
  app.add_option("--shard-size-gb", shard_gb, "safetensors shard size limit (GB)")->capture_default_str();
  app.add_flag("--config-only", opts.config_only,
               "write config.json and the tokenizer but no weights; load with --load-format dummy");
  app.add_flag("--verify", do_verify, "load the result (config, weights; one CPU step for small models)");
  CLI11_PARSE(app, argc, argv);

  auto shape = bench::preset_shape(preset);
  if (!shape) return fmt::print(stderr, "error: {}\n", shape.err().message), 2;
  auto& s = shape.value();
  if (hidden) s.hidden_size = hidden;
  if (inter) s.intermediate_size = inter;
  if (layers) s.num_layers = layers;
  if (heads) s.num_heads = heads;
  if (kv_heads) s.num_kv_heads = kv_heads;
  else if (heads && s.num_kv_heads > heads) s.num_kv_heads = heads;
  if (head_dim) s.head_dim = head_dim;
  if (vocab) s.vocab_size = vocab;
  if (max_pos) s.max_position_embeddings = max_pos;
  if (tie) s.tie_word_embeddings = true;
  if (!arch.empty()) {
    if (arch == "llama") s.architecture = "LlamaForCausalLM";
    else if (arch == "mistral") s.architecture = "MistralForCausalLM";
    else if (arch == "qwen2") s.architecture = "Qwen2ForCausalLM";
    else if (arch == "qwen3") s.architecture = "Qwen3ForCausalLM";
    else if (arch == "mixtral") s.architecture = "MixtralForCausalLM";
    else if (arch == "qwen3_moe") s.architecture = "Qwen3MoeForCausalLM";
    else
      return fmt::print(stderr, "error: --architecture: '{}' is not llama, mistral, qwen2, qwen3, mixtral or qwen3_moe\n",
                        arch),
             2;
    s.model_type = arch;
    s.deepseek.reset();
  }
  if (experts) s.num_experts = experts;
  if (experts_per_tok) s.num_experts_per_tok = experts_per_tok;
  if (moe_inter) s.moe_intermediate_size = moe_inter;
  const bool sparse_arch = s.architecture == "MixtralForCausalLM" || s.architecture == "Qwen3MoeForCausalLM" ||
                           s.architecture == "DeepseekV2ForCausalLM";
  if (!sparse_arch) s.num_experts = 0;
  if (s.deepseek) s.num_kv_heads = s.num_heads;   // latent attention: transformers wants them equal
  if (s.num_heads % s.num_kv_heads != 0 || (s.head_dim == 0 && s.hidden_size % s.num_heads != 0))
    return fmt::print(stderr, "error: --heads must be a multiple of --kv-heads and divide --hidden-size\n"), 2;
  if (sparse_arch && (s.num_experts < 1 || s.num_experts_per_tok < 1 || s.num_experts_per_tok > s.num_experts ||
                      (s.architecture != "MixtralForCausalLM" && s.moe_intermediate_size < 1)))
    return fmt::print(stderr, "error: a mixture-of-experts model needs --num-experts, --experts-per-token (at most "
                              "the experts) and, but for mixtral, --moe-intermediate-size\n"),
           2;
  opts.extend_tokenizer = !no_extend;
  if (synthetic) opts.tokenizer_json.clear();
  opts.shard_bytes = shard_gb * 1e9;

  fmt::print("writing {} ({}, {} layers, hidden {}, intermediate {}, heads {}/{}, vocab {}): {:.2f}M parameters, "
             "{:.3f} GB bf16\n",
             opts.output_dir, s.architecture, s.num_layers, s.hidden_size, s.intermediate_size, s.num_heads,
             s.num_kv_heads, s.vocab_size, double(s.num_parameters()) / 1e6, double(s.num_parameters()) * 2 / 1e9);
  if (s.deepseek)
    fmt::print("latent attention: q_lora_rank {}, kv_lora_rank {}, qk {} + {}, v {}; {} shared experts, first {} "
               "layer(s) dense\n",
               s.deepseek->q_lora_rank, s.deepseek->kv_lora_rank, s.deepseek->qk_nope_head_dim,
               s.deepseek->qk_rope_head_dim, s.deepseek->v_head_dim, s.deepseek->n_shared_experts,
               s.deepseek->first_k_dense_replace);
  auto rep = bench::write_random_model(s, opts);
  if (!rep) return fmt::print(stderr, "error: {}\n", rep.err().message), 1;
  if (opts.config_only)
    fmt::print("wrote config.json and the tokenizer (vocab {}), no weights: load with --load-format dummy\n",
               rep->tokenizer_vocab);
  else
    fmt::print("wrote {:.3f} GB in {} shard(s) in {:.2f} s ({:.2f} GB/s); tokenizer vocab {} ({} synthetic tokens added)\n",
             double(rep->bytes_written) / 1e9, rep->num_shards, rep->seconds,
             double(rep->bytes_written) / 1e9 / std::max(rep->seconds, 1e-9), rep->tokenizer_vocab, rep->added_tokens);
  if (s.is_moe())
    fmt::print("experts: {} per layer, top {}; {:.2f}M parameters active per token ({:.3f} GB bf16 read per decode step "
               "at batch 1)\n",
               s.num_experts, s.num_experts_per_tok, double(s.num_active_parameters()) / 1e6,
               double(s.num_active_parameters()) * 2 / 1e9);
  return do_verify ? verify(opts.output_dir, s, opts.config_only) : 0;
}
