# SPDX-License-Identifier: MIT
"""Golden cases of the Llama block pieces RMSNorm and the SwiGLU feed-forward (LlamaMLP) for
tests/layers/test_rms_norm.cpp and tests/layers/test_swiglu.cpp.

Run with the peers environment (PyTorch 2.x and transformers, see scripts/peers.sh):

    source scripts/peers.sh && headwise_peers
    "$HEADWISE_PEERS_PYTHON" tests/golden/make_llama_blocks_golden.py

It replaces tests/golden/llama_blocks/ next to this script; the files are committed, so the C++
tests need no Python. Everything is float64 and deterministic (each case seeds torch with a
checksum of its name). The loss is sum(output * grad_output). A case directory holds:

  x.npy                 the input [2, 3, hidden]
  grad_output.npy       G, drawn N(0, 1)
  output.npy grad_x.npy
  <name>.npy            every parameter under its Hugging Face name
  grad/<name>.npy       its gradient
  meta.txt              kind (rms_norm or mlp), hidden_size, and eps (rms_norm) or
                        intermediate_size and bias (mlp)

kind=rms_norm: torch.nn.RMSNorm(hidden, eps) in float64, parameter "weight" (drawn around 1 so
  that it matters). transformers' LlamaRMSNorm computes the same formula, weight * (x /
  sqrt(mean(x^2) + eps)), but always upcasts to float32 inside (so it cannot give float64
  results); the script checks that it agrees with the float64 golden to float32 precision in
  output and every gradient, and that the formula written out in float64 agrees to rounding.
  hf_output.npy and hf_grad_x.npy keep LlamaRMSNorm's own (float32-computed) results.
kind=mlp: transformers' LlamaMLP (hidden_act "silu", mlp_bias as the case says) in float64:
  down_proj(silu(gate_proj(x)) * up_proj(x)); parameters gate_proj.weight [I, E],
  up_proj.weight [I, E], down_proj.weight [E, I] (and the .bias entries with mlp_bias), torch's
  initial values.
"""

import pathlib
import shutil
import sys
import zlib

import numpy as np
import torch
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama

sys.dont_write_bytecode = True

OUT = pathlib.Path(__file__).resolve().parent / "llama_blocks"
DTYPE = torch.float64

RMS_CASES = [
    # eps as in Llama checkpoints; x of unit scale.
    dict(name="rms_norm", hidden=16, eps=1e-6, scale=1.0),
    # x small enough that eps (mean(x^2) is about 2.5e-3 against 1e-2) changes every output.
    dict(name="rms_norm_large_eps", hidden=16, eps=1e-2, scale=0.05),
]
MLP_CASES = [
    dict(name="mlp", hidden=16, intermediate=40, bias=False),
    dict(name="mlp_bias", hidden=8, intermediate=12, bias=True),
]


def save(path, tensor):
    path.parent.mkdir(parents=True, exist_ok=True)
    array = tensor.detach().cpu().numpy()
    assert array.dtype == np.float64, (path, array.dtype)
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def rel(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def run(module, x, g):
    """Output, dx and the parameter gradients of sum(module(x) * g)."""
    module.zero_grad()
    x = x.detach().clone().requires_grad_(True)
    y = module(x)
    (y * g).sum().backward()
    return y.detach(), x.grad.detach(), {k: p.grad.detach() for k, p in module.named_parameters()}


def write_case(d, module, x, g, y, dx, grads, meta):
    for k, v in module.state_dict().items():
        save(d / f"{k}.npy", v)
    for k, v in grads.items():
        save(d / "grad" / f"{k}.npy", v)
    save(d / "x.npy", x)
    save(d / "grad_output.npy", g)
    save(d / "output.npy", y)
    save(d / "grad_x.npy", dx)
    with open(d / "meta.txt", "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in meta.items()))


def make_rms_case(c):
    torch.manual_seed(zlib.crc32(c["name"].encode()))
    d = OUT / c["name"]
    E, eps = c["hidden"], c["eps"]
    norm = torch.nn.RMSNorm(E, eps=eps).to(DTYPE)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.3 * torch.randn(E, dtype=DTYPE))
    x = c["scale"] * torch.randn(2, 3, E, dtype=DTYPE)
    g = torch.randn(2, 3, E, dtype=DTYPE)
    y, dx, grads = run(norm, x, g)

    # The formula written out in float64.
    w = norm.weight.detach()
    formula = w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    assert rel(formula, y) < 1e-14, rel(formula, y)
    # transformers' LlamaRMSNorm: the same weight, computed in float32 inside.
    hf = modeling_llama.LlamaRMSNorm(E, eps=eps).to(DTYPE)
    with torch.no_grad():
        hf.weight.copy_(w)
    hy, hdx, hgrads = run(hf, x, g)
    assert rel(hy, y) < 1e-6, rel(hy, y)
    assert rel(hdx, dx) < 1e-6, rel(hdx, dx)
    assert rel(hgrads["weight"], grads["weight"]) < 1e-6

    write_case(d, norm, x, g, y, dx, grads, dict(kind="rms_norm", hidden_size=E, eps=eps))
    save(d / "hf_output.npy", hy)
    save(d / "hf_grad_x.npy", hdx)


def make_mlp_case(c):
    torch.manual_seed(zlib.crc32(c["name"].encode()))
    d = OUT / c["name"]
    E, I = c["hidden"], c["intermediate"]
    # The attention sizes only satisfy the config's checks; the MLP does not read them.
    config = LlamaConfig(hidden_size=E, intermediate_size=I, hidden_act="silu",
                         mlp_bias=c["bias"], num_attention_heads=2, num_key_value_heads=2)
    mlp = modeling_llama.LlamaMLP(config).to(DTYPE)
    assert list(mlp.state_dict()) == [f"{p}.{k}" for p in ("gate_proj", "up_proj", "down_proj")
                                      for k in (("weight", "bias") if c["bias"] else ("weight",))]
    x = torch.randn(2, 3, E, dtype=DTYPE)
    g = torch.randn(2, 3, E, dtype=DTYPE)
    y, dx, grads = run(mlp, x, g)

    # The formula written out, silu(z) = z sigmoid(z).
    sd = mlp.state_dict()
    lin = lambda z, p: z @ sd[f"{p}.weight"].T + (sd[f"{p}.bias"] if c["bias"] else 0.0)
    gate = lin(x, "gate_proj")
    formula = lin(gate * torch.sigmoid(gate) * lin(x, "up_proj"), "down_proj")
    assert rel(formula, y) < 1e-14, rel(formula, y)

    write_case(d, mlp, x, g, y, dx, grads,
               dict(kind="mlp", hidden_size=E, intermediate_size=I, bias=int(c["bias"])))


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    for c in RMS_CASES:
        make_rms_case(c)
    for c in MLP_CASES:
        make_mlp_case(c)
    print(f"torch {torch.__version__}, wrote {OUT}")


if __name__ == "__main__":
    main()
