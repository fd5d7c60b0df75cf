# SPDX-License-Identifier: MIT
"""Golden cases of torch.nn.TransformerEncoderLayer(batch_first=True) for
tests/test_transformer_encoder_layer.cpp.

    /usr/bin/python3 tests/golden/make_encoder_golden.py

Replaces tests/golden/encoder/ with one directory per case (committed; the C++ tests need no
Python). float64, dropout 0, training mode (so torch takes its ordinary, differentiable path).
torch's initial weights are kept, the biases and norm parameters (which torch starts at 0 and 1)
redrawn so that each one matters. A case directory holds:

  <key>.npy           every state_dict() entry under torch's name (self_attn.in_proj_weight, ...)
  x.npy               the input [B, L, d_model] ([L, d_model] when unbatched)
  attn_mask.npy       bool [L, L], true = may not attend                       (when used)
  key_padding_mask.npy bool [B, L], true = padding                             (when used)
  grad_output.npy     G; the loss is sum(output * G)
  output.npy grad_x.npy grad/<key>.npy
  meta.txt            d_model nhead dim_feedforward activation norm_first layer_norm_eps masks
"""

import pathlib
import shutil
import zlib

import numpy as np
import torch
from torch import nn

OUT = pathlib.Path(__file__).resolve().parent / "encoder"
DTYPE = torch.float64

CASES = [
    dict(name="post_norm_relu", norm_first=False, activation="relu", masks=False, batched=True),
    dict(name="pre_norm_relu", norm_first=True, activation="relu", masks=False, batched=True),
    dict(name="post_norm_gelu_masks", norm_first=False, activation="gelu", masks=True,
         batched=True),
    dict(name="pre_norm_gelu_masks", norm_first=True, activation="gelu", masks=True,
         batched=True),
    dict(name="pre_norm_gelu_unbatched", norm_first=True, activation="gelu", masks=False,
         batched=False),
]


def save(path, tensor):
    path.parent.mkdir(parents=True, exist_ok=True)
    array = tensor.detach().numpy()
    if array.dtype != np.bool_:
        array = array.astype(np.float64)
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def make_case(c, d_model=8, nhead=2, dff=12, B=2, L=5, eps=1e-5):
    torch.manual_seed(zlib.crc32(c["name"].encode()))
    d = OUT / c["name"]
    layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward=dff, dropout=0.0,
                                       activation=c["activation"], layer_norm_eps=eps,
                                       batch_first=True, norm_first=c["norm_first"]).to(DTYPE)
    with torch.no_grad():
        for k, p in layer.named_parameters():
            if k.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.5)
            elif k.startswith("norm"):
                p.copy_(1.0 + torch.randn_like(p) * 0.3)
    layer.train()
    shape = (B, L, d_model) if c["batched"] else (L, d_model)
    x = torch.randn(*shape, dtype=DTYPE, requires_grad=True)
    attn_mask = padding = None
    if c["masks"]:
        attn_mask = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)  # causal
        attn_mask[3, 1] = True
        padding = torch.zeros(B, L, dtype=torch.bool)
        padding[1, 3:] = True  # no row loses every key: key 0 is always visible
    y = layer(x, src_mask=attn_mask, src_key_padding_mask=padding)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    for k, v in layer.state_dict().items():
        save(d / f"{k}.npy", v)
    for k, p in layer.named_parameters():
        save(d / "grad" / f"{k}.npy", p.grad)
    save(d / "x.npy", x)
    save(d / "grad_output.npy", g)
    save(d / "output.npy", y)
    save(d / "grad_x.npy", x.grad)
    if attn_mask is not None:
        save(d / "attn_mask.npy", attn_mask)
        save(d / "key_padding_mask.npy", padding)
    with open(d / "meta.txt", "w") as f:
        f.write(f"d_model={d_model}\nnhead={nhead}\ndim_feedforward={dff}\n"
                f"activation={c['activation']}\nnorm_first={int(c['norm_first'])}\n"
                f"layer_norm_eps={eps}\nmasks={int(c['masks'])}\n")


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    for c in CASES:
        make_case(c)


if __name__ == "__main__":
    main()
