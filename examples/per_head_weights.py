#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the per-head weights that examples/per_head_weights.cpp loads.

Multi-head attention as the paper writes it (Vaswani et al. 2017, Section 3.2.2): every head i has
its own small projections W_i^Q, W_i^K, W_i^V (here one torch.nn.Linear(E, D) each), and the
concatenated heads go through W^O. The script saves those per-head weights, an input x and the
output the per-head model computes on it, and checks that torch.nn.MultiheadAttention with the
same weights packed gives that output too. Run with /usr/bin/python3 (torch 1.13); the small .npy
files it writes are committed, so the example runs without torch.
"""
import math
import os

import numpy as np
import torch

E, H, L = 8, 2, 5
D = E // H
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "per_head_weights")


class PerHeadAttention(torch.nn.Module):
    """head_i = softmax(Q_i K_i^T / sqrt(D)) V_i with Q_i = x W_i^Q^T + b_i^Q, one Linear per head."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.ModuleList(torch.nn.Linear(E, D) for _ in range(H))
        self.k = torch.nn.ModuleList(torch.nn.Linear(E, D) for _ in range(H))
        self.v = torch.nn.ModuleList(torch.nn.Linear(E, D) for _ in range(H))
        self.out = torch.nn.Linear(E, E)

    def forward(self, x):  # x [L, E]
        heads = []
        for i in range(H):
            q, k, v = self.q[i](x), self.k[i](x), self.v[i](x)  # [L, D]
            p = torch.softmax(q @ k.T / math.sqrt(D), dim=-1)    # [L, L]
            heads.append(p @ v)                                  # [L, D]
        return self.out(torch.cat(heads, dim=-1))                # [L, E]


def main():
    torch.manual_seed(0)
    model = PerHeadAttention().double()
    x = torch.randn(L, E, dtype=torch.float64)
    with torch.no_grad():
        y = model(x)

        # The same weights packed into torch's MultiheadAttention give the same output.
        mha = torch.nn.MultiheadAttention(E, H, batch_first=True).double()
        mha.in_proj_weight.copy_(torch.cat([m.weight for proj in (model.q, model.k, model.v)
                                            for m in proj]))
        mha.in_proj_bias.copy_(torch.cat([m.bias for proj in (model.q, model.k, model.v)
                                          for m in proj]))
        mha.out_proj.weight.copy_(model.out.weight)
        mha.out_proj.bias.copy_(model.out.bias)
        y_mha, _ = mha(x[None], x[None], x[None], need_weights=False)
        assert torch.allclose(y, y_mha[0], rtol=1e-12, atol=1e-12)

    os.makedirs(OUT, exist_ok=True)
    def save(name, t):
        np.save(os.path.join(OUT, name + ".npy"), t.detach().numpy().astype(np.float32))
    for i in range(H):
        for proj, name in ((model.q, "q"), (model.k, "k"), (model.v, "v")):
            save(f"head{i}.{name}.weight", proj[i].weight)  # [D, E]
            save(f"head{i}.{name}.bias", proj[i].bias)      # [D]
    save("out.weight", model.out.weight)  # [E, E]
    save("out.bias", model.out.bias)      # [E]
    save("x", x)                          # [L, E]
    save("y", y)                          # [L, E]
    print(f"wrote {len(os.listdir(OUT))} files to {OUT}")


if __name__ == "__main__":
    main()
