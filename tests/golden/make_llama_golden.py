# SPDX-License-Identifier: MIT
"""Golden cases of the Llama decoder (include/headwise/models/llama.hpp) for
tests/models/test_llama.cpp and the generate example's test.

Run with the peers environment (PyTorch 2.x and transformers, see scripts/peers.sh):

    source scripts/peers.sh && headwise_peers
    "$HEADWISE_PEERS_PYTHON" tests/golden/make_llama_golden.py

It replaces tests/golden/llama/ next to this script; the files are committed, so the C++ tests
need no Python. Two small random-weight LlamaForCausalLM models (hidden 64, 2 layers, 4 heads,
2 key/value heads, intermediate 128, vocabulary 128, float32), each in a directory of its own as
save_pretrained writes it (config.json, model.safetensors):

  tied/     tie_word_embeddings true (no lm_head.weight in the file), rope_theta 10000
  untied/   its own lm_head.weight, rope_theta 500000 and rope_scaling linear, factor 2

The weights are drawn N(0, 0.2^2) (initializer_range 0.2, not Llama's 0.02, so that the logits
are spread and greedy choices are far from ties), the RMSNorm weights around 1. Next to each
model's files:

  input_ids.npy         int64 [3, 7]: three prompts of lengths 7, 4 and 2, left-padded with 0
  attention_mask.npy    int64 [3, 7]: 1 = token, 0 = padding
  logits.npy            float32 [3, 7, 128]: the float32 model's logits for the batch, with
                        generate()'s positions position_ids = cumsum(mask) - 1 (padding at 1);
                        the rows of padding positions are not meaningful
  logits_f64.npy        float64 [3, 7, 128]: the same from the model converted to float64,
                        with LlamaRMSNorm and LlamaRotaryEmbedding made to compute in float64
                        (transformers computes both in float32 whatever the model's dtype: the
                        normalisation upcasts to float32, the rotary angles and inv_freq are
                        float32) and the "sdpa" attention (the eager one's softmax is float32),
                        so that the reference is float64 throughout; each prompt runs alone
                        (a fully masked padding row would give NaN that reaches the other
                        rows through 0 * NaN), its rows put at their places, padding rows 0
  greedy.txt            one line per prompt: model.generate(prompt alone, do_sample=False,
                        max_new_tokens=24) in float32, the new ids only (an end-of-sequence id
                        ends a line and is included), and checked equal to the float64 model's
                        and to the left-padded batch's

The float32 model runs transformers' "eager" attention.
"""

import json
import pathlib
import shutil
import types

import numpy as np
import torch
import transformers

HERE = pathlib.Path(__file__).resolve().parent / "llama"
PROMPTS = [[1, 17, 42, 99, 5, 63, 120], [1, 8, 77, 31], [1, 54]]
NEW_TOKENS = 24
EOS = 2


def config(tied):
    kwargs = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-5,
        initializer_range=0.2,
        tie_word_embeddings=tied,
        bos_token_id=1,
        eos_token_id=EOS,
        pad_token_id=0,
        attention_bias=False,
        mlp_bias=False,
    )
    if tied:
        kwargs["rope_theta"] = 10000.0
    else:
        kwargs["rope_theta"] = 500000.0
        kwargs["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    return transformers.LlamaConfig(**kwargs)


def padded_batch():
    L = max(len(p) for p in PROMPTS)
    ids = np.zeros((len(PROMPTS), L), dtype=np.int64)
    mask = np.zeros((len(PROMPTS), L), dtype=np.int64)
    for b, p in enumerate(PROMPTS):
        ids[b, L - len(p):] = p
        mask[b, L - len(p):] = 1
    return torch.tensor(ids), torch.tensor(mask)


def rms_norm_f64(self, x):
    variance = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


def rotary_f64(self, x, position_ids):
    config = self.config
    dim = config.hidden_size // config.num_attention_heads
    theta = config.rope_parameters["rope_theta"]
    factor = config.rope_parameters.get("factor", 1.0)
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    freqs = position_ids[..., None].double() * (inv_freq / factor)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def float64_throughout(model):
    for m in model.modules():
        name = type(m).__name__
        if name == "LlamaRMSNorm":
            m.forward = types.MethodType(rms_norm_f64, m)
        elif name == "LlamaRotaryEmbedding":
            assert m.attention_scaling == 1.0
            m.forward = types.MethodType(rotary_f64, m)


def logits_of(model, ids, mask):
    position_ids = mask.cumsum(-1) - 1
    position_ids.masked_fill_(mask == 0, 1)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits


def logits_alone(model, ids, mask):
    """The logits of each prompt run alone, at its place in the padded batch (padding rows 0)."""
    logits = torch.zeros(ids.shape + (model.config.vocab_size,), dtype=torch.float64)
    for b in range(ids.shape[0]):
        real = mask[b].bool()
        logits[b, real] = logits_of(model, ids[b:b + 1, real], mask[b:b + 1, real])[0]
    return logits


def greedy(model, ids, mask):
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                             max_new_tokens=NEW_TOKENS, eos_token_id=EOS, pad_token_id=0)
    return out[:, ids.shape[1]:]


def trimmed(row):
    ids = []
    for t in row.tolist():
        ids.append(t)
        if t == EOS:
            break
    return ids


def make(name, tied, seed):
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config(tied)).eval()
    with torch.no_grad():
        for layer_norm in [m for m in model.modules() if "RMSNorm" in type(m).__name__]:
            layer_norm.weight.copy_(1 + 0.1 * torch.randn_like(layer_norm.weight))
    model.config._attn_implementation = "eager"
    out = HERE / name
    model.save_pretrained(out, safe_serialization=True)
    for extra in out.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            extra.unlink()
    ids, mask = padded_batch()
    model64 = transformers.LlamaForCausalLM(config(tied)).eval()
    model64.load_state_dict(model.state_dict())
    model64 = model64.double()
    float64_throughout(model64)
    model64.config._attn_implementation = "sdpa"
    np.save(out / "input_ids.npy", ids.numpy())
    np.save(out / "attention_mask.npy", mask.numpy())
    np.save(out / "logits.npy", logits_of(model, ids, mask).numpy().astype(np.float32))
    np.save(out / "logits_f64.npy", logits_alone(model64, ids, mask).numpy())
    batch = greedy(model, ids, mask)
    lines = []
    for b, p in enumerate(PROMPTS):
        one = torch.tensor([p])
        alone = trimmed(greedy(model, one, torch.ones_like(one))[0])
        alone64 = trimmed(greedy(model64, one, torch.ones_like(one))[0])
        assert alone == alone64, (name, b, alone, alone64)
        assert alone == trimmed(batch[b]), (name, b, alone, batch[b])
        lines.append(" ".join(str(t) for t in alone))
    (out / "greedy.txt").write_text("\n".join(lines) + "\n")
    return lines


def main():
    if HERE.exists():
        shutil.rmtree(HERE)
    HERE.mkdir()
    for name, tied, seed in (("tied", True, 11), ("untied", False, 12)):
        for line in make(name, tied, seed):
            print(name, line)


if __name__ == "__main__":
    main()
