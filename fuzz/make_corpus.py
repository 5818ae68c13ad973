#!/usr/bin/env python3
"""Regenerates fuzz/corpus/<target>/ seed files from tests/data fixtures, the literals of the unit
tests and hand-made inputs. Deterministic; run from anywhere: python3 fuzz/make_corpus.py"""
import hashlib
import json
import pathlib
import re
import shutil
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
OUT = ROOT / "fuzz" / "corpus"


def raw_strings(path):
    """The R"(...)" literals of a C++ file (adjacent literals are not joined)."""
    return re.findall(r'R"\((.*?)\)"', path.read_text(encoding="utf-8"), re.S)


def c_strings_with(path, marker):
    """Plain "..." literals holding `marker`, unescaped (\\n, \\t, \\", \\\\ only)."""
    out = []
    for lit in re.findall(r'(?<![R\w])"((?:[^"\\\n]|\\.)*)"', path.read_text(encoding="utf-8")):
        if marker in lit:
            out.append(re.sub(r'\\(.)', lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), lit))
    return out


def write(target, seeds):
    # Reproducers of past findings stay in the corpus as regression inputs.
    crashes = ROOT / "fuzz" / "crashes" / target
    if crashes.is_dir():
        seeds = list(seeds) + [f.read_bytes() for f in sorted(crashes.iterdir())]
    d = OUT / target
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    seen = set()
    for s in seeds:
        b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
        h = hashlib.sha1(b).hexdigest()[:16]
        if h not in seen:
            seen.add(h)
            (d / h).write_bytes(b)
    total = sum(f.stat().st_size for f in d.iterdir())
    print(f"{target}: {len(seen)} seeds, {total} bytes")


def openai_seeds():
    seeds = []
    for f in sorted((ROOT / "tests" / "openai").glob("parse_*_test.cpp")):
        seeds += [s for s in raw_strings(f) if s.lstrip().startswith("{")]
    msgs = '[{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}]'
    seeds += [
        '{"model": "m", "prompt": "Hello", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 40, '
        '"min_p": 0.05, "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": -0.5, '
        '"seed": 42, "logprobs": 3, "echo": false, "stop": ["\\n", "END"], "stop_token_ids": [2, 7], "n": 2, '
        '"min_tokens": 1, "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}, '
        '"return_token_ids": true}',
        '{"prompt": [1, 2, 3], "max_tokens": 1}',
        '{"prompt": [[1, 2], [3]], "stop": "x"}',
        '{"prompt": ["a", "b\\u00e9\\ud83d\\ude00"], "seed": 18446744073709551615}',
        '{"model": "m", "messages": ' + msgs + ', "max_completion_tokens": 16, "logprobs": true, '
        '"top_logprobs": 5, "add_generation_prompt": false, "stream": true}',
        '{"messages": [{"role": "assistant", "content": null}, {"role": "tool", "content": "1", '
        '"tool_call_id": "c1", "name": "f"}, {"role": "developer", "content": "d"}]}',
        '{"model": "m", "prompt": "hello", "add_special_tokens": false}',
        '{"model": "m", "messages": ' + msgs + ', "add_generation_prompt": true}',
        '{"model": "m", "tokens": [1, 2, 3, 2147483647]}',
        '{"prompt": "x", "temperature": 1e308, "top_p": 5e-324, "max_tokens": 2147483648}',
        '{"prompt": "x", "n": -1, "top_k": -1, "seed": -1}',
        '[]', '{}', 'null', '{"prompt": "\\u0000"}',
        '{"messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": null, "tool_calls": '
        '[{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\\"city\\": 1}"}}]}, '
        '{"role": "tool", "tool_call_id": "call_1", "content": "21"}], "tools": [{"type": "function", "function": '
        '{"name": "get_weather", "parameters": {"type": "object"}}}], "tool_choice": "auto", "parallel_tool_calls": false, '
        '"chat_template_kwargs": {"enable_thinking": false}, "documents": [{"text": "d"}]}',
        '{"prompt": "x", "logit_bias": {"5": 250, "7": -3.5}, "best_of": 1, "n": 1, "user": "u", '
        '"response_format": {"type": "text"}, "skip_special_tokens": false, "priority": -1}',
        '{"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}, '
        '"guided_json": {}, "store": false, "metadata": {}, "modalities": ["text"], "service_tier": "auto"}',
    ]
    return seeds


def websocket_seeds():
    body_c = '{"prompt": "Hi", "max_tokens": 4, "stream": true}'
    body_chat = '{"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "top_logprobs": 2}'
    seeds = [s for s in raw_strings(ROOT / "tests" / "openai" / "websocket_messages_test.cpp")
             if s.lstrip().startswith("{")]
    seeds += [
        '{"type": "completions", "id": "r1", "body": ' + body_c + '}',
        '{"type": "chat", "id": "r2", "body": ' + body_chat + '}',
        '{"type": "cancel", "id": "r1"}',
        '{"id": "\\u00e9\\ud83d\\ude00", "type": "chat", "body": {"messages": []}}',
        '{"type": "completions", "id": "", "body": {}}',
        '{"type": "other", "id": 5, "body": []}',
    ]
    return seeds


def tokenizer_codec_seeds():
    seeds = []
    for name in ("bytelevel", "sentencepiece"):
        cases = json.loads((DATA / "tokenizers" / name / "cases.json").read_text(encoding="utf-8"))["cases"]
        for i, c in enumerate(cases):
            flags = (0 if name == "bytelevel" else 1) | (2 if i % 2 else 0) | (4 if i % 3 == 0 else 0)
            seeds.append(bytes([flags]) + c["text"].encode("utf-8"))
            ids = c["ids"][:64]
            seeds.append(bytes([flags]) + b"".join(struct.pack("<H", (x + 8) & 0xFFFF) for x in ids))
    seeds += [b"\x00ab\xffc\xe6\x97d", b"\x01x\xffy\xc3", b"\x02" + b" " * 300 + b"end", b"\x05<s></s><unk>\xe2\x96\x81"]
    return seeds


def tokenizer_load_seeds():
    bl = json.loads((DATA / "tokenizers" / "bytelevel" / "tokenizer.json").read_text(encoding="utf-8"))
    sp = json.loads((DATA / "tokenizers" / "sentencepiece" / "tokenizer.json").read_text(encoding="utf-8"))

    def shrink(tok, keep):
        """The fixture with its vocabulary cut to the first `keep` ids and merges among them."""
        t = json.loads(json.dumps(tok))
        vocab = {k: v for k, v in t["model"]["vocab"].items() if v < keep}
        t["model"]["vocab"] = vocab
        merges = []
        for m in t["model"].get("merges", []):
            a, b = m.split(" ", 1) if isinstance(m, str) else m
            if a in vocab and b in vocab and a + b in vocab:
                merges.append(m)
        t["model"]["merges"] = merges
        for a in t["added_tokens"]:
            a["id"] = keep + t["added_tokens"].index(a)
        return json.dumps(t, ensure_ascii=False, separators=(",", ":"))

    cfg_llama3 = json.dumps({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"},
                             "add_bos_token": True, "chat_template": "{{ bos_token }}{% for m in messages %}"
                             "{{ m.content }}{% endfor %}"})
    cfg_sp = json.dumps({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "add_eos_token": False,
                         "chat_template": [{"name": "default", "template": "{{ messages[0].content }}"}]})
    gen = json.dumps({"bos_token_id": 1, "eos_token_id": [2, 300]})
    small_bl, small_sp = shrink(bl, 300), shrink(sp, 300)
    seeds = [
        small_bl, small_sp,
        small_bl + "\0" + cfg_llama3, small_sp + "\0" + cfg_sp + "\0" + gen,
        (DATA / "tokenizers" / "sentencepiece" / "tokenizer.json").read_text(encoding="utf-8") + "\0" + cfg_sp,
        json.dumps({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
                    "added_tokens": [], "normalizer": None, "pre_tokenizer": None, "post_processor": None,
                    "decoder": None}),
        json.dumps({"model": {"type": "BPE", "vocab": {"<0x41>": 0, "\u2581": 1}, "merges": [], "byte_fallback": True,
                              "unk_token": None},
                    "added_tokens": [{"id": 2, "content": "<s>", "special": True, "lstrip": False, "rstrip": False,
                                      "normalized": False, "single_word": False}],
                    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                                       {"type": "Replace", "pattern": {"String": " "},
                                                                        "content": "\u2581"}]},
                    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>",
                                       "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                                       "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [2],
                                                                              "tokens": ["<s>"]}}},
                    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"},
                                                                   "content": " "}, {"type": "ByteFallback"},
                                                                  {"type": "Fuse"}, {"type": "Strip", "content": " ",
                                                                                     "start": 1, "stop": 0}]}}),
    ]
    return seeds


def chat_template_seeds():
    seeds = [f.read_text(encoding="utf-8") for folder in ("templates", "tools")
             for f in sorted((DATA / "chat_templates" / folder).glob("*.jinja"))]
    for f in sorted((ROOT / "tests" / "chat_template").glob("*_test.cpp")):
        seeds += [s for s in raw_strings(f) if "{%" in s or "{{" in s]
        seeds += c_strings_with(f, "{{") + [s for s in c_strings_with(f, "{%") if "{{" not in s]
    return seeds


def chat_output_seeds():
    # A flags byte (tool-call parser, reasoning parser, parallel_tool_calls, piece size), then the
    # model output text; see fuzz_chat_output.cpp.
    cases = [
        (1, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
        (1 | 0x40, 'Let me check.<tool_call>{"name": "a", "arguments": {"x": [1, {"y": "}"}]}}</tool_call>\n'
                   '<tool_call>{"arguments": {}, "name": "b"}</tool_call>'),
        (1 | 0x20, '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {}}</tool_call>'),
        (3, '[TOOL_CALLS] [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {"b": "c"}}]'),
        (2, '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"n": 2}}'),
        (2 | 0x80, '{"name": "f", "parameters": {"a": [1, 2'),
        (4, 'Hmm, 2+2.</think>\n\nIt is 4.'),
        (8 | 1, '<think>I need the weather.</think>\n\n<tool_call>\n{"name": "w", "arguments": {}}\n</tool_call>'),
        (8, '<think>\nplan</think>answer'),
        (2, ' {"answer": 42} done'),
        (1, '<tool_call>{"name": "say\\"hi", "arguments": {"s": "a\\"b"}}</tool_call>'),
        # deepseek_v3 (tool bits 0 with bit 4): without reasoning, then after deepseek_r1's.
        (0x18, 'Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
               '{"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>b\n```json\n'
               '{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
        (0x1c, 'Weather first.</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>w\n'
               '```json\n{"a": [1, 2]}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    ]
    return [bytes([flags]) + text.encode() for flags, text in cases]


def grammar_seeds():
    # A mode byte (0 schema, 1 regex, 2 EBNF, 3 choices), the text, NUL, then one byte per
    # generated token picking from the mask; see fuzz_grammar.cpp.
    picks = bytes((i * 37 + 11) % 256 for i in range(64))
    seeds = []
    for lit in raw_strings(ROOT / "tests" / "grammar" / "json_schema_test.cpp"):
        try:
            json.loads(lit)
        except ValueError:
            continue
        seeds.append(b"\0" + lit.encode() + b"\0" + picks)
    for pattern in ["[A-Z][a-z]+ \\d{2}", "(ab|c){1,4}x{2,5}", "a.c", "[^\"\\\\]{0,8}\\.(json|txt)",
                    "\\u00e9+|\\x41?", "(?:[0-9]{1,3}\\.){3}[0-9]{1,3}"]:
        seeds.append(b"\1" + pattern.encode() + b"\0" + picks)
    for ebnf in ['root ::= "{" (pair ("," " "? pair)*)? "}"\npair ::= [a-z]+ ":" [0-9]{1,3}',
                 'root ::= "(" root ")" root | ""', 'root ::= ("ab" | "a" | "b")* "\\"" x\nx ::= "n" "u"? "l"*']:
        seeds.append(b"\2" + ebnf.encode() + b"\0" + picks)
    seeds.append(b"\3yes\nno\nmaybe so\0" + picks)
    return seeds


def safetensors_seeds():
    def file(header, data_len, pad=True):
        h = json.dumps(header, separators=(",", ":")).encode()
        if pad:
            h += b" " * (-len(h) % 8)
        return struct.pack("<Q", len(h)) + h + bytes(data_len)

    seeds = []
    # The real headers of the fixtures, with the data section cut to 64 bytes.
    for model in sorted((DATA / "models").iterdir()):
        raw = (model / "model.safetensors").read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        hdr = json.loads(raw[8:8 + n])
        small = {"__metadata__": hdr.get("__metadata__", {"format": "pt"})}
        for k in list(k for k in hdr if k != "__metadata__")[:6]:
            small[k] = hdr[k]
        seeds.append(raw[:8 + n][:16384])
        end = max(v["data_offsets"][1] for k, v in small.items() if k != "__metadata__")
        seeds.append(file(small, min(end, 256), True))
    seeds += [
        file({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]},
              "e": {"dtype": "I8", "shape": [0], "data_offsets": [32, 32]}}, 32),
        file({"__metadata__": {"format": "pt"}, "x": {"dtype": "F8_E4M3", "shape": [], "data_offsets": [0, 1]}}, 1),
        file({"o1": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
              "o2": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, 8),
        file({"big": {"dtype": "F64", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}}, 0),
        b"\x02\x00\x00\x00\x00\x00\x00\x00{}",
        json.dumps({"metadata": {"total_size": 96}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                                  "b": "model-00002-of-00002.safetensors"}}),
    ]
    return seeds


def model_config_seeds():
    seeds = []
    for model in sorted((DATA / "models").iterdir()):
        cfg = (model / "config.json").read_text(encoding="utf-8")
        gen = (model / "generation_config.json").read_text(encoding="utf-8")
        seeds += [cfg, cfg + "\0" + gen]
    base = json.loads((DATA / "models" / "llama-tiny" / "config.json").read_text(encoding="utf-8"))
    for patch in ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
                  {"rope_scaling": {"type": "linear", "factor": 2.0}},
                  {"rope_scaling": {"type": "dynamic", "factor": 2.0}},
                  {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
                  {"model_type": "mistral", "architectures": None, "sliding_window": 4096},
                  {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "use_sliding_window": True},
                  {"head_dim": 3, "num_key_value_heads": 3}, {"eos_token_id": [1, 2, -1]}, {"dtype": "bfloat16"}):
        seeds.append(json.dumps({**base, **patch}))
    seeds.append(json.dumps(base) + "\0" + '{"eos_token_id": 2147483648, "bos_token_id": 1}')
    moe = json.loads((DATA / "models" / "qwen3-moe-tiny" / "config.json").read_text(encoding="utf-8"))
    for patch in ({"num_experts": 8, "num_local_experts": None, "decoder_sparse_step": 2, "mlp_only_layers": [0]},
                  {"architectures": ["DeepseekV2ForCausalLM"], "n_routed_experts": 8, "topk_method": "group_limited_greedy",
                   "n_group": 4, "topk_group": 2, "scoring_func": "sigmoid", "first_k_dense_replace": 1,
                   "moe_layer_freq": 2, "n_shared_experts": 2, "routed_scaling_factor": 2.5}):
        seeds.append(json.dumps({**moe, **patch}))
    return seeds


if __name__ == "__main__":
    write("fuzz_openai_request", openai_seeds())
    write("fuzz_websocket_message", websocket_seeds())
    write("fuzz_tokenizer_codec", tokenizer_codec_seeds())
    write("fuzz_tokenizer_load", tokenizer_load_seeds())
    write("fuzz_chat_template", chat_template_seeds())
    write("fuzz_chat_output", chat_output_seeds())
    write("fuzz_grammar", grammar_seeds())
    write("fuzz_safetensors_header", safetensors_seeds())
    write("fuzz_model_config", model_config_seeds())
