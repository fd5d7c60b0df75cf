# SPDX-License-Identifier: MIT
"""Exports a PyTorch transformer encoder to safetensors for pytorch_interop.cpp.

    /usr/bin/python3 examples/pytorch_interop/export_encoder.py

Builds torch.nn.TransformerEncoder with two TransformerEncoderLayer(d_model=32, nhead=4,
dim_feedforward=64, dropout=0.1, activation="gelu", batch_first=True), runs it in eval mode on a
fixed input with a key padding mask, and writes next to this script:

  encoder.safetensors    the state_dict() as float32, under torch's names ("layers.0.norm1.weight")
  reference.safetensors  x [2, 7, 32], key_padding_mask [2, 7] (1.0 = padding) and torch's
                         output y [2, 7, 32]

The files are written with the standard library only (struct, json), following the format's
specification: an 8-byte little-endian header length, a JSON header, then the raw data. No
safetensors package is needed on either side.
"""

import json
import pathlib
import struct

import torch
from torch import nn

HERE = pathlib.Path(__file__).resolve().parent


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        data = struct.pack(f"<{t.numel()}f", *t.flatten().tolist())
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    torch.manual_seed(2024)
    layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.1,
                                       activation="gelu", batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    with torch.no_grad():  # torch starts biases at 0 and norms at 1: make every parameter count
        for name, p in encoder.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    encoder.eval()
    x = torch.randn(2, 7, 32)
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 5:] = True  # the second sequence has 5 tokens and 2 of padding
    with torch.no_grad():
        y = encoder(x, src_key_padding_mask=padding)
    save_safetensors(HERE / "encoder.safetensors", encoder.state_dict())
    save_safetensors(HERE / "reference.safetensors",
                     {"x": x, "key_padding_mask": padding.to(torch.float32), "y": y})


if __name__ == "__main__":
    main()
