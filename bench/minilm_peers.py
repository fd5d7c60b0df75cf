#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""all-MiniLM-L6-v2 sentence embeddings: headwise against sentence-transformers on PyTorch,
ONNX Runtime and CTranslate2, interleaved in one run, with the peak memory of each.

    $HEADWISE_PEERS_PYTHON bench/minilm_peers.py --model <model_dir> \
        --headwise <release build>/bench/bench_minilm [--rounds 7] [--work /tmp/minilm-bench] \
        [--threads 1 2] [--bf16]

Every engine runs in worker processes of its own, one per thread count (1 and 2), so that each
process's memory is that engine's alone. The driver asks the workers in turn, round after round,
for the median time of a few calls on the same token ids: batch 1 (a 12-token query) and
batch 32 x 128 tokens (no padding). A call is encoder + mean pooling + L2 normalisation; the
tokenizer is not timed (the ids are given). The result per engine and case is the median over
the rounds. Peak memory: each worker's peak RSS (VmHWM) at the end, and that minus its RSS after
its imports, before the model was loaded.

--bf16 adds the engines' bfloat16 inference beside: headwise-bf16 (`with_precision(Precision::bf16,
FloatWeights::release)`: bf16 weights only, products accumulated in float) and torch-bf16 (the
SentenceTransformer converted with `.to(torch.bfloat16)`, the embedding widened to float).
CTranslate2 refuses compute_type="bfloat16" on a CPU without bf16 instructions, and ONNX
Runtime's CPU provider has no bf16 MatMul; where CTranslate2 accepts it, ct2-bf16 is added.
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys

QUERY = "how do I reset the password on my new phone"
LONG_TEXTS = [
    "The committee met on Tuesday to review the quarterly budget, and after a long discussion "
    "about travel costs, software licences and the rising price of office space in the city "
    "centre, it agreed to postpone the decision on the new building until the auditors had "
    "finished their report, which is expected at the end of next month. Several members asked "
    "for a breakdown of the consultancy fees, and the chair promised to circulate one before "
    "the next meeting, together with the minutes and a revised timetable for the project. "
    "Outside, the rain had stopped, and the caretaker was already locking the side doors of "
    "the hall while the last visitors collected their coats and umbrellas from the cloakroom."
]


def status_kb(field):
    """A field of /proc/self/status in kB: VmRSS (now) or VmHWM (peak). Not ru_maxrss, which a
    child process inherits from the parent that forked it (here the driver, with every engine
    imported)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def rss_kb():
    return status_kb("VmRSS")


def read_ids(path):
    import numpy as np

    with open(path) as f:
        b, l = (int(x) for x in f.readline().split())
        ids = np.array(f.read().split(), dtype=np.int64).reshape(b, l)
    return ids


# ---- workers -----------------------------------------------------------------------------------


def worker(args):
    engine, threads = args.engine, args.threads
    import numpy as np

    if engine in ("torch", "torch-bf16"):
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        baseline = rss_kb()
        model = SentenceTransformer(args.model, device="cpu")
        if engine == "torch-bf16":
            model = model.to(torch.bfloat16)
        model.eval()

        def make(ids):
            feats = {
                "input_ids": torch.from_numpy(ids),
                "attention_mask": torch.ones_like(torch.from_numpy(ids)),
                "token_type_ids": torch.zeros_like(torch.from_numpy(ids)),
            }

            def call():
                with torch.inference_mode():
                    return model(feats)["sentence_embedding"].float()

            return call

    elif engine in ("ort", "ort-bert"):
        import onnxruntime as ort

        baseline = rss_kb()
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        path = args.onnx if engine == "ort" else args.onnx.replace(".onnx", ".bert.onnx")
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

        def make(ids):
            feeds = {
                "input_ids": ids,
                "attention_mask": np.ones_like(ids),
                "token_type_ids": np.zeros_like(ids),
            }
            return lambda: sess.run(None, feeds)[0]

    elif engine in ("ct2", "ct2-bf16"):
        import ctranslate2

        baseline = rss_kb()
        enc = ctranslate2.Encoder(args.ct2, device="cpu",
                                  compute_type="bfloat16" if engine == "ct2-bf16" else "float32",
                                  intra_threads=threads, inter_threads=1)

        def make(ids):
            rows = ids.tolist()

            def call():
                out = enc.forward_batch(rows)
                h = np.asarray(out.last_hidden_state)  # [B, L, E]; no padding: a plain mean
                e = h.mean(axis=1)
                return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)

            return call

    else:
        raise SystemExit("unknown engine " + engine)

    calls = {"b1": make(read_ids(args.b1)), "b32": make(read_ids(args.b32))}
    for c in calls.values():
        c()  # warm-up (graph optimisation, allocations)
    print("ready", flush=True)
    import time

    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        if parts[0] == "mem":
            peak = status_kb("VmHWM")
            print("mem %d %d" % (peak, baseline), flush=True)
            continue
        fn, n = calls[parts[1]], int(parts[2])
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        print("time %r" % statistics.median(times), flush=True)


# ---- preparation -------------------------------------------------------------------------------


def prepare(args):
    """Token ids, the ONNX export and the CTranslate2 conversion, under args.work."""
    import numpy as np
    from transformers import AutoTokenizer

    os.makedirs(args.work, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(args.model)
    q = tok([QUERY], return_tensors="np")["input_ids"]
    long = tok(LONG_TEXTS * 32, truncation=True, max_length=128, return_tensors="np")["input_ids"]
    assert long.shape == (32, 128), long.shape
    for name, ids in (("b1", q), ("b32", long)):
        with open(os.path.join(args.work, name + ".txt"), "w") as f:
            f.write("%d %d\n" % ids.shape)
            f.write(" ".join(str(int(x)) for x in ids.reshape(-1)) + "\n")
    info = {"query_tokens": int(q.shape[1])}

    onnx_path = os.path.join(args.work, "minilm.onnx")
    if not os.path.exists(onnx_path):
        import torch
        from transformers import AutoModel

        class Embed(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bert = AutoModel.from_pretrained(args.model).eval()

            def forward(self, input_ids, attention_mask, token_type_ids):
                h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state
                m = attention_mask.unsqueeze(-1).to(h.dtype)
                e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(e, p=2, dim=1)

        ids = torch.from_numpy(long[:2, :16].copy())
        dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
               "token_type_ids": {0: "batch", 1: "seq"}, "embedding": {0: "batch"}}
        export_args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
        kwargs = dict(input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["embedding"], dynamic_axes=dyn, opset_version=17)
        try:
            torch.onnx.export(Embed(), export_args, onnx_path, dynamo=False, **kwargs)
            info["onnx_exporter"] = "torch.onnx.export (TorchScript, dynamo=False), opset 17"
        except TypeError:
            torch.onnx.export(Embed(), export_args, onnx_path, **kwargs)
            info["onnx_exporter"] = "torch.onnx.export, opset 17"
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = os.path.join(args.work, "minilm.opt.onnx")
    ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    import onnx

    g = onnx.load(so.optimized_model_filepath).graph
    ops = {}
    for n in g.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    info["ort_ops"] = ops
    # ONNX Runtime's offline transformer optimiser (onnxruntime.transformers), its best case for
    # BERT: it fuses what it recognises (SkipLayerNormalization, Attention, ...).
    from onnxruntime.transformers.optimizer import optimize_model

    bert_path = onnx_path.replace(".onnx", ".bert.onnx")
    m = optimize_model(onnx_path, model_type="bert", num_heads=12, hidden_size=384)
    m.save_model_to_file(bert_path)
    so.optimized_model_filepath = os.path.join(args.work, "minilm.bert.opt.onnx")
    ort.InferenceSession(bert_path, so, providers=["CPUExecutionProvider"])
    ops = {}
    for n in onnx.load(so.optimized_model_filepath).graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    info["ort_bert_ops"] = ops

    ct2_dir = os.path.join(args.work, "ct2")
    if not os.path.exists(os.path.join(ct2_dir, "model.bin")):
        import ctranslate2

        ctranslate2.converters.TransformersConverter(args.model).convert(ct2_dir, force=True)
    return onnx_path, ct2_dir, info


# ---- driver ------------------------------------------------------------------------------------


class Worker:
    def __init__(self, name, threads, cmd):
        self.name, self.threads = name, threads
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise SystemExit("%s (%d threads) did not start: %r" % (name, threads, line))

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().split()

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait()


def versions():
    import ctranslate2
    import onnxruntime
    import sentence_transformers
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "sentence-transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__,
            "ctranslate2": ctranslate2.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", default="run", choices=["run", "worker", "prepare"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--headwise", help="bench_minilm of a release build")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--work", default="/tmp/minilm-bench")
    ap.add_argument("--engine")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                    help="thread counts to run (a worker's own: one)")
    ap.add_argument("--bf16", action="store_true", help="add the engines' bf16 inference")
    ap.add_argument("--b1")
    ap.add_argument("--b32")
    ap.add_argument("--onnx")
    ap.add_argument("--ct2")
    args = ap.parse_args()
    if args.mode == "worker":
        args.threads = args.threads[0]
        return worker(args)

    onnx_path, ct2_dir, info = prepare(args)
    if args.mode == "prepare":
        return print(info)
    b1, b32 = os.path.join(args.work, "b1.txt"), os.path.join(args.work, "b32.txt")
    print("versions:", versions())
    print("query: %d tokens ([CLS] and [SEP] included); batch 32 x 128" % info["query_tokens"])
    print("ONNX:", info.get("onnx_exporter", "(exported before)"),
          "; ORT_ENABLE_ALL optimised graph ops:", info["ort_ops"])
    for key, label in (("ort_ops", "ort"), ("ort_bert_ops", "ort-bert")):
        fused = [op for op in ("Attention", "MultiHeadAttention", "FusedMatMul",
                               "SkipLayerNormalization", "EmbedLayerNormalization", "BiasGelu",
                               "FastGelu", "Gelu") if op in info[key]]
        print("%s: fused ops in the optimised graph: %s" % (label, fused or "none"))
    print("ort-bert (onnxruntime.transformers optimize_model, then ORT_ENABLE_ALL) ops:",
          info["ort_bert_ops"])

    me = os.path.abspath(__file__)
    engines = ["torch", "ort", "ort-bert", "ct2"]
    if args.bf16:
        engines.append("torch-bf16")
        import ctranslate2

        if "bfloat16" in ctranslate2.get_supported_compute_types("cpu"):
            engines.append("ct2-bf16")
        else:
            print("ct2-bf16: not run, CTranslate2 supports %s on this CPU"
                  % sorted(ctranslate2.get_supported_compute_types("cpu")))
    workers = []
    for threads in args.threads:
        if args.headwise:
            workers.append(Worker("headwise", threads,
                                  [args.headwise, "worker", args.model, str(threads), b1, b32]))
            if args.bf16:
                workers.append(Worker("headwise-bf16", threads,
                                      [args.headwise, "worker", args.model, str(threads), b1, b32,
                                       "bf16"]))
        for engine in engines:
            env_cmd = [sys.executable, me, "worker", "--model", args.model, "--engine", engine,
                       "--threads", str(threads), "--b1", b1, "--b32", b32, "--onnx", onnx_path,
                       "--ct2", ct2_dir]
            workers.append(Worker(engine, threads, env_cmd))

    calls = {"b1": 30, "b32": 3}
    results = {}
    for r in range(args.rounds):
        order = workers[r % len(workers):] + workers[:r % len(workers)]
        for case in ("b1", "b32"):
            for w in order:
                t = float(w.ask("run %s %d" % (case, calls[case]))[1])
                results.setdefault((w.name, w.threads, case), []).append(t)
    mem = {}
    for w in workers:
        _, peak, base = w.ask("mem")
        mem[(w.name, w.threads)] = (int(peak), int(base))
        w.close()

    print()
    print("| engine | threads | batch 1: sentences/s | batch 32 x 128: sentences/s | "
          "peak RSS (MB) | peak - baseline (MB) |")
    print("|---|---|---|---|---|---|")
    for w in workers:
        t1 = statistics.median(results[(w.name, w.threads, "b1")])
        t32 = statistics.median(results[(w.name, w.threads, "b32")])
        peak, base = mem[(w.name, w.threads)]
        print("| %s | %d | %.1f | %.1f | %.0f | %.0f |" % (w.name, w.threads, 1 / t1, 32 / t32,
                                                          peak / 1024, (peak - base) / 1024))


if __name__ == "__main__":
    sys.exit(main())
