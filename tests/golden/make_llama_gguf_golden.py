#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes tests/golden/llama_gguf/: a tiny random Llama as llama.cpp's converter would store it in
a GGUF file (quantized, Q and K rows permuted), and the same weights as a Hugging Face model
directory, for tests/models/test_llama_gguf.cpp (which needs no Python).

    ~/.cache/headwise/gguf-venv/bin/python tests/golden/make_llama_gguf_golden.py

(the venv of make_gguf_golden.py: numpy and llama.cpp's package `gguf`). The model: hidden 32,
2 layers, 4 heads of 8, 2 key/value heads, intermediate 64, vocabulary 64, rope_theta 500000
with linear rope scaling of factor 2, untied lm_head; weights drawn N(0, 0.2^2) from a fixed
seed, the RMSNorm weights around 1.

  model.gguf          GGUF v3 written by gguf.GGUFWriter (arch "llama"): llama.cpp's tensor
                      names, the Q and K weights permuted as convert_hf_to_gguf.py's
                      LlamaModel.permute does (rows of each head reshaped [2, D/2] and swapped to
                      [D/2, 2], so that rotary pairs are adjacent), and a mix of types
                      (TYPES below: Q8_0, Q4_1, F16, F32; layer 1's attn_v differs from its
                      attn_q and attn_k, as llama.cpp's Q4_K_M mixes Q4_K and Q6_K there),
                      quantized by gguf.quants.quantize.
  config.json,        the model as transformers' LlamaForCausalLM.save_pretrained writes it: its
  model.safetensors   weights are those of model.gguf dequantized by gguf.quants.dequantize and
                      un-permuted, float32, under Hugging Face's names. Loading either file must
                      give the same model.

And the rope scalings beyond linear, for tests/models/test_llama_gguf_rope.cpp: the models of
tests/golden/llama_variants/ (make_llama_variants_golden.py, whose logits are transformers')
written as llama.cpp's converter (convert_hf_to_gguf.py, conversion/base.py and llama.py) writes
them, their float16 weights kept F16 (the norms F32), Q and K permuted:

  llama3.gguf         llama_variants/llama3 (rope_type "llama3"): no rope.scaling keys, and the
                      tensor rope_freqs.weight [head_dim / 2] F32 that LlamaModel's
                      generate_extra_tensors computes from the rope parameters (rope_factors()).
  yarn.gguf           llama_variants/yarn (rope_type "yarn"): rope.scaling.type "yarn",
                      rope.scaling.factor and rope.scaling.original_context_length (the config
                      has no attention_factor, beta_fast or beta_slow, so neither has the file).
"""
import json
import math
import struct
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = Path(__file__).resolve().parent / "llama_gguf"
VARIANTS = Path(__file__).resolve().parent / "llama_variants"

HIDDEN, LAYERS, HEADS, KV_HEADS, INTER, VOCAB = 32, 2, 4, 2, 64, 64
HEAD_DIM = HIDDEN // HEADS
THETA, FACTOR, EPS, CONTEXT = 500000.0, 2.0, 1e-5, 128

# llama.cpp name -> type in model.gguf ({n} the layer).
TYPES = {
    "token_embd.weight": T.Q8_0,
    "output.weight": T.Q4_1,
    "output_norm.weight": T.F32,
    # layer 0: q, k, v of one type (kept as stored blocks in one holder)
    "blk.0.attn_q.weight": T.Q4_1,
    "blk.0.attn_k.weight": T.Q4_1,
    "blk.0.attn_v.weight": T.Q4_1,
    "blk.0.attn_output.weight": T.Q8_0,
    "blk.0.ffn_gate.weight": T.Q4_1,
    "blk.0.ffn_up.weight": T.Q8_0,
    "blk.0.ffn_down.weight": T.F16,
    # layer 1: v of another type than q and k; a float matrix
    "blk.1.attn_q.weight": T.Q8_0,
    "blk.1.attn_k.weight": T.Q8_0,
    "blk.1.attn_v.weight": T.Q4_1,
    "blk.1.attn_output.weight": T.Q4_1,
    "blk.1.ffn_gate.weight": T.Q8_0,
    "blk.1.ffn_up.weight": T.F32,
    "blk.1.ffn_down.weight": T.Q4_1,
}


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: Hugging Face's rotate-half rows -> llama.cpp's
    interleaved pairs, head by head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


def hf_weights(rng):
    """Hugging Face name -> float32 array, in the order save_pretrained writes."""
    def normal(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    def norm():
        return (1.0 + rng.standard_normal(HIDDEN) * 0.1).astype(np.float32)

    kv = KV_HEADS * HEAD_DIM
    w = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN)}
    for n in range(LAYERS):
        p = f"model.layers.{n}."
        w[p + "input_layernorm.weight"] = norm()
        w[p + "self_attn.q_proj.weight"] = normal(HIDDEN, HIDDEN)
        w[p + "self_attn.k_proj.weight"] = normal(kv, HIDDEN)
        w[p + "self_attn.v_proj.weight"] = normal(kv, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = normal(HIDDEN, HIDDEN)
        w[p + "post_attention_layernorm.weight"] = norm()
        w[p + "mlp.gate_proj.weight"] = normal(INTER, HIDDEN)
        w[p + "mlp.up_proj.weight"] = normal(INTER, HIDDEN)
        w[p + "mlp.down_proj.weight"] = normal(HIDDEN, INTER)
    w["model.norm.weight"] = norm()
    w["lm_head.weight"] = normal(VOCAB, HIDDEN)
    return w


def gguf_name(hf):
    """(llama.cpp's name, heads of its row permutation or None) of a Hugging Face name."""
    simple = {"model.embed_tokens.weight": "token_embd.weight",
              "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf in simple:
        return simple[hf], None
    _, _, n, rest = hf.split(".", 3)
    table = {"input_layernorm.weight": ("attn_norm.weight", None),
             "self_attn.q_proj.weight": ("attn_q.weight", HEADS),
             "self_attn.k_proj.weight": ("attn_k.weight", KV_HEADS),
             "self_attn.v_proj.weight": ("attn_v.weight", None),
             "self_attn.o_proj.weight": ("attn_output.weight", None),
             "post_attention_layernorm.weight": ("ffn_norm.weight", None),
             "mlp.gate_proj.weight": ("ffn_gate.weight", None),
             "mlp.up_proj.weight": ("ffn_up.weight", None),
             "mlp.down_proj.weight": ("ffn_down.weight", None)}
    name, heads = table[rest]
    return f"blk.{n}.{name}", heads


def save_safetensors(path, tensors):
    """The safetensors format (an 8-byte header length, a JSON header, the data), float32."""
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset,
                                                                                 offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """name -> array of a safetensors file of F16 and F32 tensors, in the file's order."""
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    dtypes = {"F16": "<f2", "F32": "<f4"}
    out = {}
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end],
                                  dtype=dtypes[t["dtype"]]).reshape(t["shape"]).copy()
    return out


def rope_factors(config, rope):
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors for rope_type "llama3": the
    divisor of each pair's frequency, float32 (the frequencies in float32, as its torch.arange
    in float32; the rest in Python floats)."""
    base = rope.get("rope_theta", 10000.0)
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    freqs = (1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) /
                                         np.float32(dim)))).astype(np.float32)
    factor = rope.get("factor", 8.0)
    low_freq_factor = rope.get("low_freq_factor", 1.0)
    high_freq_factor = rope.get("high_freq_factor", 4.0)
    old_context_len = rope.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < high_freq_wavelen:
            factors.append(1)
        elif wavelen > low_freq_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor -
                                                                       low_freq_factor)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def rope_variant(name):
    """llama_variants/<name> as llama.cpp's converter writes it, to OUT / <name>.gguf."""
    config = json.loads((VARIANTS / name / "config.json").read_text())
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    writer = gguf.GGUFWriter(str(OUT / f"{name}.gguf"), arch="llama")
    writer.add_name(f"tiny-llama-{name}")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
    if rope.get("rope_type") == "yarn":  # conversion/base.py's set_gguf_parameters
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(rope["factor"])
        writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        for key, add in (("attention_factor", writer.add_rope_scaling_yarn_attn_factor),
                         ("beta_fast", writer.add_rope_scaling_yarn_beta_fast),
                         ("beta_slow", writer.add_rope_scaling_yarn_beta_slow)):
            if rope.get(key) is not None:
                add(rope[key])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_rope_dimension_count(head_dim)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    if rope.get("rope_type") == "llama3":  # llama.py's generate_extra_tensors, first
        writer.add_tensor("rope_freqs.weight", rope_factors(config, rope))
    simple = {"model.embed_tokens.weight": "token_embd.weight",
              "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    table = {"input_layernorm.weight": ("attn_norm.weight", None),
             "self_attn.q_proj.weight": ("attn_q.weight", heads),
             "self_attn.k_proj.weight": ("attn_k.weight", kv_heads),
             "self_attn.v_proj.weight": ("attn_v.weight", None),
             "self_attn.o_proj.weight": ("attn_output.weight", None),
             "post_attention_layernorm.weight": ("ffn_norm.weight", None),
             "mlp.gate_proj.weight": ("ffn_gate.weight", None),
             "mlp.up_proj.weight": ("ffn_up.weight", None),
             "mlp.down_proj.weight": ("ffn_down.weight", None)}
    for hf, w in load_safetensors(VARIANTS / name / "model.safetensors").items():
        if hf in simple:
            gname, permuted = simple[hf], None
        else:
            _, _, n, rest = hf.split(".", 3)
            gname, permuted = table[rest]
            gname = f"blk.{n}.{gname}"
        stored = permute(w, permuted) if permuted else w
        # The converter's float16 output: matrices F16, vectors (the norms) F32.
        writer.add_tensor(gname, stored.astype(np.float16 if w.ndim == 2 else np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    for name in ("llama3", "yarn"):
        rope_variant(name)
    rng = np.random.default_rng(20261128)
    hf = hf_weights(rng)
    OUT.mkdir(exist_ok=True)
    writer = gguf.GGUFWriter(str(OUT / "model.gguf"), arch="llama")
    writer.add_name("tiny-llama-gguf")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(INTER)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(EPS)
    writer.add_rope_freq_base(THETA)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    writer.add_rope_scaling_factor(FACTOR)
    writer.add_vocab_size(VOCAB)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    dequantized = {}
    for name, w in hf.items():
        gname, heads = gguf_name(name)
        stored = permute(w, heads) if heads else w
        qtype = TYPES.get(gname, T.F32)
        if qtype == T.F32:
            writer.add_tensor(gname, stored)
            back = stored
        elif qtype == T.F16:
            writer.add_tensor(gname, stored.astype(np.float16))
            back = stored.astype(np.float16).astype(np.float32)
        else:
            blocks = quants.quantize(stored, qtype)
            writer.add_tensor(gname, blocks, raw_dtype=qtype)
            back = quants.dequantize(blocks, qtype).astype(np.float32)
        dequantized[name] = unpermute(back, heads) if heads else back
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    save_safetensors(OUT / "model.safetensors", dequantized)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "vocab_size": VOCAB, "max_position_embeddings": CONTEXT, "rms_norm_eps": EPS,
        "rope_theta": THETA, "rope_scaling": {"rope_type": "linear", "factor": FACTOR},
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32",
    }
    (OUT / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for f in sorted(OUT.iterdir()):
        print(f"{f.name}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()
