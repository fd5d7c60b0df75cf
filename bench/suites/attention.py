# SPDX-License-Identifier: MIT
"""MultiheadAttention (bench_peers) against PyTorch 2.x and ONNX Runtime on the same weights and
inputs, float32, fused in-projection, self-attention, batch_first. Engines: headwise (a release
build: OpenBLAS's threads on more than one thread), headwise-omp (--omp-build: OpenMP threads,
the BLAS at one thread per call), headwise-plain (--plain-program: bench/consumer built as a
new user builds it), torch-mha (nn.MultiheadAttention, its fast path in inference), torch-sdpa
(a layer on F.scaled_dot_product_attention) and ort (nn.MultiheadAttention exported by
torch.onnx, opset 17, ORT_ENABLE_ALL; inference only). Cases: infer and train (forward +
backward of sum(y * dy)) at the default shapes; long (1, L, 512, 8) for L in --long, causal and
not, with the extra peak memory of a call; decode: one token onto a KV cache of 128, 2048 and
8192 tokens. Every engine's outputs (y, and dx in training) are compared with headwise's."""

import os

from common import Case, median, print_table, serve
from engines import HeadwiseEngine, PythonEngine

PACKAGES = ("torch", "onnxruntime", "onnx", "numpy")
SHAPES = ["8,128,512,8", "1,512,768,12", "32,64,256,4", "4,1024,512,8", "1,1,512,8"]
CACHES = (128, 2048, 8192)
PEERS = ("torch-mha", "torch-sdpa", "ort")
TRAINERS = ("torch-mha", "torch-sdpa")


def add_arguments(ap):
    """The suite's options."""
    ap.add_argument("--build", default="build/bench/peers", help="a release build of headwise")
    ap.add_argument("--omp-build", help="an OpenMP build: engine headwise-omp")
    ap.add_argument("--plain-program", help="bench/consumer's bench_peers: headwise-plain")
    ap.add_argument("--engines", nargs="+", default=["headwise", "torch-mha", "torch-sdpa",
                                                     "ort"])
    ap.add_argument("--shapes", nargs="*", default=SHAPES,
                    help="B,L,E,H of the default shapes (none: only the long and decode cases)")
    ap.add_argument("--long", type=int, nargs="*", default=[4096])
    ap.add_argument("--long-rounds", type=int, default=3)
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--work", default="/tmp/headwise-bench/attention")


def engines(args):
    """The engine plug-ins asked for."""
    programs = {"headwise": os.path.join(args.build, "bench", "bench_peers"),
                "headwise-omp": args.omp_build and os.path.join(args.omp_build, "bench",
                                                                "bench_peers"),
                "headwise-plain": args.plain_program}
    made = []
    for name in args.engines:
        if name in programs:
            made.append(HeadwiseEngine(name, programs[name], openmp=name == "headwise-omp"))
        elif name in PEERS:
            made.append(PythonEngine(name, "attention"))
        else:
            raise SystemExit("attention: unknown engine %r" % name)
    return made


def _case(args, cid, kind, shape, causal=0, cache=0, peers=PEERS):
    """A case for the headwise builds and the peers among `peers` that were asked for."""
    B, L, E, H = shape
    engines = [e for e in args.engines if e.startswith("headwise") or e in peers]
    d = os.path.join(args.work, cid)

    def prepare():
        make_inputs(d, kind, shape, causal, cache, "ort" in engines)
        return [kind, d, B, L, E, H, causal, cache, d + "/out-{worker}"]

    return {"id": cid, "prepare": prepare, "engines": engines,
            "meta": {"kind": kind, "shape": list(shape), "causal": causal, "cache": cache}}


def phases(args):
    """Default shapes, decode steps, then each long length causal and not."""
    main = []
    for text in args.shapes:
        shape = tuple(int(v) for v in text.split(","))
        tag = "-".join(map(str, shape))
        main += [_case(args, "infer-" + tag, "infer", shape),
                 _case(args, "train-" + tag, "train", shape, peers=TRAINERS)]
    out = [{"name": "default shapes", "rounds": args.rounds, "cases": main}]
    if not args.no_decode:
        out.append({"name": "decode", "rounds": args.rounds, "cases": [
            _case(args, "decode-%d" % c, "decode", (1, 1, 512, 8), cache=c,
                  peers=("torch-sdpa",)) for c in CACHES]})
    for L in args.long:
        for causal in (0, 1):
            tag = "%d-%s" % (L, "causal" if causal else "none")
            out.append({"name": "long " + tag, "rounds": args.long_rounds, "peak": True,
                        "cases": [_case(args, "long-infer-" + tag, "infer", (1, L, 512, 8),
                                        causal),
                                  _case(args, "long-train-" + tag, "train", (1, L, 512, 8),
                                        causal, peers=TRAINERS)]})
    return out


def make_inputs(d, kind, shape, causal, cache, export_onnx):
    """Weights (torch's initialisation, seeded, non-zero biases), inputs, the ONNX model."""
    import numpy as np
    import torch

    B, L, E, H = shape
    os.makedirs(os.path.join(d, "weights"), exist_ok=True)
    torch.manual_seed(B * 1000003 + L * 1009 + E * 7 + H)
    m = torch.nn.MultiheadAttention(E, H, batch_first=True)
    with torch.no_grad():
        m.in_proj_bias.normal_(0, 0.1)
        m.out_proj.bias.normal_(0, 0.1)
    for k, v in m.state_dict().items():
        np.save(os.path.join(d, "weights", k + ".npy"), v.numpy())
    g = torch.Generator().manual_seed(7)
    rows = (1, cache) if kind == "decode" else (B, L)
    np.save(os.path.join(d, "prefix.npy" if kind == "decode" else "x.npy"),
            torch.randn(*rows, E, generator=g).numpy())
    if kind == "decode":
        np.save(os.path.join(d, "x.npy"), torch.randn(1, 1, E, generator=g).numpy())
    else:
        np.save(os.path.join(d, "dy.npy"), torch.randn(B, L, E, generator=g).numpy())
    if export_onnx:
        _export(m, os.path.join(d, "mha.onnx"), shape, causal)


def _export(m, path, shape, causal):
    """nn.MultiheadAttention through torch.onnx (TorchScript exporter, its composite path)."""
    import torch

    B, L, E, _ = shape
    mask = torch.nn.Transformer.generate_square_subsequent_mask(L) if causal else None

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x, x, x, need_weights=False, attn_mask=mask)[0]

    torch.onnx.export(Wrap().eval(), (torch.randn(B, L, E),), path, input_names=["x"],
                      output_names=["y"], opset_version=17, dynamo=False)


def check(case, workers, args):
    """max |y - y_headwise| (and |dx - dx_headwise|) of every worker's warm-up outputs."""
    import numpy as np

    d = os.path.join(args.work, case["id"])
    ref = {k: np.load(os.path.join(d, "out-headwise-%d.%s.npy" % (args.threads[0], k)))
           for k in (("y", "dx") if case["meta"]["kind"] == "train" else ("y",))}
    diffs = {}
    for w in workers:
        out = os.path.join(d, "out-%s-%d" % (w.engine, w.threads))
        diffs[w.key] = {k: float(np.abs(np.load("%s.%s.npy" % (out, k)).reshape(v.shape) - v)
                                 .max()) for k, v in ref.items()}
    return diffs


# ---- the Python engines' workers ---------------------------------------------------------------


def _sdpa_layer(w, heads):
    """A layer on F.scaled_dot_product_attention with nn.MultiheadAttention's weights."""
    import torch
    import torch.nn.functional as F

    class SdpaLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w_in = torch.nn.Parameter(w["in_proj_weight"].clone())
            self.b_in = torch.nn.Parameter(w["in_proj_bias"].clone())
            self.w_out = torch.nn.Parameter(w["out_proj.weight"].clone())
            self.b_out = torch.nn.Parameter(w["out_proj.bias"].clone())

        def forward(self, x, causal):
            B, L, E = x.shape
            qkv = F.linear(x, self.w_in, self.b_in).view(B, L, 3, heads, E // heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return F.linear(o.transpose(1, 2).reshape(B, L, E), self.w_out, self.b_out)

    return SdpaLayer()


def _ort_call(d, threads, x, st):
    """An ONNX Runtime session on the case's exported model."""
    import onnxruntime as ort
    import torch

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if os.environ.get("HEADWISE_BENCH_POOLS", "sleep") == "sleep":
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(os.path.join(d, "mha.onnx"), so,
                                providers=["CPUExecutionProvider"])
    feeds = {"x": x.numpy()}

    def call():
        st["y"] = torch.from_numpy(sess.run(None, feeds)[0])

    return call


def _decode_call(w, d, E, H, cache, x, st):
    """torch-sdpa's single-token step onto a preallocated K/V cache holding `cache` tokens."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    layer, D = _sdpa_layer(w, H).eval(), E // H
    prefix = torch.from_numpy(np.load(os.path.join(d, "prefix.npy")))
    kc, vc = torch.zeros(1, H, cache + 1, D), torch.zeros(1, H, cache + 1, D)
    with torch.inference_mode():
        kv = F.linear(prefix, layer.w_in, layer.b_in).view(1, cache, 3, H, D)
        kc[:, :, :cache] = kv[:, :, 1].transpose(1, 2)
        vc[:, :, :cache] = kv[:, :, 2].transpose(1, 2)

    def call():
        with torch.inference_mode():
            q, k, v = F.linear(x, layer.w_in, layer.b_in).view(1, 1, 3, H, D).permute(
                2, 0, 3, 1, 4).unbind(0)
            kc[:, :, cache:cache + 1], vc[:, :, cache:cache + 1] = k, v
            o = F.scaled_dot_product_attention(q, kc, vc)
            st["y"] = F.linear(o.transpose(1, 2).reshape(1, 1, E), layer.w_out, layer.b_out)

    return call


def _layer_call(engine, w, d, kind, shape, causal, x, st):
    """torch-mha or torch-sdpa: inference under inference_mode, or forward + backward."""
    import numpy as np
    import torch

    B, L, E, H = shape
    if engine == "torch-mha":
        m = torch.nn.MultiheadAttention(E, H, batch_first=True)
        m.load_state_dict(w)
        mask = torch.nn.Transformer.generate_square_subsequent_mask(L) if causal else None

        def fwd(inp):
            return m(inp, inp, inp, need_weights=False, attn_mask=mask,
                     is_causal=bool(causal))[0]
    else:
        m = _sdpa_layer(w, H)

        def fwd(inp):
            return m(inp, bool(causal))
    if kind == "infer":
        m.eval()

        def call():
            with torch.inference_mode():
                st["y"] = fwd(x)
        return call
    m.train()
    dy, xg = torch.from_numpy(np.load(os.path.join(d, "dy.npy"))), x.clone().requires_grad_(True)

    def step():
        xg.grad = None
        y = fwd(xg)
        y.backward(dy)
        st["y"], st["dx"] = y.detach(), xg.grad
    return step


def _make_case(engine, threads, words):
    """setup words as bench_peers reads them -> Case, its warm-up outputs saved for check()."""
    import numpy as np
    import torch

    kind, d = words[0], words[1]
    B, L, E, H, causal, cache = (int(v) for v in words[2:8])
    w = {k[:-4]: torch.from_numpy(np.load(os.path.join(d, "weights", k)))
         for k in os.listdir(os.path.join(d, "weights"))}
    x, st = torch.from_numpy(np.load(os.path.join(d, "x.npy"))), {}
    if engine == "ort":
        call = _ort_call(d, threads, x, st)
    elif kind == "decode":
        call = _decode_call(w, d, E, H, cache, x, st)
    else:
        call = _layer_call(engine, w, d, kind, (B, L, E, H), causal, x, st)
    call()
    out = words[8]
    for k, v in st.items():
        np.save("%s.%s.npy" % (out, k), v.numpy())
    return Case(call, release=st.clear)


def serve_worker(engine, threads, argv):
    """A peer's worker on `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    serve(lambda words: _make_case(engine, threads, words), info={"engine": engine})


def report(record):
    """ms per engine and case at each thread count; headwise / the fastest peer; peaks."""
    ms = {}
    for row in record["rows"]:
        ms.setdefault((row["case"], row["threads"]), {})[row["engine"]] = 1e3 * median(
            row["wall_s"])
    table = []
    for (cid, t), e in ms.items():
        peers = [v for k, v in e.items() if k in PEERS]
        hw = e.get("headwise-omp" if t > 1 and "headwise-omp" in e else "headwise")
        table.append([cid, t, ", ".join("%s %.3f" % kv for kv in sorted(e.items())),
                      "%.2f" % (hw / min(peers)) if peers and hw else "-"])
    print_table(["case", "threads", "ms per call", "headwise / fastest peer"], table)
    if record["peak_kB"]:
        print_table(["long case and worker", "extra peak MiB"],
                    [[k, "%.0f" % (v / 1024)] for k, v in record["peak_kB"].items()])
