# SPDX-License-Identifier: MIT
"""Golden cases of the Llama configurations published today (include/headwise/models/llama.hpp)
for tests/models/test_llama_variants.cpp.

Run with the peers environment (PyTorch 2.x and transformers, see scripts/peers.sh):

    source scripts/peers.sh && headwise_peers
    "$HEADWISE_PEERS_PYTHON" tests/golden/make_llama_variants_golden.py

It replaces tests/golden/llama_variants/ next to this script; the files are committed, so the C++
tests need no Python. Tiny random-weight models (one layer, hidden 32, vocabulary 64, float16
weights: a few KB each), each in a directory of its own as save_pretrained writes it
(config.json, model.safetensors):

  llama3/    LlamaForCausalLM, rope_type "llama3" (factor 8, low_freq_factor 1, high_freq_factor
             4, original_max_position_embeddings 64): with head dimension 8 and rope_theta 10000
             the wavelengths 6.3, 63, 628, 6283 fall in all three of its bands
  dynamic/   LlamaForCausalLM, rope_type "dynamic" (factor 4, max_position_embeddings 8): the
             12-token prompt and the generation beyond it grow the base
  yarn/      LlamaForCausalLM, rope_type "yarn" (factor 4, original_max_position_embeddings 16,
             head dimension 16: the ramp crosses pairs 0 to 3), attention_factor from the factor
  head_dim/  LlamaForCausalLM with head_dim 12 != hidden_size / num_attention_heads = 8 (inner
             width 48), grouped-query (4 heads, 2 key/value heads)
  qwen2/     Qwen2ForCausalLM: q/k/v_proj with biases, o_proj without

The weights are drawn N(0, 0.2^2) (the q/k/v biases too), rounded to float16 and saved so; the
float32 model holding those rounded values gives the references. Next to each model's files:

  logits.npy      float32 [12, 64]: the float32 model's logits for PROMPT ("eager" attention)
  greedy.txt      model.generate(prompt, do_sample=False, max_new_tokens=20), the new ids (an
                  end-of-sequence id ends the line and is included)

Both from the saved model loaded afresh (see make()).
"""

import pathlib
import shutil

import numpy as np
import torch
import transformers

HERE = pathlib.Path(__file__).resolve().parent / "llama_variants"
PROMPT = [1, 17, 42, 9, 5, 63, 12, 33, 8, 50, 21, 3]
NEW_TOKENS = 20
EOS = 2


def common(**extra):
    kwargs = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5, initializer_range=0.2, tie_word_embeddings=True,
                  bos_token_id=1, eos_token_id=EOS, pad_token_id=0, rope_theta=10000.0)
    kwargs.update(extra)
    return kwargs


def variants():
    yield "llama3", transformers.LlamaConfig(**common(rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}))
    yield "dynamic", transformers.LlamaConfig(**common(
        max_position_embeddings=8, rope_scaling={"rope_type": "dynamic", "factor": 4.0}))
    yield "yarn", transformers.LlamaConfig(**common(
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        rope_scaling={"rope_type": "yarn", "factor": 4.0,
                      "original_max_position_embeddings": 16}))
    yield "head_dim", transformers.LlamaConfig(**common(head_dim=12))
    yield "qwen2", transformers.Qwen2Config(**common())


def model_class(config):
    return (transformers.Qwen2ForCausalLM if config.model_type == "qwen2"
            else transformers.LlamaForCausalLM)


def trimmed(row):
    ids = []
    for t in row.tolist():
        ids.append(t)
        if t == EOS:
            break
    return ids


def make(name, config, seed):
    torch.manual_seed(seed)
    model = model_class(config)(config).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
            p.copy_(p.half().float())  # what the float16 file holds
    model.config._attn_implementation = "eager"
    out = HERE / name
    model.half().save_pretrained(out, safe_serialization=True)
    for extra in out.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            extra.unlink()
    ids = torch.tensor([PROMPT])
    # The saved model loaded afresh for each reference: model.half() rounded its rotary inv_freq
    # buffer too, and the dynamic rotary embedding remembers the longest length it has seen.
    def fresh():
        m = model_class(config).from_pretrained(out, dtype=torch.float32).eval()
        m.config._attn_implementation = "eager"
        return m

    with torch.no_grad():
        logits = fresh()(input_ids=ids).logits[0]
        gen = fresh().generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                               do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=EOS,
                               pad_token_id=0)
    np.save(out / "logits.npy", logits.numpy().astype(np.float32))
    line = " ".join(str(t) for t in trimmed(gen[0, ids.shape[1]:]))
    (out / "greedy.txt").write_text(line + "\n")
    return line


def main():
    if HERE.exists():
        shutil.rmtree(HERE)
    HERE.mkdir()
    for seed, (name, config) in enumerate(variants(), start=21):
        print(name, make(name, config, seed))


if __name__ == "__main__":
    main()
