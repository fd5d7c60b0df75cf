#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A ~100M-parameter Llama-style model (random weights): headwise against transformers on
PyTorch, greedy generation of 128 new tokens after a 128-token prompt and a 2048-token prefill,
1 thread, interleaved in one run, with the peak memory of each and a read-bandwidth bound.

    $HEADWISE_PEERS_PYTHON bench/llama_peers.py --headwise <release build>/bench/bench_llama \
        [--rounds 5] [--model ~/.cache/headwise/models/llama-100m] [--work /tmp/llama-bench]

The model: transformers' LlamaConfig with hidden 768, 12 layers, 12 heads, 4 key/value heads,
intermediate 2048, vocabulary 32000, untied LM head, transformers' own initialisation after
torch.manual_seed(0), saved once with save_pretrained (safetensors, float32) under --model
(outside the repository). The prompt (128 ids) and the prefill (2048 ids) are drawn from a
seeded generator.

Every engine runs in a worker process of its own (its memory is its alone); the driver asks the
workers in turn, round after round, for the median time of a few calls of each case:
  gen      the prompt, then 128 new tokens, greedy (transformers: model.generate with
           do_sample=False, min_new_tokens=max_new_tokens=128, no stop token; headwise:
           models::generate with temperature 0);
  p128     one forward of the 128-token prompt into an empty cache (use_cache=True), all logits;
  p2048    the same for 2048 tokens.
The result per engine and case is the median over the rounds, of the CPU time of the thread
that computes (both engines run their one BLAS thread on it), so that other processes on the
cores change the figures little; wall times are printed too. Decode ms/token is
(gen - p128) / 127: 128 new tokens are the prefill's one and 127 single-token steps. Both
engines' generated ids are compared (they must be equal). Peak memory: each worker's VmHWM, and
that minus its RSS before the model was loaded.

The bound: a single-token step reads every weight but the embedding table once (12 layers and
the LM head, float32) and the KV cache so far; the bound is those bytes divided by the read
bandwidth of one thread, measured by bench_llama's probe (sums of a 512 MB float array) before
every round, the best pass of all.
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys

CONFIG = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
              num_key_value_heads=4, intermediate_size=2048, vocab_size=32000,
              max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5,
              tie_word_embeddings=False, hidden_act="silu", bos_token_id=1, eos_token_id=2,
              pad_token_id=0)
PROMPT, NEW, PREFILL = 128, 128, 2048


def status_kb(field):
    """A field of /proc/self/status in kB: VmRSS (now) or VmHWM (peak)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def read_ids(path):
    with open(path) as f:
        f.readline()
        return [int(x) for x in f.read().split()]


# ---- the model and the ids ---------------------------------------------------------------------


def prepare(args):
    import torch

    os.makedirs(args.work, exist_ok=True)
    if not os.path.exists(os.path.join(args.model, "model.safetensors")):
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**CONFIG)).eval()
        model.save_pretrained(args.model, safe_serialization=True)
    g = torch.Generator().manual_seed(1)
    for name, n in (("prompt", PROMPT), ("prefill", PREFILL)):
        ids = torch.randint(3, CONFIG["vocab_size"], (n,), generator=g)
        with open(os.path.join(args.work, name + ".txt"), "w") as f:
            f.write("1 %d\n" % n)
            f.write(" ".join(str(int(x)) for x in ids) + "\n")


def parameter_counts():
    E, I, V, N = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"], \
        CONFIG["num_hidden_layers"]
    kv = E // CONFIG["num_attention_heads"] * CONFIG["num_key_value_heads"]
    layer = E * E * 2 + E * kv * 2 + 3 * E * I + 2 * E
    read = N * layer + E + V * E  # the layers, the final norm, the LM head
    return read + V * E, read, kv  # total, read per step, K (or V) floats per token per layer


# ---- the transformers worker -------------------------------------------------------------------


def worker(args):
    import time

    import torch
    from transformers import LlamaForCausalLM

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    baseline = status_kb("VmRSS")
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    prompt = torch.tensor([read_ids(args.prompt)])
    prefill = torch.tensor([read_ids(args.prefill)])
    last_ids = []

    def gen():
        with torch.inference_mode():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                 max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0,
                                 eos_token_id=None)
        last_ids[:] = out[0, PROMPT:].tolist()

    def forward(ids):
        def call():
            with torch.inference_mode():
                return model(ids, use_cache=True).logits

        return call

    calls = {"gen": gen, "p128": forward(prompt), "p2048": forward(prefill)}
    gen()  # warm-up
    forward(prompt)()
    print("ready", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        if parts[0] == "mem":
            print("mem %d %d" % (status_kb("VmHWM"), baseline), flush=True)
            continue
        if parts[0] == "ids":
            print("ids " + " ".join(map(str, last_ids)), flush=True)
            continue
        fn, n = calls[parts[1]], int(parts[2])
        times, cpu = [], []
        for _ in range(n):
            t0, c0 = time.perf_counter(), time.thread_time()
            fn()
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        print("time %r %r" % (statistics.median(times), statistics.median(cpu)), flush=True)


# ---- driver ------------------------------------------------------------------------------------


class Worker:
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

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", default="run", choices=["run", "worker", "prepare"])
    ap.add_argument("--model", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "headwise", "models",
        "llama-100m"))
    ap.add_argument("--headwise", help="bench_llama of a release build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", default="/tmp/llama-bench")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt")
    ap.add_argument("--prefill")
    args = ap.parse_args()
    if args.mode == "worker":
        return worker(args)
    prepare(args)
    if args.mode == "prepare":
        return print(args.model)

    import torch
    import transformers

    prompt, prefill = (os.path.join(args.work, n + ".txt") for n in ("prompt", "prefill"))
    total, read, kv = parameter_counts()
    print("versions: python %s, torch %s, transformers %s" % (
        platform.python_version(), torch.__version__, transformers.__version__))
    print("model: %s, %.1fM parameters (%.1fM read per decode step)" % (
        args.model, total / 1e6, read / 1e6))
    print("load average before:", os.getloadavg())

    workers = []
    if args.headwise:
        workers.append(Worker("headwise", [args.headwise, "worker", args.model,
                                           str(args.threads), prompt, prefill, str(NEW)]))
    workers.append(Worker("transformers", [sys.executable, os.path.abspath(__file__), "worker",
                                           "--model", args.model, "--threads",
                                           str(args.threads), "--prompt", prompt,
                                           "--prefill", prefill]))

    calls = {"gen": 1, "p128": 3, "p2048": 1}
    results, probes = {}, []
    for r in range(args.rounds):
        if args.headwise:
            probes.append(subprocess.run([args.headwise, "bandwidth"], capture_output=True,
                                         text=True, check=True).stdout.split())
        order = workers[r % len(workers):] + workers[:r % len(workers)]
        for case in ("gen", "p128", "p2048"):
            for w in order:
                _, wall, cpu = w.ask("run %s %d" % (case, calls[case]))
                results.setdefault((w.name, case), []).append(float(cpu))
                results.setdefault((w.name, case + "-wall"), []).append(float(wall))
    ids = {w.name: w.ask("ids")[1:] for w in workers}
    mem = {}
    for w in workers:
        _, peak, base = w.ask("mem")
        mem[w.name] = (int(peak), int(base))
        w.close()
    print("load average after:", os.getloadavg())
    if len(ids) == 2:
        a, b = ids["headwise"], ids["transformers"]
        same = a == b
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        print("generated ids equal: %s%s" % (same, "" if same else " (first difference at %s)"
                                             % first))
        print("transformers' ids:", " ".join(b[:16]), "...")

    med = {k: statistics.median(v) for k, v in results.items()}
    print()
    print("CPU time of the computing thread, medians over %d rounds (wall time in brackets):"
          % args.rounds)
    print("| engine | prompt 128 + 128 new: s | new tokens/s | decode ms/token | "
          "prefill 128: ms | prefill 2048: s | peak RSS (MB) | peak - baseline (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    for w in workers:
        g, p1, p2 = med[(w.name, "gen")], med[(w.name, "p128")], med[(w.name, "p2048")]
        gw, p2w = med[(w.name, "gen-wall")], med[(w.name, "p2048-wall")]
        peak, base = mem[w.name]
        print("| %s | %.2f (%.2f) | %.1f (%.1f) | %.2f | %.1f | %.2f (%.2f) | %.0f | %.0f |" % (
            w.name, g, gw, NEW / g, NEW / gw, 1e3 * (g - p1) / (NEW - 1), 1e3 * p1, p2, p2w,
            peak / 1024, (peak - base) / 1024))
    if args.headwise:
        bandwidth = max(float(p[1]) for p in probes)
        print()
        print("single-thread read bandwidth: %.2f GB/s, the best pass of %d probes (%s passes "
              "over %s MB each, CPU-timed; their medians: %s GB/s)" % (
                  bandwidth / 1e9, len(probes), probes[0][3], probes[0][4],
                  ", ".join("%.1f" % (float(p[2]) / 1e9) for p in probes)))
        # The mean cache over the 127 steps holds PROMPT + 64 tokens of K and V in each layer.
        step_bytes = 4 * (read + CONFIG["num_hidden_layers"] * 2 * kv * (PROMPT + NEW // 2))
        bound = step_bytes / bandwidth
        hw = (med[("headwise", "gen")] - med[("headwise", "p128")]) / (NEW - 1)
        tf = (med[("transformers", "gen")] - med[("transformers", "p128")]) / (NEW - 1)
        print()
        print("bound: %.1f MB per step / %.2f GB/s = %.2f ms/token (%.1f tokens/s)" % (
            step_bytes / 1e6, bandwidth / 1e9, 1e3 * bound, 1 / bound))
        print("headwise decode step / bound: %.2fx (target <= 1.3x)" % (hw / bound))
        print("transformers decode step / bound: %.2fx" % (tf / bound))
        print("generation tokens/s, headwise / transformers: %.2fx (target >= 3x)" % (
            med[("transformers", "gen")] / med[("headwise", "gen")]))
        print("decode step, transformers / headwise: %.2fx" % (tf / hw))
        print("prefill 2048, headwise / transformers time: %.2fx (target <= 0.8x)" % (
            med[("headwise", "p2048")] / med[("transformers", "p2048")]))


if __name__ == "__main__":
    sys.exit(main())
