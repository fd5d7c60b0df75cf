# SPDX-License-Identifier: MIT
"""Golden cases of torch.nn.MultiheadAttention for tests/test_mha_golden.cpp.

Run with a Python that has PyTorch (Debian's /usr/bin/python3 has torch 1.13 and NumPy):

    /usr/bin/python3 tests/golden/make_mha_golden.py

It replaces tests/golden/mha/ next to this script with one directory per case; the files are
committed, so the C++ tests need no Python. Everything is float64 and deterministic (each case
seeds torch with a checksum of its name, so adding a case changes no other case).

Each case builds nn.MultiheadAttention(batch_first=True, dropout=0) with its options, keeps
PyTorch's initial weights, redraws the biases (PyTorch initialises in_proj_bias and out_proj.bias
to zero, which would leave their effect untested), runs forward in eval mode and then the
backward of sum(output * grad_output) for a random grad_output. A case directory holds:

  <key>.npy            every state_dict() entry under its PyTorch name (in_proj_weight.npy,
                       out_proj.weight.npy, q_proj_weight.npy, bias_k.npy, ...)
  query.npy key.npy value.npy
                       inputs, [B, L, E] / [B, S, kdim] / [B, S, vdim] ([L, E] ... unbatched);
                       all three are written even when one tensor served as several of them
  attn_mask.npy        bool [L, S] or [B, H, L, S], true = may not attend      (when used)
  attn_bias.npy        float [L, S] or [B, H, L, S], added to the scores       (when used)
  key_padding_mask.npy bool [B, S] ([S] unbatched), true = padding            (when used)
  grad_output.npy      G, the gradient of the loss with respect to the output
  output.npy           the attention output
  attn_weights.npy     [B, L, S'] averaged or [B, H, L, S'] per head; S' counts the bias_k and
                       zero-attention keys                                   (need_weights)
  grad_query.npy grad_key.npy grad_value.npy
                       the gradient with respect to each argument separately
  grad/<key>.npy       the gradient of every parameter, under the state_dict() name
  meta.txt             key=value lines: embed_dim num_heads bias add_bias_kv add_zero_attn kdim
                       vdim batch (0 = unbatched) L S need_weights average_attn_weights
                       is_causal self_attention kv_same

How PyTorch 1.13 is driven where its interface differs from headwise's:
- Causal cases: 1.13 has no is_causal argument, so the causal bool mask triu(ones(L, S), 1)
  (query i may attend keys j <= i) goes in as attn_mask; meta.txt says is_causal=1 and no
  attn_mask.npy is written for it.
- attn_mask takes one tensor: a bool mask and a float bias are passed together as the bias with
  -inf where the mask (or the causal mask) is true; a [B, H, L, S] mask goes in as the
  [B * H, L, S] tensor 1.13 expects. The files keep the separate masks, in headwise's shapes.
- Self-attention (query is key is value) and kv_same (key is value) pass one tensor several times,
  which exercises PyTorch's packed projections; its .grad is then the sum over the roles. A second
  pass with distinct copies gives the per-argument gradients headwise returns; it is checked to
  reproduce the first pass's output and parameter gradients.
- No query row ever has every key masked: PyTorch returns NaN there (headwise returns zeros,
  tested separately). Masks are redrawn until every row keeps a key; rows that keep only the
  bias_k or zero-attention key are allowed, and one case has them.
"""

import pathlib
import shutil
import zlib

import numpy as np
import torch
from torch import nn

OUT = pathlib.Path(__file__).resolve().parent / "mha"
DTYPE = torch.float64


def case(name, **options):
    defaults = dict(E=8, H=2, B=2, L=4, S=None, kdim=None, vdim=None, bias=True,
                    add_bias_kv=False, add_zero_attn=False, self_attention=False, kv_same=False,
                    need_weights=False, average=True, attn_mask=None, attn_bias=None,
                    key_padding=None, causal=False)
    unknown = set(options) - set(defaults)
    assert not unknown, f"{name}: unknown options {unknown}"
    defaults.update(options)
    defaults["name"] = name
    return defaults


# attn_mask / attn_bias: None, "2d" ([L, S]) or "4d" ([B, H, L, S]).
# key_padding: None, "random" or "first_all" (batch entry 0 has every key padded).
CASES = [
    case("self_basic", L=5, self_attention=True, need_weights=True),
    case("self_weights_per_head", self_attention=True, need_weights=True, average=False),
    case("cross_kv_same", S=6, kv_same=True, need_weights=True),
    case("cross_distinct", S=6, H=4),
    case("kdim_vdim", L=3, S=4, kdim=5, vdim=7, need_weights=True),
    case("kdim_eq_vdim_kv_same", L=3, S=5, kdim=6, vdim=6, kv_same=True, need_weights=True,
         average=False),
    case("no_bias", bias=False, self_attention=True, need_weights=True),
    case("no_bias_kdim_vdim", bias=False, L=3, S=4, kdim=5, vdim=3),
    case("bias_kv", add_bias_kv=True, self_attention=True, need_weights=True, average=False),
    case("zero_attn", add_zero_attn=True, L=3, S=4, need_weights=True),
    case("bias_kv_zero_attn_padding", B=3, L=3, S=4, add_bias_kv=True, add_zero_attn=True,
         key_padding="first_all", need_weights=True, average=False),
    case("attn_mask_2d", S=5, attn_mask="2d", need_weights=True, average=False),
    case("attn_bias_2d", L=5, self_attention=True, attn_bias="2d", need_weights=True),
    case("attn_mask_bias_padding", S=6, attn_mask="2d", attn_bias="2d", key_padding="random",
         need_weights=True, average=False),
    case("attn_mask_4d", self_attention=True, attn_mask="4d", need_weights=True, average=False),
    case("attn_bias_4d_padding", H=4, L=3, S=5, attn_bias="4d", key_padding="random",
         need_weights=True),
    case("key_padding", B=3, S=6, key_padding="random", need_weights=True, average=False),
    case("causal", L=5, self_attention=True, causal=True, need_weights=True),
    case("causal_cross_padding", S=6, causal=True, key_padding="random", need_weights=True,
         average=False),
    case("causal_bias", L=5, self_attention=True, causal=True, attn_bias="2d"),
    case("causal_bias_kv_zero_attn", self_attention=True, causal=True, add_bias_kv=True,
         add_zero_attn=True, need_weights=True, average=False),
    case("one_head", H=1, self_attention=True, need_weights=True),
    case("heads_eq_embed", H=8, L=3, S=4, need_weights=True, average=False),
    case("single_query", B=1, L=1, S=4, need_weights=True, average=False),
    case("single_token_self", B=1, L=1, self_attention=True, need_weights=True),
    case("unbatched_self_mask", B=0, self_attention=True, attn_mask="2d", need_weights=True),
    case("unbatched_cross_padding", B=0, L=3, S=5, kdim=6, vdim=6, kv_same=True,
         key_padding="random", need_weights=True, average=False),
    case("larger_self_padding_bias", E=16, H=4, B=3, L=6, self_attention=True, attn_bias="2d",
         key_padding="random", need_weights=True),
]


def save(path, tensor):
    path.parent.mkdir(parents=True, exist_ok=True)
    array = tensor.detach().cpu().numpy()
    assert array.dtype in (np.float64, np.bool_), (path, array.dtype)
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def draw_masks(c, B, H, L, S):
    """Bool attn_mask, float attn_bias and key_padding_mask as the case asks, redrawn until no
    query row has all of its keys hidden (counting the causal mask, ignoring appended keys)."""
    batch = max(B, 1)
    extra_keys = c["add_bias_kv"] or c["add_zero_attn"]
    causal = torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=1)
    for _ in range(1000):
        mask = bias = padding = None
        if c["attn_mask"] == "2d":
            mask = torch.rand(L, S, dtype=DTYPE) < 0.3
        elif c["attn_mask"] == "4d":
            mask = torch.rand(batch, H, L, S, dtype=DTYPE) < 0.3
        if c["attn_bias"] == "2d":
            bias = torch.randn(L, S, dtype=DTYPE)
        elif c["attn_bias"] == "4d":
            bias = torch.randn(batch, H, L, S, dtype=DTYPE)
        if c["key_padding"] is not None:
            padding = torch.rand(batch, S, dtype=DTYPE) < 0.3
            if c["key_padding"] == "first_all":
                padding[0, :] = True
        hidden = torch.zeros(batch, H, L, S, dtype=torch.bool)
        if mask is not None:
            hidden |= mask
        if c["causal"]:
            hidden |= causal
        if padding is not None:
            hidden |= padding.view(batch, 1, 1, S)
        if extra_keys or not hidden.all(dim=-1).any():
            if B == 0 and padding is not None:
                padding = padding[0]
            return mask, bias, padding, causal
    raise RuntimeError(f"{c['name']}: could not draw masks that leave every row a key")


def torch_attn_mask(c, B, H, L, S, mask, bias, causal):
    """The one attn_mask tensor PyTorch 1.13 takes for the case's masks."""
    hidden = mask
    if c["causal"]:
        hidden = causal if hidden is None else hidden | causal
    if bias is not None:
        combined = bias if hidden is None else bias.masked_fill(hidden, float("-inf"))
    else:
        combined = hidden
    if combined is not None and combined.dim() == 4:
        combined = combined.reshape(B * H, L, S)
    return combined


def run(module, query, key, value, padding, attn_mask, c, grad_output):
    module.zero_grad(set_to_none=True)
    output, weights = module(query, key, value, key_padding_mask=padding,
                             need_weights=c["need_weights"], attn_mask=attn_mask,
                             average_attn_weights=c["average"])
    if grad_output is None:
        grad_output = torch.randn_like(output)
    (output * grad_output).sum().backward()
    grads = {name: p.grad.detach().clone() for name, p in module.named_parameters()}
    return output.detach(), weights, grad_output, grads


def make_case(c):
    name, E, H, B, L = c["name"], c["E"], c["H"], c["B"], c["L"]
    S = L if c["self_attention"] or c["S"] is None else c["S"]
    kdim = c["kdim"] or E
    vdim = c["vdim"] or E
    if c["self_attention"]:
        assert S == L and kdim == E and vdim == E, name
    if c["kv_same"]:
        assert kdim == vdim, name
    torch.manual_seed(zlib.crc32(name.encode()))

    module = nn.MultiheadAttention(E, H, dropout=0.0, bias=c["bias"],
                                   add_bias_kv=c["add_bias_kv"], add_zero_attn=c["add_zero_attn"],
                                   kdim=c["kdim"], vdim=c["vdim"], batch_first=True, dtype=DTYPE)
    with torch.no_grad():
        for p in (module.in_proj_bias, module.out_proj.bias):
            if p is not None:
                p.copy_(0.1 * torch.randn_like(p))
    module.eval()  # dropout is 0 anyway; with parameters requiring grad no fast path is taken

    lead = (B,) if B else ()
    query = torch.randn(*lead, L, E, dtype=DTYPE)
    if c["self_attention"]:
        key = value = query
    else:
        key = torch.randn(*lead, S, kdim, dtype=DTYPE)
        value = key if c["kv_same"] else torch.randn(*lead, S, vdim, dtype=DTYPE)
    mask, bias, padding, causal = draw_masks(c, B, H, L, S)
    attn_mask = torch_attn_mask(c, max(B, 1), H, L, S, mask, bias, causal)

    # Pass 1: the tensors as the case shares them (PyTorch's packed paths).
    inputs = {id(t): t for t in (query, key, value)}
    for t in inputs.values():
        t.requires_grad_(True)
    output, weights, grad_output, grads = run(module, query, key, value, padding, attn_mask, c,
                                              None)
    assert torch.isfinite(output).all(), name

    # Pass 2: distinct copies, for the gradient with respect to each argument.
    q2, k2, v2 = (t.detach().clone().requires_grad_(True) for t in (query, key, value))
    output2, _, _, grads2 = run(module, q2, k2, v2, padding, attn_mask, c, grad_output)
    close = dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(output2, output, **close)
    for key_name in grads:
        torch.testing.assert_close(grads2[key_name], grads[key_name], **close)
    if c["self_attention"]:
        torch.testing.assert_close(q2.grad + k2.grad + v2.grad, query.grad, **close)
    elif c["kv_same"]:
        torch.testing.assert_close(q2.grad, query.grad, **close)
        torch.testing.assert_close(k2.grad + v2.grad, key.grad, **close)
    else:
        for copy, original in ((q2, query), (k2, key), (v2, value)):
            torch.testing.assert_close(copy.grad, original.grad, **close)

    directory = OUT / name
    state = module.state_dict()
    assert set(state) == set(grads), (name, set(state) ^ set(grads))
    for key_name, tensor in state.items():
        save(directory / f"{key_name}.npy", tensor)
        save(directory / "grad" / f"{key_name}.npy", grads[key_name])
    save(directory / "query.npy", query)
    save(directory / "key.npy", key)
    save(directory / "value.npy", value)
    if mask is not None:
        save(directory / "attn_mask.npy", mask)
    if bias is not None:
        save(directory / "attn_bias.npy", bias)
    if padding is not None:
        save(directory / "key_padding_mask.npy", padding)
    save(directory / "grad_output.npy", grad_output)
    save(directory / "output.npy", output)
    if c["need_weights"]:
        assert torch.isfinite(weights).all(), name
        save(directory / "attn_weights.npy", weights)
    save(directory / "grad_query.npy", q2.grad)
    save(directory / "grad_key.npy", k2.grad)
    save(directory / "grad_value.npy", v2.grad)

    meta = dict(embed_dim=E, num_heads=H, bias=c["bias"], add_bias_kv=c["add_bias_kv"],
                add_zero_attn=c["add_zero_attn"], kdim=kdim, vdim=vdim, batch=B, L=L, S=S,
                need_weights=c["need_weights"], average_attn_weights=c["average"],
                is_causal=c["causal"], self_attention=c["self_attention"],
                kv_same=c["kv_same"] or c["self_attention"])
    with open(directory / "meta.txt", "w") as f:
        for key_name, value_ in meta.items():
            f.write(f"{key_name}={int(value_)}\n")


def main():
    assert torch.__version__.startswith("1.13"), f"written for torch 1.13, found {torch.__version__}"
    torch.use_deterministic_algorithms(True)
    if OUT.exists():
        shutil.rmtree(OUT)
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "duplicate case names"
    for c in CASES:
        make_case(c)
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {len(CASES)} cases, {total} bytes, under {OUT}")


if __name__ == "__main__":
    main()
