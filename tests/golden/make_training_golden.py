# SPDX-License-Identifier: MIT
"""Golden cases of torch 1.13's layers, losses, optimisers and clip_grad_norm_ for the training
tests (tests/test_layers_golden.cpp, tests/test_losses.cpp, tests/test_optim.cpp).

Run with a Python that has PyTorch (Debian's /usr/bin/python3 has torch 1.13 and NumPy):

    /usr/bin/python3 tests/golden/make_training_golden.py

It replaces tests/golden/training/ next to this script with one directory per case; the files are
committed, so the C++ tests need no Python. Everything is float64 and deterministic (each case
seeds torch with a checksum of its name). A case directory holds meta.txt (key=value lines) and
float64 .npy files; integer indices and targets are stored as float64 too (npy of the tests reads
floats), holding exact small integers.

  layers     x.npy, grad_output.npy, output.npy, grad_x.npy, <param>.npy, grad/<param>.npy
  losses     input.npy, target.npy, loss.npy (rank 0), grad_input.npy (gradient of the loss)
  optimisers <param>.npy (initial values), step<k>.grad.<param>.npy (the gradient fed at step k,
             k = 1..steps), step<k>.<param>.npy (the parameter after step k), and the state after
             the last step: state.<buffer>.<param>.npy (momentum_buffer, exp_avg, exp_avg_sq,
             max_exp_avg_sq)
  clipping   grad.<i>.npy (before), clipped.<i>.npy (after), total_norm.npy (rank 0)
"""

import math
import pathlib
import shutil
import zlib

import numpy as np
import torch
from torch import nn

OUT = pathlib.Path(__file__).resolve().parent / "training"
DTYPE = torch.float64


def save(path, tensor):
    path.parent.mkdir(parents=True, exist_ok=True)
    array = tensor.detach().to(DTYPE).numpy() if isinstance(tensor, torch.Tensor) else tensor
    np.save(path, np.ascontiguousarray(np.asarray(array, dtype=np.float64)), allow_pickle=False)


def new_case(name, **meta):
    torch.manual_seed(zlib.crc32(name.encode()))
    d = OUT / name
    d.mkdir(parents=True)
    with open(d / "meta.txt", "w") as f:
        for k, v in meta.items():
            f.write(f"{k}={v}\n")
    return d


def layer_case(name, module, x, meta, x_requires_grad=True):
    d = new_case(name, **meta)
    module = module.to(DTYPE)
    with torch.no_grad():  # non-trivial affine parameters (torch starts them at 1 and 0)
        for _, p in module.named_parameters():
            p.copy_(torch.randn_like(p))
    if x_requires_grad:
        x = x.clone().requires_grad_(True)
    y = module(x)
    g = torch.randn_like(y)
    (y * g).sum().backward()
    save(d / "x.npy", x)
    save(d / "output.npy", y)
    save(d / "grad_output.npy", g)
    if x_requires_grad:
        save(d / "grad_x.npy", x.grad)
    for k, p in module.named_parameters():
        save(d / f"{k}.npy", p)
        save(d / "grad" / f"{k}.npy", p.grad)


def layers():
    torch.manual_seed(1)
    layer_case("layer_norm_affine", nn.LayerNorm(6, eps=1e-5), torch.randn(2, 3, 6, dtype=DTYPE) * 3 + 1,
               dict(kind="layer_norm", features=6, eps=1e-5, affine=1))
    layer_case("layer_norm_plain", nn.LayerNorm(5, eps=1e-3, elementwise_affine=False),
               torch.randn(4, 5, dtype=DTYPE), dict(kind="layer_norm", features=5, eps=1e-3, affine=0))
    x = torch.randn(3, 7, dtype=DTYPE) * 2
    x[0, 0] = 0.0  # torch's subgradient at 0 is 0
    layer_case("relu", nn.ReLU(), x, dict(kind="relu"))
    layer_case("gelu_erf", nn.GELU(), torch.randn(3, 7, dtype=DTYPE) * 3, dict(kind="gelu", tanh=0))
    layer_case("gelu_tanh", nn.GELU(approximate="tanh"), torch.randn(3, 7, dtype=DTYPE) * 3,
               dict(kind="gelu", tanh=1))
    emb = nn.Embedding(7, 4, padding_idx=2)
    idx = torch.tensor([[1, 2, 6, 1, 0], [2, 3, 3, 5, 4]])
    layer_case("embedding_padding", emb, idx, dict(kind="embedding", num=7, dim=4, padding_idx=2),
               x_requires_grad=False)


def loss_case(name, fn, x, target, meta):
    d = new_case(name, **meta)
    x = x.clone().requires_grad_(True)
    loss = fn(x, target)
    loss.backward()
    save(d / "input.npy", x)
    save(d / "target.npy", target.to(DTYPE))
    save(d / "loss.npy", loss)
    save(d / "grad_input.npy", x.grad)


def losses():
    torch.manual_seed(2)
    logits = torch.randn(7, 5, dtype=DTYPE) * 2
    target = torch.tensor([0, 4, -100, 2, 2, 1, -100])
    for smoothing in (0.0, 0.1):
        for reduction in ("mean", "sum"):
            name = f"cross_entropy_{reduction}_ls{int(smoothing * 10)}"
            loss_case(name, lambda x, t: nn.functional.cross_entropy(
                x, t, ignore_index=-100, label_smoothing=smoothing, reduction=reduction),
                logits, target, dict(kind="cross_entropy", ignore_index=-100,
                                     label_smoothing=smoothing, reduction=reduction))
    target7 = torch.tensor([3, 0, 7, 1])  # ignore_index 7 is also a valid-looking index
    loss_case("cross_entropy_ignore7", lambda x, t: nn.functional.cross_entropy(
        x, t, ignore_index=7, label_smoothing=0.2), torch.randn(4, 8, dtype=DTYPE), target7,
        dict(kind="cross_entropy", ignore_index=7, label_smoothing=0.2, reduction="mean"))
    a, b = torch.randn(3, 4, dtype=DTYPE), torch.randn(3, 4, dtype=DTYPE)
    for reduction in ("mean", "sum"):
        loss_case(f"mse_{reduction}", lambda x, t: nn.functional.mse_loss(x, t, reduction=reduction),
                  a, b, dict(kind="mse", reduction=reduction))


STEPS = 6


def optim_case(name, make, meta):
    d = new_case(name, steps=STEPS, **meta)
    params = {"weight": torch.randn(3, 4, dtype=DTYPE), "bias": torch.randn(4, dtype=DTYPE)}
    for k, p in params.items():
        p.requires_grad_(True)
        save(d / f"{k}.npy", p)
    opt = make(list(params.values()))
    for step in range(1, STEPS + 1):
        for k, p in params.items():
            p.grad = torch.randn_like(p) * (0.1 if step % 2 else 2.0)
            save(d / f"step{step}.grad.{k}.npy", p.grad)
        opt.step()
        for k, p in params.items():
            save(d / f"step{step}.{k}.npy", p)
    for k, p in params.items():
        for buf, value in opt.state[p].items():
            if buf != "step" and value is not None:
                save(d / f"state.{buf}.{k}.npy", value)


def optimisers():
    optim_case("sgd_plain", lambda p: torch.optim.SGD(p, lr=0.1),
               dict(kind="sgd", lr=0.1, momentum=0, dampening=0, weight_decay=0, nesterov=0))
    optim_case("sgd_momentum", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1,
                                                         weight_decay=0.01),
               dict(kind="sgd", lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01, nesterov=0))
    optim_case("sgd_nesterov", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True,
                                                         weight_decay=0.001),
               dict(kind="sgd", lr=0.05, momentum=0.8, dampening=0, weight_decay=0.001, nesterov=1))
    optim_case("adam", lambda p: torch.optim.Adam(p, lr=0.01),
               dict(kind="adam", lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0,
                    amsgrad=0))
    optim_case("adam_weight_decay", lambda p: torch.optim.Adam(p, lr=0.02, betas=(0.8, 0.99),
                                                                eps=1e-6, weight_decay=0.1),
               dict(kind="adam", lr=0.02, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1,
                    amsgrad=0))
    optim_case("adam_amsgrad", lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True),
               dict(kind="adam", lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0,
                    amsgrad=1))
    optim_case("adamw", lambda p: torch.optim.AdamW(p, lr=0.01),
               dict(kind="adamw", lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
                    amsgrad=0))
    optim_case("adamw_strong_decay", lambda p: torch.optim.AdamW(p, lr=0.03, betas=(0.5, 0.9),
                                                                  eps=1e-5, weight_decay=0.5,
                                                                  amsgrad=True),
               dict(kind="adamw", lr=0.03, beta1=0.5, beta2=0.9, eps=1e-5, weight_decay=0.5,
                    amsgrad=1))


def clipping():
    for name, max_norm, norm_type in (("clip_l2", 1.0, 2.0), ("clip_inf", 0.5, math.inf),
                                      ("clip_l2_no_op", 100.0, 2.0)):
        d = new_case(name, max_norm=max_norm, norm_type=norm_type)
        ps = [torch.zeros(3, 4, dtype=DTYPE, requires_grad=True),
              torch.zeros(5, dtype=DTYPE, requires_grad=True)]
        for i, p in enumerate(ps):
            p.grad = torch.randn_like(p)
            save(d / f"grad.{i}.npy", p.grad)
        total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=norm_type)
        save(d / "total_norm.npy", total)
        for i, p in enumerate(ps):
            save(d / f"clipped.{i}.npy", p.grad)


def main():
    torch.set_default_dtype(DTYPE)
    if OUT.exists():
        shutil.rmtree(OUT)
    layers()
    losses()
    optimisers()
    clipping()


if __name__ == "__main__":
    main()
