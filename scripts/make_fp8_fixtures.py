#!/usr/bin/env python3
"""Makes the FP8 fixture models of tests/data/models from the bf16 fixtures, with Python's standard
library only (no numpy, no torch): each linear layer's weight becomes F8_E4M3 with its scales, in
the three layouts Hugging Face FP8 checkpoints ship (tests/data/README.md, docs/fp8.md):

  qwen3-hd128-fp8          quant_method fp8, per-tensor weight_scale (F32, shape []), static
                           activations (input_scale, F32 [1]), self_attn.k_scale / v_scale
  qwen3-hd128-fp8-channel  compressed-tensors, per-channel weight_scale (BF16, [out, 1]), dynamic
                           per-token activations; layer 1's down_proj stays bf16 (its `ignore` list);
                           an FP8 kv_cache_scheme with self_attn.k_scale / v_scale
  mixtral-fp8-block        quant_method fp8 with weight_block_size [128, 128], weight_scale_inv
                           (F32, [ceil(out/128), ceil(in/128)]); k/v_proj are 32 x 128 (ragged blocks)

Scales are amax / 448 of what they cover; E4M3 rounding is to nearest, ties to even. Embeddings,
norms, lm_head and the MoE router stay as they were. Run from the repository root:
    python3 scripts/make_fp8_fixtures.py
"""
import json
import math
import os
import re
import shutil
import struct

MODELS = "tests/data/models"
E4M3_MAX = 448.0


def e4m3_table():
    """value -> bits for the non-negative finite E4M3 values."""
    table = {}
    for bits in range(0x7f):  # 0x7f is NaN
        exp, mant = bits >> 3, bits & 7
        value = math.ldexp(mant, -9) if exp == 0 else math.ldexp(8 + mant, exp - 10)
        table[value] = bits
    return table


E4M3 = e4m3_table()


def round_e4m3(x):
    """The nearest E4M3 value to x (ties to even), saturated to +-448."""
    a = abs(x)
    if a >= E4M3_MAX:
        return math.copysign(E4M3_MAX, x)
    if a < 2.0 ** -6:
        quantum = -9
    else:
        quantum = math.frexp(a)[1] - 1 - 3
    q = math.ldexp(round(math.ldexp(a, -quantum)), quantum)  # round() is half-to-even
    return math.copysign(min(q, E4M3_MAX), x)


def encode_e4m3(x):
    r = round_e4m3(x)
    bits = E4M3[abs(r)]
    return bits | (0x80 if math.copysign(1.0, r) < 0 and r != 0 else 0)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_round(x):
    """x rounded to bfloat16 (nearest, ties to even), as a float."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000
    return struct.unpack("<f", struct.pack("<I", u))[0]


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        assert info["dtype"] == "BF16", (path, name, info["dtype"])
        values = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
        tensors[name] = (info["shape"], values)
    return tensors


def pack(dtype, values):
    if dtype == "F8_E4M3":
        return bytes(values)
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    raise ValueError(dtype)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, values); bf16 values must already be bf16-exact."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        dtype, shape, values = tensors[name]
        blob = pack(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def quantize(shape, values, scale_of):
    """scale_of(r, c) -> the scale of element (r, c); returns the E4M3 bytes."""
    rows, cols = shape
    return [encode_e4m3(values[r * cols + c] / scale_of(r, c)) for r in range(rows) for c in range(cols)]


def amax(values):
    return max((abs(v) for v in values), default=0.0)


def scale_for(a, rounding):
    return rounding(a / E4M3_MAX) if a > 0 else 1.0


def per_tensor(shape, values):
    s = scale_for(amax(values), f32)
    return quantize(shape, values, lambda r, c: s), ("F32", [], [s])


def per_channel(shape, values, rounding):
    rows, cols = shape
    scales = [scale_for(amax(values[r * cols:(r + 1) * cols]), rounding) for r in range(rows)]
    return quantize(shape, values, lambda r, c: scales[r]), ("BF16" if rounding is bf16_round else "F32", [rows, 1], scales)


def per_block(shape, values, block):
    rows, cols = shape
    br, bc = (rows + block - 1) // block, (cols + block - 1) // block
    scales = []
    for i in range(br):
        for j in range(bc):
            blk = [values[r * cols + c] for r in range(i * block, min(rows, (i + 1) * block))
                   for c in range(j * block, min(cols, (j + 1) * block))]
            scales.append(scale_for(amax(blk), f32))
    return quantize(shape, values, lambda r, c: scales[(r // block) * bc + c // block]), ("F32", [br, bc], scales)


LINEAR = re.compile(r"^model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj|"
                    r"block_sparse_moe\.experts\.\d+\.w[123])\.weight$")


def make(source, target, quantization_config, quantize_one, ignored=(), extra=None, scale_name="weight_scale"):
    src = os.path.join(MODELS, source)
    dst = os.path.join(MODELS, target)
    os.makedirs(dst, exist_ok=True)
    for name in ("generation_config.json", "tokenizer.json"):
        shutil.copy(os.path.join(src, name), os.path.join(dst, name))
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = quantization_config
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    out = {}
    for name, (shape, values) in read_safetensors(os.path.join(src, "model.safetensors")).items():
        module = name[:-len(".weight")]
        if LINEAR.match(name) and module not in ignored:
            q, (sdtype, sshape, scales) = quantize_one(shape, values)
            out[name] = ("F8_E4M3", shape, q)
            out[module + "." + scale_name] = (sdtype, sshape, scales)
        else:
            out[name] = ("BF16", shape, values)
    if extra:
        extra(out)
    write_safetensors(os.path.join(dst, "model.safetensors"), out)
    print(target, os.path.getsize(os.path.join(dst, "model.safetensors")), "bytes")


def add_kv_scales(out, num_layers, k_scale, v_scale):
    """Per-layer KV-cache scales as a calibration stores them (self_attn.k_scale / v_scale)."""
    for layer in range(num_layers):
        out["model.layers.%d.self_attn.k_scale" % layer] = ("F32", [], [k_scale])
        out["model.layers.%d.self_attn.v_scale" % layer] = ("F32", [], [v_scale])


def static_extras(num_layers):
    def add(out):
        for name in list(out):
            if name.endswith(".weight_scale"):
                # The activation scale a calibration would store; the CPU reference checks it and
                # computes activations in fp32 (docs/fp8.md).
                out[name[:-len("weight_scale")] + "input_scale"] = ("F32", [1], [0.0625])
        add_kv_scales(out, num_layers, 0.5, 0.25)
    return add


def main():
    make("qwen3-hd128-bf16", "qwen3-hd128-fp8",
         {"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]},
         per_tensor, extra=static_extras(2))
    down1 = "model.layers.1.mlp.down_proj"
    ct = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "global_compression_ratio": None,
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True,
                            "dynamic": False, "group_size": None, "block_structure": None, "actorder": None,
                            "observer": "minmax", "observer_kwargs": {}},
        "sparsity_config": {},
        "ignore": ["lm_head", r"re:.*layers\.1\.mlp\.down_proj$"],
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                        "dynamic": False, "group_size": None, "block_structure": None, "actorder": None,
                        "observer": "minmax", "observer_kwargs": {}},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                                  "dynamic": True, "group_size": None, "block_structure": None,
                                  "actorder": None, "observer": None, "observer_kwargs": {}},
            "output_activations": None}},
    }
    make("qwen3-hd128-bf16", "qwen3-hd128-fp8-channel", ct, lambda s, v: per_channel(s, v, bf16_round),
         ignored=(down1,), extra=lambda out: add_kv_scales(out, 2, 0.375, 0.1875))
    block = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
             "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]}
    make("mixtral-bf16", "mixtral-fp8-block", block, lambda s, v: per_block(s, v, 128), scale_name="weight_scale_inv")


if __name__ == "__main__":
    main()
