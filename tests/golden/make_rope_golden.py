# SPDX-License-Identifier: MIT
"""Golden cases of rotary position embeddings (RoPE) for tests/ops/test_ops_rope.cpp and
tests/layers/attention/test_mha_rope.cpp, from Hugging Face transformers.

Run with the peers environment (PyTorch 2.x and transformers, see scripts/peers.sh):

    source scripts/peers.sh && headwise_peers
    "$HEADWISE_PEERS_PYTHON" tests/golden/make_rope_golden.py

It replaces tests/golden/rope/ next to this script; the files are committed, so the C++ tests
need no Python. Everything is float64 and deterministic (each case seeds torch with a checksum
of its name). Two kinds of case directory, told apart by meta.txt's `kind`:

kind=rotate: the rotation of random queries and keys.
  q.npy [B, H, L, D], k.npy [B, Hkv, L, D]   random inputs
  positions.npy [B, L]                      each token's position (float64 holding integers);
                                            left-padded cases use Hugging Face's
                                            cumsum(attention_mask) - 1, padding at 1
  q_rot.npy, k_rot.npy                      the rotated q and k
  hf_cos.npy, hf_sin.npy [B, L, D/2]        cos and sin of each pair's angle as transformers'
                                            own rotary module computes them (float32 angles,
                                            stored as float64), when it has the case's settings
  meta.txt: kind, convention (0 rotate_half, 1 interleaved), theta, factor, hf_tables (0/1)
  rotate_half: transformers.models.llama's apply_rotary_pos_emb (rotate_half); the tables of
  LlamaRotaryEmbedding (rope_type default, or linear with the factor). interleaved: GPT-J's
  apply_rotary_pos_emb (rotate_every_two); the tables of create_sinusoidal_positions (base
  10000, no scaling: hf_tables=0 for the other cases). The rotations are given cos and sin
  computed here in float64, (position / factor) * theta^(-2i / D), checked against
  transformers' float32 tables to 2e-6 before anything is written.

kind=module: transformers' LlamaAttention (attention_bias as the case says, the sdpa attention
  in float64, positions 0..L-1, causal) against headwise's MultiheadAttention with RoPE
  (rotate_half) and is_causal, on the same parameters under headwise's names:
  in_proj_weight.npy [E + 2 Hkv D, E] = [q_proj; k_proj; v_proj], in_proj_bias.npy,
  out_proj.weight.npy = o_proj.weight, out_proj.bias.npy; query.npy [B, L, E],
  grad_output.npy, output.npy, grad_query.npy, grad/<name>.npy for each parameter.
  meta.txt: kind, embed_dim, num_heads, num_kv_heads, bias, theta, factor.
"""

import pathlib
import shutil
import sys
import zlib

import numpy as np
import torch
from transformers import LlamaConfig
from transformers.models.gptj import modeling_gptj
from transformers.models.llama import modeling_llama

sys.dont_write_bytecode = True

OUT = pathlib.Path(__file__).resolve().parent / "rope"
DTYPE = torch.float64


def save(path, tensor):
    path.parent.mkdir(parents=True, exist_ok=True)
    array = tensor.detach().cpu().numpy()
    assert array.dtype in (np.float64, np.bool_), (path, array.dtype)
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def write_meta(directory, meta):
    with open(directory / "meta.txt", "w") as f:
        for key, value in meta.items():
            f.write(f"{key}={value}\n")


def tables(positions, D, theta, factor):
    """cos, sin [B, L, D/2] of (position / factor) theta^(-2i / D), in float64."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=DTYPE) / D)) / factor
    angles = positions.to(DTYPE)[..., None] * inv_freq
    return angles.cos(), angles.sin()


def llama_config(E, H, Hkv, theta, factor, bias=False):
    rope = {"rope_type": "default", "rope_theta": theta}
    if factor != 1.0:
        rope = {"rope_type": "linear", "rope_theta": theta, "factor": factor}
    config = LlamaConfig(hidden_size=E, num_attention_heads=H, num_key_value_heads=Hkv,
                         head_dim=E // H, rope_parameters=rope, attention_bias=bias,
                         max_position_embeddings=64)
    config._attn_implementation = "sdpa"
    return config


def rotate_case(name, convention, B=2, H=3, Hkv=1, L=6, D=8, theta=10000.0, factor=1.0,
                left_padding=None):
    torch.manual_seed(zlib.crc32(name.encode()))
    q = torch.randn(B, H, L, D, dtype=DTYPE)
    k = torch.randn(B, Hkv, L, D, dtype=DTYPE)
    positions = torch.arange(L).expand(B, L).clone()
    if left_padding is not None:  # Hugging Face: position_ids = cumsum(mask) - 1, padding at 1
        mask = torch.ones(B, L, dtype=torch.long)
        for b, pad in enumerate(left_padding):
            mask[b, :pad] = 0
        positions = mask.cumsum(-1) - 1
        positions.masked_fill_(mask == 0, 1)
    cos, sin = tables(positions, D, theta, factor)  # [B, L, D/2]
    hf_cos = hf_sin = None
    if convention == 0:
        full_cos, full_sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        q_rot, k_rot = modeling_llama.apply_rotary_pos_emb(q, k, full_cos, full_sin)
        rotary = modeling_llama.LlamaRotaryEmbedding(llama_config(H * D, H, Hkv, theta, factor))
        c32, s32 = rotary(q.float(), positions)
        hf_cos, hf_sin = c32[..., : D // 2].to(DTYPE), s32[..., : D // 2].to(DTYPE)
    else:
        # GPT-J rotates [B, L, heads, D] with sin, cos [B, L, D/2] (repeat_interleave'd inside).
        def rot(x):
            return modeling_gptj.apply_rotary_pos_emb(x.transpose(1, 2), sin, cos).transpose(1, 2)
        q_rot, k_rot = rot(q), rot(k)
        if theta == 10000.0 and factor == 1.0:
            sincos = modeling_gptj.create_sinusoidal_positions(64, D)[positions]
            hf_sin, hf_cos = sincos[..., : D // 2].to(DTYPE), sincos[..., D // 2:].to(DTYPE)
    if hf_cos is not None:
        assert (hf_cos - cos).abs().max() < 2e-6 and (hf_sin - sin).abs().max() < 2e-6, name
    directory = OUT / name
    for key, t in dict(q=q, k=k, positions=positions.to(DTYPE), q_rot=q_rot, k_rot=k_rot).items():
        save(directory / f"{key}.npy", t)
    if hf_cos is not None:
        save(directory / "hf_cos.npy", hf_cos)
        save(directory / "hf_sin.npy", hf_sin)
    write_meta(directory, dict(kind="rotate", convention=convention, theta=theta, factor=factor,
                               hf_tables=int(hf_cos is not None)))


def module_case(name, B=2, L=5, E=16, H=4, Hkv=2, theta=10000.0, factor=1.0, bias=True):
    torch.manual_seed(zlib.crc32(name.encode()))
    D = E // H
    attn = modeling_llama.LlamaAttention(llama_config(E, H, Hkv, theta, factor, bias), 0)
    attn = attn.to(DTYPE).eval()
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.randn_like(p) * 0.4)
    x = torch.randn(B, L, E, dtype=DTYPE, requires_grad=True)
    cos, sin = tables(torch.arange(L).expand(B, L), D, theta, factor)
    position_embeddings = (torch.cat((cos, cos), -1), torch.cat((sin, sin), -1))
    y, _ = attn(x, position_embeddings=position_embeddings, attention_mask=None)
    grad_output = torch.randn_like(y)
    (y * grad_output).sum().backward()

    # The same function written out: causal attention on the rotated projections.
    q = (x @ attn.q_proj.weight.T + (attn.q_proj.bias if bias else 0)).view(B, L, H, D)
    k = (x @ attn.k_proj.weight.T + (attn.k_proj.bias if bias else 0)).view(B, L, Hkv, D)
    v = (x @ attn.v_proj.weight.T + (attn.v_proj.bias if bias else 0)).view(B, L, Hkv, D)
    q, k = modeling_llama.apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2),
                                               *position_embeddings)
    k = k.repeat_interleave(H // Hkv, 1)
    v = v.transpose(1, 2).repeat_interleave(H // Hkv, 1)
    s = q @ k.transpose(-1, -2) / D ** 0.5
    s = s.masked_fill(torch.triu(torch.ones(L, L, dtype=torch.bool), 1), float("-inf"))
    ctx = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, L, E)
    check = ctx @ attn.o_proj.weight.T + (attn.o_proj.bias if bias else 0)
    assert (check - y).abs().max() < 1e-12, name

    directory = OUT / name
    params = {
        "in_proj_weight": torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
        "out_proj.weight": attn.o_proj.weight,
    }
    grads = {
        "in_proj_weight": torch.cat([attn.q_proj.weight.grad, attn.k_proj.weight.grad,
                                     attn.v_proj.weight.grad]),
        "out_proj.weight": attn.o_proj.weight.grad,
    }
    if bias:
        params["in_proj_bias"] = torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
        params["out_proj.bias"] = attn.o_proj.bias
        grads["in_proj_bias"] = torch.cat([attn.q_proj.bias.grad, attn.k_proj.bias.grad,
                                           attn.v_proj.bias.grad])
        grads["out_proj.bias"] = attn.o_proj.bias.grad
    for key, t in params.items():
        save(directory / f"{key}.npy", t)
        save(directory / "grad" / f"{key}.npy", grads[key])
    for key, t in dict(query=x, grad_output=grad_output, output=y, grad_query=x.grad).items():
        save(directory / f"{key}.npy", t)
    write_meta(directory, dict(kind="module", embed_dim=E, num_heads=H, num_kv_heads=Hkv,
                               bias=int(bias), theta=theta, factor=factor))


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    rotate_case("half_default", 0)
    rotate_case("half_linear_left_padded", 0, B=3, H=2, Hkv=2, L=7, D=16, theta=500000.0,
                factor=4.0, left_padding=[0, 2, 5])
    rotate_case("interleaved_default", 1, H=2, Hkv=2, L=9, D=6)
    rotate_case("interleaved_scaled", 1, B=1, H=4, Hkv=2, L=5, D=10, theta=1000.0, factor=2.0)
    module_case("llama_gqa_bias", theta=10000.0)
    module_case("llama_mha_linear", B=1, L=6, E=12, H=2, Hkv=2, theta=1000.0, factor=2.5,
                bias=False)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({total} bytes)")


if __name__ == "__main__":
    main()
