# SPDX-License-Identifier: MIT
"""Golden cases of grouped-query attention, a chosen scale and bottom-right causal masks, for
tests/test_gqa_golden.cpp, from torch.nn.MultiheadAttention 1.13.

Run with a Python that has PyTorch (Debian's /usr/bin/python3 has torch 1.13 and NumPy):

    /usr/bin/python3 tests/golden/make_gqa_golden.py

It replaces tests/golden/gqa/ next to this script with one directory per case, in the format of
tests/golden/make_mha_golden.py (read its docstring for the files), with these differences:

- The parameters are headwise's, for num_kv_heads = Hkv key/value heads of D = E / H features:
  in_proj_weight [E + 2 Hkv D, E] and in_proj_bias [E + 2 Hkv D] (or q_proj_weight [E, E],
  k_proj_weight [Hkv D, kdim], v_proj_weight [Hkv D, vdim]), bias_k and bias_v [1, 1, Hkv D].
  grad/<key>.npy are the gradients with respect to those parameters.
- meta.txt adds num_kv_heads, causal_alignment (0 top-left, 1 bottom-right) and, when the case
  sets one, scale (a decimal number).

PyTorch 1.13 has neither GQA nor a scale argument nor bottom-right causal masks, so each is
expressed through what nn.MultiheadAttention does have:

- GQA: query head h uses key/value head h // (H / Hkv). The module is given the key/value weights
  (and biases, bias_k, bias_v) with each key/value head's D rows repeated for the H / Hkv query
  heads of its group (repeat_interleave over heads, as scaled_dot_product_attention's enable_gqa
  in later versions). The same function, so outputs and input gradients are the module's; the
  gradient of a key/value parameter is the sum of the repeated copies' gradients over its group.
- A chosen scale s: the module scales by 1 / sqrt(D), so its query projection (weight rows and
  bias) is multiplied by c = s sqrt(D): (1 / sqrt(D)) (c Q) K^T = s Q K^T. The gradient of the
  unscaled query parameters is c times the module's.
- Bottom-right causal (query i of L may attend key j of S when j <= i + S - L): the bool mask
  triu(ones(L, S), S - L + 1) goes in as attn_mask (a top-left one is triu(ones(L, S), 1)).

Both reductions are checked inside this script against autograd through
torch.nn.functional.multi_head_attention_forward called on the GQA parameters themselves.
"""

import pathlib
import shutil
import sys
import zlib

import torch
from torch import nn
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_mha_golden import save  # noqa: E402  (the .npy writer shared with the MHA cases)

OUT = pathlib.Path(__file__).resolve().parent / "gqa"
DTYPE = torch.float64


def case(name, **options):
    defaults = dict(E=8, H=4, Hkv=2, B=2, L=4, S=None, kdim=None, vdim=None, bias=True,
                    add_bias_kv=False, add_zero_attn=False, self_attention=False, kv_same=False,
                    need_weights=False, average=True, attn_mask=None, key_padding=None,
                    causal=None, scale=None)
    unknown = set(options) - set(defaults)
    assert not unknown, f"{name}: unknown options {unknown}"
    defaults.update(options)
    defaults["name"] = name
    return defaults


# causal: None, "top_left" or "bottom_right". attn_mask: None, "2d" or "4d". key_padding: None
# or "random".
CASES = [
    case("gqa_self", L=5, self_attention=True, need_weights=True, average=False),
    case("mqa_cross_kv_same", Hkv=1, S=6, kv_same=True, need_weights=True),
    case("gqa_cross_distinct", E=12, H=6, Hkv=3, S=5),
    case("gqa_kdim_vdim", L=3, S=4, kdim=5, vdim=7, need_weights=True, average=False),
    case("gqa_no_bias", bias=False, Hkv=1, self_attention=True),
    case("gqa_bias_kv_zero_attn_padding", B=3, L=3, S=4, add_bias_kv=True, add_zero_attn=True,
         key_padding="random", need_weights=True, average=False),
    case("gqa_masks_causal", self_attention=True, attn_mask="4d", key_padding="random",
         causal="top_left", need_weights=True, average=False),
    case("gqa_unbatched", B=0, L=3, S=5, kv_same=True, Hkv=1, need_weights=True),
    case("mha_scale", H=2, Hkv=2, self_attention=True, scale=0.3, need_weights=True),
    case("gqa_scale_kdim", L=3, S=5, kdim=6, vdim=3, scale=1.7),
    case("bottom_right", H=2, Hkv=2, L=3, S=6, kv_same=True, causal="bottom_right",
         need_weights=True, average=False),
    case("bottom_right_more_queries", H=2, Hkv=2, L=5, S=3, add_bias_kv=True, causal="bottom_right",
         need_weights=True, average=False),
    case("gqa_bottom_right_scale_padding", Hkv=1, L=2, S=7, kv_same=True, causal="bottom_right",
         key_padding="random", scale=0.5, need_weights=True, average=False),
]


def causal_mask(kind, L, S):
    """True where query i may not attend key j."""
    if kind is None:
        return None
    diagonal = 1 if kind == "top_left" else S - L + 1
    return torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=diagonal)


def draw_masks(c, B, L, S):
    """attn_mask and key_padding_mask, redrawn until every query row keeps a key (counting the
    causal mask; appended bias_k / zero-attention keys keep every row visible)."""
    batch = max(B, 1)
    extra_keys = c["add_bias_kv"] or c["add_zero_attn"]
    causal = causal_mask(c["causal"], L, S)
    for _ in range(1000):
        mask = padding = None
        if c["attn_mask"] == "2d":
            mask = torch.rand(L, S, dtype=DTYPE) < 0.3
        elif c["attn_mask"] == "4d":
            mask = torch.rand(batch, c["H"], L, S, dtype=DTYPE) < 0.3
        if c["key_padding"] == "random":
            padding = torch.rand(batch, S, dtype=DTYPE) < 0.3
        hidden = torch.zeros(batch, c["H"], L, S, dtype=torch.bool)
        if mask is not None:
            hidden |= mask
        if causal is not None:
            hidden |= causal
        if padding is not None:
            hidden |= padding.view(batch, 1, 1, S)
        if extra_keys or not hidden.all(dim=-1).any():
            if B == 0 and padding is not None:
                padding = padding[0]
            return mask, padding, causal
    raise RuntimeError(f"{c['name']}: could not draw masks that leave every row a key")


def torch_attn_mask(c, B, L, S, mask, causal):
    """The one bool attn_mask PyTorch 1.13 takes: the case's mask or'ed with the causal one."""
    hidden = mask
    if causal is not None:
        hidden = causal if hidden is None else hidden | causal
    if hidden is not None and hidden.dim() == 4:
        hidden = hidden.reshape(B * c["H"], L, S)
    return hidden


def gqa_parameters(c, E, kdim, vdim):
    """headwise's parameters for the case: name -> float64 tensor (weights as xavier_uniform of
    each projection, biases small and non-zero so that their gradients are exercised)."""
    D = E // c["H"]
    kv = c["Hkv"] * D
    p = {}
    if kdim == E and vdim == E:
        w = torch.empty(E + 2 * kv, E, dtype=DTYPE)
        nn.init.xavier_uniform_(w)
        p["in_proj_weight"] = w
    else:
        for name, rows, cols in (("q_proj_weight", E, E), ("k_proj_weight", kv, kdim),
                                 ("v_proj_weight", kv, vdim)):
            w = torch.empty(rows, cols, dtype=DTYPE)
            nn.init.xavier_uniform_(w)
            p[name] = w
    if c["bias"]:
        p["in_proj_bias"] = 0.1 * torch.randn(E + 2 * kv, dtype=DTYPE)
        p["out_proj.bias"] = 0.1 * torch.randn(E, dtype=DTYPE)
    if c["add_bias_kv"]:
        p["bias_k"] = torch.randn(1, 1, kv, dtype=DTYPE)
        p["bias_v"] = torch.randn(1, 1, kv, dtype=DTYPE)
    w = torch.empty(E, E, dtype=DTYPE)
    nn.init.kaiming_uniform_(w, a=5 ** 0.5)
    p["out_proj.weight"] = w
    return p


def repeat_heads(x, c, D):
    """[Hkv D, ...] -> [H D, ...]: each key/value head's D rows once per query head of its group."""
    group = c["H"] // c["Hkv"]
    rest = x.shape[1:]
    return x.reshape(c["Hkv"], D, *rest).repeat_interleave(group, dim=0).reshape(c["H"] * D, *rest)


def sum_groups(x, c, D):
    """The adjoint of repeat_heads: [H D, ...] -> [Hkv D, ...], summing each group's copies."""
    group = c["H"] // c["Hkv"]
    rest = x.shape[1:]
    return x.reshape(c["Hkv"], group, D, *rest).sum(dim=1).reshape(c["Hkv"] * D, *rest)


def query_factor(c, D):
    return 1.0 if c["scale"] is None else c["scale"] * D ** 0.5


def torch_parameters(p, c, E, D):
    """The repeated-weights nn.MultiheadAttention's parameters for headwise's `p`, as functions
    of `p` (so autograd through them gives headwise's gradients)."""
    kv = c["Hkv"] * D
    q = query_factor(c, D)
    t = {}
    if "in_proj_weight" in p:
        w = p["in_proj_weight"]
        t["in_proj_weight"] = torch.cat([q * w[:E], repeat_heads(w[E:E + kv], c, D),
                                         repeat_heads(w[E + kv:], c, D)])
    else:
        t["q_proj_weight"] = q * p["q_proj_weight"]
        t["k_proj_weight"] = repeat_heads(p["k_proj_weight"], c, D)
        t["v_proj_weight"] = repeat_heads(p["v_proj_weight"], c, D)
    if "in_proj_bias" in p:
        b = p["in_proj_bias"]
        t["in_proj_bias"] = torch.cat([q * b[:E], repeat_heads(b[E:E + kv], c, D),
                                       repeat_heads(b[E + kv:], c, D)])
        t["out_proj.bias"] = p["out_proj.bias"]
    for name in ("bias_k", "bias_v"):
        if name in p:
            t[name] = repeat_heads(p[name].reshape(kv), c, D).reshape(1, 1, E)
    t["out_proj.weight"] = p["out_proj.weight"]
    return t


def reduce_gradients(g, c, E, D):
    """Gradients of the repeated module's parameters -> gradients of headwise's parameters."""
    kv = c["Hkv"] * D
    q = query_factor(c, D)
    r = {}
    if "in_proj_weight" in g:
        w = g["in_proj_weight"]
        r["in_proj_weight"] = torch.cat([q * w[:E], sum_groups(w[E:2 * E], c, D),
                                         sum_groups(w[2 * E:], c, D)])
    else:
        r["q_proj_weight"] = q * g["q_proj_weight"]
        r["k_proj_weight"] = sum_groups(g["k_proj_weight"], c, D)
        r["v_proj_weight"] = sum_groups(g["v_proj_weight"], c, D)
    if "in_proj_bias" in g:
        b = g["in_proj_bias"]
        r["in_proj_bias"] = torch.cat([q * b[:E], sum_groups(b[E:2 * E], c, D),
                                       sum_groups(b[2 * E:], c, D)])
        r["out_proj.bias"] = g["out_proj.bias"]
    for name in ("bias_k", "bias_v"):
        if name in g:
            r[name] = sum_groups(g[name].reshape(E), c, D).reshape(1, 1, kv)
    r["out_proj.weight"] = g["out_proj.weight"]
    return r


def make_case(c):
    name, E, H, B, L = c["name"], c["E"], c["H"], c["B"], c["L"]
    assert H % c["Hkv"] == 0 and E % H == 0, name
    D = E // H
    S = L if c["self_attention"] or c["S"] is None else c["S"]
    kdim = c["kdim"] or E
    vdim = c["vdim"] or E
    torch.manual_seed(zlib.crc32(name.encode()))

    params = gqa_parameters(c, E, kdim, vdim)
    module = nn.MultiheadAttention(E, H, dropout=0.0, bias=c["bias"],
                                   add_bias_kv=c["add_bias_kv"], add_zero_attn=c["add_zero_attn"],
                                   kdim=c["kdim"], vdim=c["vdim"], batch_first=True, dtype=DTYPE)
    module_state = torch_parameters(params, c, E, D)
    assert set(module_state) == set(module.state_dict()), name
    module.load_state_dict(module_state)
    module.eval()

    lead = (B,) if B else ()
    query = torch.randn(*lead, L, E, dtype=DTYPE)
    key = torch.randn(*lead, S, kdim, dtype=DTYPE)
    value = key if c["kv_same"] else torch.randn(*lead, S, vdim, dtype=DTYPE)
    if c["self_attention"]:
        key = value = query
    mask, padding, causal = draw_masks(c, B, L, S)
    attn_mask = torch_attn_mask(c, max(B, 1), L, S, mask, causal)

    # The repeated-weights module, on distinct copies of the inputs (per-argument gradients).
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (query, key, value))
    module.zero_grad(set_to_none=True)
    output, weights = module(q, k, v, key_padding_mask=padding, need_weights=c["need_weights"],
                             attn_mask=attn_mask, average_attn_weights=c["average"])
    assert torch.isfinite(output).all(), name
    grad_output = torch.randn_like(output)
    (output * grad_output).sum().backward()
    grads = reduce_gradients({n: p.grad for n, p in module.named_parameters()}, c, E, D)

    # The same through autograd on headwise's parameters directly.
    leaves = {n: t.detach().clone().requires_grad_(True) for n, t in params.items()}
    t = torch_parameters(leaves, c, E, D)
    packed = "in_proj_weight" in t
    q2, k2, v2 = (x.detach().clone().requires_grad_(True) for x in (query, key, value))
    unbatched = B == 0

    def seq_first(x):
        return x.unsqueeze(1) if unbatched else x.transpose(0, 1)

    output2, _ = F.multi_head_attention_forward(
        seq_first(q2), seq_first(k2), seq_first(v2), E, H,
        t["in_proj_weight"] if packed else None, t.get("in_proj_bias"), t.get("bias_k"),
        t.get("bias_v"), c["add_zero_attn"], 0.0, t["out_proj.weight"], t.get("out_proj.bias"),
        training=False, key_padding_mask=None if padding is None else
        (padding.unsqueeze(0) if unbatched else padding), need_weights=False,
        attn_mask=attn_mask, use_separate_proj_weight=not packed,
        q_proj_weight=t.get("q_proj_weight"), k_proj_weight=t.get("k_proj_weight"),
        v_proj_weight=t.get("v_proj_weight"))
    output2 = output2.squeeze(1) if unbatched else output2.transpose(0, 1)
    (output2 * grad_output).sum().backward()
    close = dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(output2, output, **close)
    for n, leaf in leaves.items():
        torch.testing.assert_close(leaf.grad, grads[n], **close)
    for a, b in ((q2, q), (k2, k), (v2, v)):
        torch.testing.assert_close(a.grad, b.grad, **close)

    directory = OUT / name
    for n, tensor in params.items():
        save(directory / f"{n}.npy", tensor)
        save(directory / "grad" / f"{n}.npy", grads[n])
    save(directory / "query.npy", query)
    save(directory / "key.npy", key)
    save(directory / "value.npy", value)
    if mask is not None:
        save(directory / "attn_mask.npy", mask)
    if padding is not None:
        save(directory / "key_padding_mask.npy", padding)
    save(directory / "grad_output.npy", grad_output)
    save(directory / "output.npy", output)
    if c["need_weights"]:
        assert torch.isfinite(weights).all(), name
        save(directory / "attn_weights.npy", weights)
    save(directory / "grad_query.npy", q.grad)
    save(directory / "grad_key.npy", k.grad)
    save(directory / "grad_value.npy", v.grad)

    meta = dict(embed_dim=E, num_heads=H, num_kv_heads=c["Hkv"], bias=c["bias"],
                add_bias_kv=c["add_bias_kv"], add_zero_attn=c["add_zero_attn"], kdim=kdim,
                vdim=vdim, batch=B, L=L, S=S, need_weights=c["need_weights"],
                average_attn_weights=c["average"], is_causal=c["causal"] is not None,
                causal_alignment=c["causal"] == "bottom_right",
                self_attention=c["self_attention"], kv_same=c["kv_same"] or c["self_attention"])
    with open(directory / "meta.txt", "w") as f:
        for key_name, value_ in meta.items():
            f.write(f"{key_name}={int(value_)}\n")
        if c["scale"] is not None:
            f.write(f"scale={c['scale']!r}\n")


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
