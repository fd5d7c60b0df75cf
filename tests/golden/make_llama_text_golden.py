#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes tests/golden/llama_text/: a tiny random Llama whose vocabulary is the committed tiny
tokenizer's (tests/golden/bpe: 1760 tokens, SmolLM2's pre-tokenizer, ChatML specials), as a
Hugging Face model directory with a sharded checkpoint and as a GGUF file with the tokenizer in
its metadata, for the generate and perplexity programs' checks and the text tests (which need no
Python).

    ~/.cache/headwise/gguf-venv/bin/python tests/golden/make_llama_text_golden.py

(the venv of make_gguf_golden.py: numpy and llama.cpp's package `gguf`). The model: hidden 32,
2 layers, 4 heads of 8, 2 key/value heads, intermediate 64, 256 positions, tied embeddings;
weights drawn N(0, 0.5^2) from a fixed seed (the RMSNorm weights around 1), rounded to float16.

  hf/config.json, generation_config.json
  hf/model-0000{1,2}-of-00002.safetensors, model.safetensors.index.json
                      the weights in float16, split in two shards as save_pretrained shards them
  hf/tokenizer.json   tests/golden/bpe/tokenizer.json
  hf/tokenizer_config.json
                      GPT2Tokenizer (no BOS added), bos <|im_start|>, eos <|im_end|>, SmolLM2's
                      chat template (tests/golden/chat_template/smollm2.jinja)
  model.gguf          the same weights (float16; attn_q and attn_k rows permuted as
                      convert_hf_to_gguf.py does), llama.cpp's names, the tokenizer's metadata
                      from tests/golden/bpe/tiny.gguf and the chat template
"""
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import gguf

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "llama_text"

HIDDEN, LAYERS, HEADS, KV_HEADS, INTER = 32, 2, 4, 2, 64
HEAD_DIM = HIDDEN // HEADS
THETA, EPS, CONTEXT = 10000.0, 1e-5, 256


def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half rows -> interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


def hf_weights(rng, vocab):
    def normal(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(np.float16)

    def norm():
        return (1.0 + rng.standard_normal(HIDDEN) * 0.1).astype(np.float16)

    kv = KV_HEADS * HEAD_DIM
    w = {"model.embed_tokens.weight": normal(vocab, HIDDEN)}
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
    return w


def gguf_name(hf):
    simple = {"model.embed_tokens.weight": "token_embd.weight",
              "model.norm.weight": "output_norm.weight"}
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
    """The safetensors format (an 8-byte header length, a JSON header, the data), float16."""
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f2").tobytes()
        header[name] = {"dtype": "F16", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
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
    return offset


def main():
    tokenizer = json.loads((ROOT / "bpe" / "tokenizer.json").read_text())
    vocab = len(tokenizer["model"]["vocab"]) + sum(
        1 for a in tokenizer["added_tokens"] if a["content"] not in tokenizer["model"]["vocab"])
    template = (ROOT / "chat_template" / "smollm2.jinja").read_text()
    rng = np.random.default_rng(20261129)
    hf = hf_weights(rng, vocab)
    hf_dir = OUT / "hf"
    hf_dir.mkdir(parents=True, exist_ok=True)

    # Two shards: the embedding and layer 0 in the first, the rest in the second.
    names = list(hf)
    cut = names.index("model.layers.1.input_layernorm.weight")
    shards = [names[:cut], names[cut:]]
    weight_map, total = {}, 0
    for i, part in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += save_safetensors(hf_dir / file, {n: hf[n] for n in part})
        weight_map.update({n: file for n in part})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (hf_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": HIDDEN, "intermediate_size": INTER, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "vocab_size": vocab, "max_position_embeddings": CONTEXT, "rms_norm_eps": EPS,
        "rope_theta": THETA, "attention_bias": False, "mlp_bias": False,
        "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float16",
    }
    (hf_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (hf_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 1, "eos_token_id": 2}, indent=2) + "\n")
    shutil.copyfile(ROOT / "bpe" / "tokenizer.json", hf_dir / "tokenizer.json")
    tokenizer_config = {
        "tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False,
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>",
        "pad_token": "<|im_end|>", "model_max_length": CONTEXT, "chat_template": template,
    }
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")

    meta = gguf.GGUFReader(str(ROOT / "bpe" / "tiny.gguf"))
    writer = gguf.GGUFWriter(str(OUT / "model.gguf"), arch="llama")
    writer.add_name("tiny-llama-text")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(INTER)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(EPS)
    writer.add_rope_freq_base(THETA)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model(meta.fields["tokenizer.ggml.model"].contents())
    writer.add_tokenizer_pre(meta.fields["tokenizer.ggml.pre"].contents())
    writer.add_token_list(meta.fields["tokenizer.ggml.tokens"].contents())
    writer.add_token_merges(meta.fields["tokenizer.ggml.merges"].contents())
    writer.add_token_types(meta.fields["tokenizer.ggml.token_type"].contents())
    writer.add_bos_token_id(1)   # <|im_start|>, as tokenizer_config.json's bos_token
    writer.add_eos_token_id(2)   # <|im_end|>
    writer.add_add_bos_token(False)
    writer.add_chat_template(template)
    for name, w in hf.items():
        gname, heads = gguf_name(name)
        stored = permute(w, heads) if heads else w
        writer.add_tensor(gname, stored.astype(np.float32) if w.ndim == 1 else stored)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for f in sorted(OUT.rglob("*")):
        if f.is_file():
            print(f"{f.relative_to(OUT)}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()
