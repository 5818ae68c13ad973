#!/usr/bin/env python3
"""Writes tiny random Hugging Face models and their reference outputs for the architectures the
shared fixtures do not cover (Qwen3, Qwen3-MoE, Mixtral in bf16, Mistral with a sliding window,
DeepSeek-V2 with q_lora, YaRN and group-limited routing).

    python3 scripts/make_hf_references.py OUT_DIR [NAME...]

Each OUT_DIR/NAME is what `save_pretrained` writes plus tokenizer.json and reference.json, in the
format of the shared fixtures (see tests/data/README.md): for every prompt of
tests/data/models/llama-tiny/reference.json, the full-vocabulary logits at the last prompt
position, 24 greedy tokens (no EOS stop) and the top-1 minus top-2 margin at each greedy step. The
reference runs HF transformers in fp32 on the CPU, eager attention, from the weights as stored
(bf16 weights upcast exactly), recomputing the whole sequence at every greedy step.

OUT_DIR/hf_sources.txt gets the source of the transformers classes the engine must match (routers,
MoE blocks, attention, rope initialisation), so the maths can be read beside the references.

Weights: the default initialisation (normal, std 0.02) except the output head (std
1.3/sqrt(hidden), so logits have a spread of about 1.3 and greedy choices a margin), every RMSNorm
weight (1 + 0.1 * normal, so a norm applied with the wrong weight shows), and the routers (std
1/sqrt(hidden), so expert choices have a margin too). With tied embeddings every other weight
of the layers has std 1/sqrt(fan_in), so that the layers, not the embedding, decide the output.
"""
import inspect
import json
import math
import os
import re
import sys
import traceback

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS_FROM = os.path.join(ROOT, "tests/data/models/llama-tiny/reference.json")
TOKENIZER = os.path.join(ROOT, "tests/data/models/llama-tiny/tokenizer.json")
GREEDY_STEPS = 24
VOCAB = 1024


def rope(theta, **scaling):
    return {"rope_type": scaling.pop("rope_type", "default"), "rope_theta": theta, **scaling}


COMMON = dict(vocab_size=VOCAB, bos_token_id=0, eos_token_id=1, pad_token_id=None,
              max_position_embeddings=2048, rms_norm_eps=1e-6, attention_dropout=0.0)

# name -> (model_type, dtype on disk, seed, config overrides, what it exercises)
MODELS = {
    "qwen3-tiny": ("qwen3", torch.float32, 301, dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
        rope_parameters=rope(1e6)),
        "q_norm/k_norm per head, head_dim 32 != hidden/heads, tied embeddings, fp32"),
    "qwen3-hd128-bf16": ("qwen3", torch.bfloat16, 302, dict(
        hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=128, tie_word_embeddings=False,
        rope_parameters=rope(1e6)),
        "head_dim 128, untied, bf16 on disk"),
    "qwen3-moe-tiny": ("qwen3_moe", torch.float32, 303, dict(
        hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
        num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
        tie_word_embeddings=False, rope_parameters=rope(1e6)),
        "8 experts top-2, norm_topk_prob, layer 1 dense through mlp_only_layers, fp32"),
    "qwen3-moe-bf16": ("qwen3_moe", torch.bfloat16, 304, dict(
        hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=16,
        num_experts_per_tok=4, norm_topk_prob=False, decoder_sparse_step=2, mlp_only_layers=[],
        tie_word_embeddings=True, rope_parameters=rope(1e6)),
        "16 experts top-4, no renormalisation, decoder_sparse_step 2 (layer 1 sparse), tied, bf16"),
    "mixtral-bf16": ("mixtral", torch.bfloat16, 305, dict(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=32, num_local_experts=8, num_experts_per_tok=2,
        sliding_window=None, tie_word_embeddings=False, rope_parameters=rope(1e6)),
        "8 experts top-2, MQA, bf16"),
    "mistral-sliding-window": ("mistral", torch.float32, 306, dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=48, tie_word_embeddings=False,
        rope_parameters=rope(1e4)),
        "sliding_window 48: the 63-, 200-, 333- and 1000-token prompts cross it, fp32"),
    "deepseek-v2-qlora-yarn-bf16": ("deepseek_v2", torch.bfloat16, 307, dict(
        hidden_size=128, intermediate_size=256, moe_intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=64,
        qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, head_dim=16,
        n_routed_experts=8, num_experts_per_tok=3, n_shared_experts=2, first_k_dense_replace=1,
        n_group=4, topk_group=2, topk_method="group_limited_greedy", norm_topk_prob=False,
        routed_scaling_factor=2.5, tie_word_embeddings=False,
        rope_parameters=rope(1e4, rope_type="yarn", factor=16.0,
                             original_max_position_embeddings=128, mscale=0.707,
                             mscale_all_dim=0.707, beta_fast=32.0, beta_slow=1.0)),
        "q_lora (q_a_proj, q_a_layernorm, q_b_proj), YaRN (factor 16 over 128 positions, mscale "
        "0.707) with the softmax-scale correction, group-limited routing (4 groups, top 2), "
        "routed_scaling_factor 2.5, 2 shared experts, first layer dense, bf16"),
    "deepseek-v2-yarn-tiny": ("deepseek_v2", torch.float32, 308, dict(
        hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=32,
        qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, head_dim=8,
        n_routed_experts=6, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=0,
        n_group=1, topk_group=1, topk_method="greedy", norm_topk_prob=False,
        routed_scaling_factor=1.5, tie_word_embeddings=False,
        rope_parameters=rope(1e4, rope_type="yarn", factor=32.0,
                             original_max_position_embeddings=64, mscale=1.0,
                             mscale_all_dim=0.0, beta_fast=32.0, beta_slow=1.0)),
        "no q_lora, YaRN (factor 32 over 64 positions) without mscale_all_dim, "
        "routed_scaling_factor 1.5, every layer MoE, fp32"),
}

# Classes whose code the engine reproduces; printed to hf_sources.txt when they exist.
SOURCES = {
    "qwen3": ["Qwen3Attention", "Qwen3RMSNorm", "Qwen3DecoderLayer"],
    "qwen3_moe": ["Qwen3MoeSparseMoeBlock", "Qwen3MoeTopKRouter", "Qwen3MoeExperts",
                  "Qwen3MoeDecoderLayer", "Qwen3MoeAttention"],
    "mixtral": ["MixtralSparseMoeBlock", "MixtralTopKRouter", "MixtralExperts"],
    "mistral": ["MistralAttention", "MistralModel"],
    "deepseek_v2": ["DeepseekV2Moe", "DeepseekV2MoE", "DeepseekV2TopkRouter", "DeepseekV2MoEGate",
                    "DeepseekV2Experts", "DeepseekV2Attention", "DeepseekV2DecoderLayer",
                    "apply_rotary_emb", "DeepseekV2RotaryEmbedding", "yarn_get_mscale"],
}


def peak_weights(model, hidden, seed, tied):
    """The initialisation described in the module docstring."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if tied and p.dim() >= 2 and ".layers." in name and not name.endswith("gate.weight"):
                # A tied head is the embedding: the layers must outweigh the embedding in the
                # residual stream, or every greedy token repeats the last prompt token.
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
            elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif re.search(r"(^|\.)gate\.weight$", name):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(hidden))
            elif re.search(r"\.e_score_correction_bias$|\.bias$", name):
                p.zero_()
        head = model.get_output_embeddings().weight
        head.copy_(torch.randn(head.shape, generator=gen) * (1.3 / math.sqrt(hidden)))


def greedy(model, prompt):
    ids = torch.tensor([prompt], dtype=torch.long)
    with torch.no_grad():
        last = model(input_ids=ids).logits[0, -1].float()
        out, margins = [], []
        logits = last
        for _ in range(GREEDY_STEPS):
            top = torch.topk(logits, 2)
            out.append(int(top.indices[0]))
            margins.append(round(float(top.values[0] - top.values[1]), 5))
            ids = torch.cat([ids, top.indices[:1].view(1, 1)], dim=1)
            logits = model(input_ids=ids).logits[0, -1].float()
    return [round(float(x), 5) for x in last], out, margins


def make(name, out_dir):
    model_type, dtype, seed, overrides, what = MODELS[name]
    torch.manual_seed(seed)
    config = AutoConfig.for_model(model_type, **COMMON, **overrides)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().eval()
    peak_weights(model, config.hidden_size, seed, config.tie_word_embeddings)
    path = os.path.join(out_dir, name)
    model.to(dtype).save_pretrained(path)
    with open(TOKENIZER) as src, open(os.path.join(path, "tokenizer.json"), "w") as dst:
        dst.write(src.read())

    reloaded = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                    attn_implementation="eager").eval()
    prompts = [c["prompt_ids"] for c in json.load(open(PROMPTS_FROM))["cases"]]
    cases = []
    for prompt in prompts:
        last, ids, margins = greedy(reloaded, prompt)
        cases.append({"prompt_ids": prompt, "last_logits": last, "greedy_ids": ids,
                      "greedy_top2_margins": margins})
        print(f"  {name}: prompt {len(prompt):4d} -> {ids[:8]}... min margin {min(margins):.4f}",
              flush=True)
    reference = {
        "model": f"models/{name}", "dtype": str(dtype).replace("torch.", ""),
        "reference": f"HF transformers {transformers.__version__} (torch {torch.__version__}) "
                     "fp32 on CPU, eager attention, weights as stored",
        "exercises": what, "seed": seed, "cases": cases}
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(reference, f)


def dump_sources(out_dir):
    with open(os.path.join(out_dir, "hf_sources.txt"), "w") as f:
        f.write(f"transformers {transformers.__version__}\n")
        for model_type, names in SOURCES.items():
            module = __import__(f"transformers.models.{model_type}.modeling_{model_type}",
                                fromlist=["*"])
            for n in names:
                obj = getattr(module, n, None)
                if obj is not None:
                    f.write(f"\n##### {model_type}.{n}\n{inspect.getsource(obj)}")
        from transformers import modeling_rope_utils
        for n in ("_compute_yarn_parameters", "_compute_default_rope_parameters"):
            obj = getattr(modeling_rope_utils, n, None)
            if obj is not None:
                f.write(f"\n##### modeling_rope_utils.{n}\n{inspect.getsource(obj)}")


def main():
    out_dir = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    failed = []
    try:
        dump_sources(out_dir)
    except Exception:
        traceback.print_exc()
    for name in names:
        print(f"== {name}", flush=True)
        try:
            make(name, out_dir)
        except Exception:
            traceback.print_exc()
            failed.append(name)
    print("failed:", failed or "none")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
