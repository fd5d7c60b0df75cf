# SPDX-License-Identifier: MIT
"""Golden cases of torch.nn.TransformerDecoderLayer(batch_first=True) for
tests/layers/test_transformer_decoder_layer.cpp.

    /usr/bin/python3 tests/golden/make_decoder_golden.py

Replaces tests/golden/decoder/ (committed; the C++ tests need no Python). float64, dropout 0,
training mode (torch's ordinary, differentiable path). One parameter set serves every case (the
activation and norm_first change the computation, not the parameters): torch's initial weights,
the biases and norm parameters (which torch starts at 0 and 1) redrawn so that each one matters.
Parameters, inputs, masks and G hold float32 values and are stored as float32 (exactly, in half
the bytes); torch computes in float64 and results and gradients are stored as float64.

  params/<key>.npy          every state_dict() entry under torch's name
  <case>/tgt.npy            the target [B, L, d_model]
  <case>/memory.npy         the memory [B, S, d_model], S != L
  <case>/tgt_mask.npy       bool [L, L] causal (true = may not attend), or float [L, L] with
                            -inf above the diagonal (tgt_mask_float.npy)
  <case>/memory_mask.npy    bool [L, S]                                          (when used)
  <case>/tgt_key_padding_mask.npy, memory_key_padding_mask.npy   bool [B, L], [B, S]
  <case>/grad_output.npy    G; the loss is sum(output * G)
  <case>/output.npy grad_tgt.npy grad_memory.npy grad/<key>.npy
  <case>/meta.txt           d_model nhead dim_feedforward activation norm_first layer_norm_eps

torch 1.13's TransformerDecoderLayer has no tgt_is_causal (added in 2.0): the causal mask is
passed as tgt_mask, boolean in one case and float (-inf) in the other; the C++ test also runs
the boolean case with is_causal instead of the mask.
"""

import pathlib
import shutil

import numpy as np
import torch
from torch import nn

OUT = pathlib.Path(__file__).resolve().parent / "decoder"
DTYPE = torch.float64
D_MODEL, NHEAD, DFF, B, L, S, EPS = 16, 4, 32, 2, 5, 7, 1e-5

CASES = [
    dict(name="post_norm_relu", norm_first=False, activation="relu", float_mask=False,
         memory_mask=False, seed=11),
    dict(name="pre_norm_gelu", norm_first=True, activation="gelu", float_mask=True,
         memory_mask=True, seed=12),
]


def save(path, tensor, dtype=np.float64):
    path.parent.mkdir(parents=True, exist_ok=True)
    array = tensor.detach().numpy()
    if array.dtype != np.bool_:
        exact = array.astype(dtype)
        assert np.array_equal(exact.astype(np.float64), array, equal_nan=True)
        array = exact
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def exact32(tensor):
    """The tensor rounded to float32 values (still float64): stored as float32, loaded exactly."""
    return tensor.to(torch.float32).to(DTYPE)


def make_layer(c):
    return nn.TransformerDecoderLayer(D_MODEL, NHEAD, dim_feedforward=DFF, dropout=0.0,
                                      activation=c["activation"], layer_norm_eps=EPS,
                                      batch_first=True, norm_first=c["norm_first"]).to(DTYPE)


def make_params():
    torch.manual_seed(10)
    layer = make_layer(CASES[0])
    with torch.no_grad():
        for k, p in layer.named_parameters():
            if k.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif k.startswith("norm"):
                p.copy_(1.0 + torch.randn_like(p) * 0.3)
            p.copy_(exact32(p))
    state = layer.state_dict()
    for k, v in state.items():
        save(OUT / "params" / f"{k}.npy", v, np.float32)
    return state


def make_case(c, state):
    torch.manual_seed(c["seed"])
    d = OUT / c["name"]
    layer = make_layer(c)
    layer.load_state_dict(state)
    layer.train()
    tgt = exact32(torch.randn(B, L, D_MODEL, dtype=DTYPE)).requires_grad_()
    memory = exact32(torch.randn(B, S, D_MODEL, dtype=DTYPE)).requires_grad_()
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    if c["float_mask"]:
        tgt_mask = torch.zeros(L, L, dtype=DTYPE).masked_fill(causal, float("-inf"))
    else:
        tgt_mask = causal
    tgt_padding = torch.zeros(B, L, dtype=torch.bool)
    tgt_padding[1, 3:] = True  # query 0 always sees key 0: no row loses every key
    memory_padding = torch.zeros(B, S, dtype=torch.bool)
    memory_padding[1, 4:] = True
    memory_mask = None
    if c["memory_mask"]:
        memory_mask = torch.zeros(L, S, dtype=torch.bool)
        memory_mask[0, 1] = memory_mask[2, 0] = memory_mask[4, 3] = True
    y = layer(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
              tgt_key_padding_mask=tgt_padding, memory_key_padding_mask=memory_padding)
    g = exact32(torch.randn_like(y))
    (y * g).sum().backward()
    for k, p in layer.named_parameters():
        save(d / "grad" / f"{k}.npy", p.grad)
    save(d / "tgt.npy", tgt, np.float32)
    save(d / "memory.npy", memory, np.float32)
    save(d / ("tgt_mask_float.npy" if c["float_mask"] else "tgt_mask.npy"), tgt_mask,
         np.float32)
    if memory_mask is not None:
        save(d / "memory_mask.npy", memory_mask)
    save(d / "tgt_key_padding_mask.npy", tgt_padding)
    save(d / "memory_key_padding_mask.npy", memory_padding)
    save(d / "grad_output.npy", g, np.float32)
    save(d / "output.npy", y)
    save(d / "grad_tgt.npy", tgt.grad)
    save(d / "grad_memory.npy", memory.grad)
    with open(d / "meta.txt", "w") as f:
        f.write(f"d_model={D_MODEL}\nnhead={NHEAD}\ndim_feedforward={DFF}\n"
                f"activation={c['activation']}\nnorm_first={int(c['norm_first'])}\n"
                f"layer_norm_eps={EPS}\n")


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    state = make_params()
    for c in CASES:
        make_case(c, state)


if __name__ == "__main__":
    main()
