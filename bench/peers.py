#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""MultiheadAttention against PyTorch 2.x and ONNX Runtime, interleaved in one run, on the same
weights and inputs, 1 and 2 threads: training steps, inference, long sequences, decode steps.

    bash scripts/bench_peers.sh            (builds bench_peers, sets up the venv, runs this)
    $HEADWISE_PEERS_PYTHON bench/peers.py --headwise <release build>/bench/bench_peers \
        [--rounds 5] [--long 4096 [16384]] [--work /tmp/headwise-peers] [--json out.json]
        [--png docs/bench_peers.png] [--quick] [--only-long] [--thread-counts 1 2]
        [--headwise-omp <OpenMP build>/bench/bench_peers] [--headwise-plain <plain build>/bench_peers]
        [--engines headwise headwise-omp torch-sdpa ...] [--shapes 8,128,512,8 ...] [--no-decode]

Engines, each in worker processes of its own, one per thread count (1 and 2), float32, fused
(packed) in-projection, self-attention (query = key = value), batch_first:
  headwise    bench_peers (MultiheadAttention, the release build's CBLAS backend); on more than
              one thread OpenBLAS's own threads parallelise each GEMM
  headwise-omp  (with --headwise-omp) bench_peers of an OpenMP build (HEADWISE_USE_OPENMP=ON):
              OpenMP threads over (batch, head) slices, GEMM row blocks and memory passes,
              OpenBLAS at 1 thread per call; headwise's 2-thread configuration
  headwise-plain  (with --headwise-plain) bench_peers built as a new user builds it
              (bench/consumer: plain Release, headwise's default options, no -march)
  torch-mha   torch.nn.MultiheadAttention; inference in eval(), inference_mode, need_weights=False
              (its native fast path); causal as attn_mask + is_causal=True
  torch-sdpa  a layer on F.scaled_dot_product_attention (F.linear, SDPA with is_causal, F.linear):
              torch's fused (flash) CPU kernels, forward and backward
  ort         ONNX Runtime (CPU, ORT_ENABLE_ALL), nn.MultiheadAttention exported by torch.onnx
              (TorchScript exporter, opset 17) from the same weights, one static-shape model per
              case: inference only
Cases: infer and train (forward + backward of sum(y * dy), gradients of x and the parameters) at
the default shapes (B, L, E, H); long (1, L, 512, 8) for L in --long, causal and not, with the
extra peak memory of a call (resident set above the process holding the module and inputs,
VmHWM reset through /proc/self/clear_refs); decode: one token onto a KV cache of 128, 2048, 8192
tokens (E = 512, H = 8), headwise's decode_into against torch-sdpa's step on a preallocated cache.
Every round asks every worker in turn (the order rotating) for the median wall time of a few
calls of every case; a result is the median over rounds. Outputs (y, and dx for training) of
every engine are compared with headwise's (1 thread): max abs difference. The ratio to the
fastest peer takes headwise-omp's time at more than one thread when it runs, else headwise's.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

DEFAULT_SHAPES = [(8, 128, 512, 8), (1, 512, 768, 12), (32, 64, 256, 4), (4, 1024, 512, 8),
                  (1, 1, 512, 8)]
CACHES = [128, 2048, 8192]
ENGINES = ("headwise", "torch-mha", "torch-sdpa", "ort")
HEADWISE_BUILDS = ("headwise", "headwise-omp", "headwise-plain")
PEERS = ENGINES[1:]


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


# ---- Python workers ----------------------------------------------------------------------------


def py_worker(engine, threads):
    import ctypes

    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    libc = ctypes.CDLL("libc.so.6")
    if engine == "ort":
        import onnxruntime as ort

    def load_weights(d):
        w = {k[:-4]: torch.from_numpy(np.load(os.path.join(d, "weights", k)))
             for k in os.listdir(os.path.join(d, "weights"))}
        return w

    class SdpaLayer(torch.nn.Module):
        def __init__(self, w, heads):
            super().__init__()
            self.h = heads
            self.w_in = torch.nn.Parameter(w["in_proj_weight"].clone())
            self.b_in = torch.nn.Parameter(w["in_proj_bias"].clone())
            self.w_out = torch.nn.Parameter(w["out_proj.weight"].clone())
            self.b_out = torch.nn.Parameter(w["out_proj.bias"].clone())

        def forward(self, x, causal):
            B, L, E = x.shape
            qkv = F.linear(x, self.w_in, self.b_in).view(B, L, 3, self.h, E // self.h)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return F.linear(o.transpose(1, 2).reshape(B, L, E), self.w_out, self.b_out)

    def setup(kind, d, B, L, E, H, causal, cache, out):
        w = load_weights(d)
        x = torch.from_numpy(np.load(os.path.join(d, "x.npy")))
        st = {}
        if engine == "ort":
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            if os.environ.get("HEADWISE_PEERS_POOLS", "sleep") == "sleep":
                # Idle pool threads sleep instead of spinning on the cores the next worker needs.
                so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            sess = ort.InferenceSession(os.path.join(d, "mha.onnx"), so,
                                        providers=["CPUExecutionProvider"])
            feeds = {"x": x.numpy()}

            def call():
                st["y"] = torch.from_numpy(sess.run(None, feeds)[0])

        elif kind == "decode":
            assert engine == "torch-sdpa"
            layer = SdpaLayer(w, H).eval()
            prefix = torch.from_numpy(np.load(os.path.join(d, "prefix.npy")))
            D = E // H
            kc = torch.zeros(1, H, cache + 1, D)
            vc = torch.zeros(1, H, cache + 1, D)
            with torch.inference_mode():
                kv = F.linear(prefix, layer.w_in, layer.b_in).view(1, cache, 3, H, D)
                kc[:, :, :cache] = kv[:, :, 1].transpose(1, 2)
                vc[:, :, :cache] = kv[:, :, 2].transpose(1, 2)

            def call():
                with torch.inference_mode():
                    qkv = F.linear(x, layer.w_in, layer.b_in).view(1, 1, 3, H, D)
                    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
                    kc[:, :, cache:cache + 1] = k
                    vc[:, :, cache:cache + 1] = v
                    o = F.scaled_dot_product_attention(q, kc, vc)
                    st["y"] = F.linear(o.transpose(1, 2).reshape(1, 1, E), layer.w_out,
                                       layer.b_out)

        else:
            if engine == "torch-mha":
                m = torch.nn.MultiheadAttention(E, H, batch_first=True)
                m.load_state_dict(w)
                mask = (torch.nn.Transformer.generate_square_subsequent_mask(L)
                        if causal else None)

                def fwd(inp):
                    return m(inp, inp, inp, need_weights=False, attn_mask=mask,
                             is_causal=bool(causal))[0]
            else:
                m = SdpaLayer(w, H)

                def fwd(inp):
                    return m(inp, bool(causal))
            if kind == "infer":
                m.eval()

                def call():
                    with torch.inference_mode():
                        st["y"] = fwd(x)
            else:
                m.train()
                dy = torch.from_numpy(np.load(os.path.join(d, "dy.npy")))
                xg = x.clone().requires_grad_(True)

                def call():
                    xg.grad = None
                    y = fwd(xg)
                    y.backward(dy)
                    st["y"], st["dx"] = y.detach(), xg.grad
        t0 = time.perf_counter()
        call()
        first = time.perf_counter() - t0
        np.save(out + ".y.npy", st["y"].numpy())
        if "dx" in st:
            np.save(out + ".dx.npy", st["dx"].numpy())
        print("ready %r" % first, flush=True)
        return call, st

    cases = {}
    for line in sys.stdin:
        p = line.split()
        if not p or p[0] == "quit":
            break
        if p[0] == "setup":
            cid, kind, d = p[1], p[2], p[3]
            B, L, E, H, causal, cache = (int(v) for v in p[4:10])
            cases[cid] = setup(kind, d, B, L, E, H, causal, cache, p[10])
        elif p[0] == "free":
            cases.pop(p[1], None)
            print("freed", flush=True)
        elif p[0] == "run":
            call = cases[p[1]][0]
            times = []
            for _ in range(int(p[2])):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            print("time %r" % statistics.median(times), flush=True)
        elif p[0] == "peak":
            call, st = cases[p[1]]
            st.clear()
            libc.malloc_trim(0)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            before = status_kb("VmRSS")
            call()
            print("peak %d" % (status_kb("VmHWM") - before), flush=True)


# ---- driver ------------------------------------------------------------------------------------


class Worker:
    def __init__(self, engine, threads, cmd, env):
        self.engine, self.threads = engine, threads
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        reply = self.p.stdout.readline().split()
        if not reply:
            raise SystemExit("%s (%d threads) died on %r" % (self.engine, self.threads, line))
        return reply

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait()


def make_case(work, cid, kind, B, L, E, H, causal, cache, export_onnx):
    """Weights (torch's initialisation, seeded, with non-zero biases), inputs, and the ONNX model."""
    import numpy as np
    import torch

    d = os.path.join(work, cid)
    os.makedirs(os.path.join(d, "weights"), exist_ok=True)
    torch.manual_seed(B * 1000003 + L * 1009 + E * 7 + H)
    m = torch.nn.MultiheadAttention(E, H, batch_first=True)
    with torch.no_grad():
        m.in_proj_bias.normal_(0, 0.1)
        m.out_proj.bias.normal_(0, 0.1)
    for k, v in m.state_dict().items():
        np.save(os.path.join(d, "weights", k + ".npy"), v.numpy())
    g = torch.Generator().manual_seed(7)
    if kind == "decode":
        np.save(os.path.join(d, "prefix.npy"), torch.randn(1, cache, E, generator=g).numpy())
        np.save(os.path.join(d, "x.npy"), torch.randn(1, 1, E, generator=g).numpy())
    else:
        np.save(os.path.join(d, "x.npy"), torch.randn(B, L, E, generator=g).numpy())
        np.save(os.path.join(d, "dy.npy"), torch.randn(B, L, E, generator=g).numpy())
    info = {}
    if export_onnx:
        path = os.path.join(d, "mha.onnx")
        mask = torch.nn.Transformer.generate_square_subsequent_mask(L) if causal else None

        class Wrap(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x, x, x, need_weights=False, attn_mask=mask)[0]

        x = torch.randn(B, L, E)
        # With autograd on, nn.MultiheadAttention takes its composite path (the fast path's
        # single operator has no ONNX form).
        torch.onnx.export(Wrap().eval(), (x,), path, input_names=["x"], output_names=["y"],
                          opset_version=17, dynamo=False)
        import onnx
        import onnxruntime as ort

        before = {}
        for n in onnx.load(path).graph.node:
            before[n.op_type] = before.get(n.op_type, 0) + 1
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = os.path.join(d, "mha.opt.onnx")
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        after = {}
        for n in onnx.load(so.optimized_model_filepath).graph.node:
            after[n.op_type] = after.get(n.op_type, 0) + 1
        info = {"exported": before, "optimised": after}
    return d, info


def build_config(binary):
    """What the CMake cache next to a bench_peers says about its build (one or two levels up)."""
    v = {}
    here = os.path.dirname(os.path.abspath(binary))
    for d in (here, os.path.dirname(here)):
        cache = os.path.join(d, "CMakeCache.txt")
        if not os.path.exists(cache):
            continue
        for line in open(cache):
            key, _, value = line.strip().partition("=")
            if key.startswith(("HEADWISE_BLAS:", "HEADWISE_USE_OPENMP:", "CMAKE_CXX_FLAGS:",
                               "CMAKE_BUILD_TYPE:", "CMAKE_CXX_FLAGS_RELEASE:",
                               "headwise_DIR:", "HEADWISE_SOURCE_DIR:")):
                v[key.split(":")[0]] = value
            elif key.startswith("BLAS_") and "_LIBRARY:" in key and value.startswith("/"):
                v["blas_library"] = value
        break
    return v


def versions(headwise_bin):
    import numpy
    import onnxruntime
    import torch

    v = {"python": platform.python_version(), "torch": torch.__version__,
         "onnxruntime": onnxruntime.__version__, "numpy": numpy.__version__,
         "torch_mkl": torch.backends.mkl.is_available(),
         "cpu": platform.processor() or platform.machine()}
    try:
        cfg = torch.__config__.show()
        for line in cfg.splitlines():
            if "CPU capability usage" in line:
                v["torch_cpu_capability"] = line.split(":")[-1].strip()
    except Exception:  # noqa: BLE001
        pass
    cache = os.path.join(os.path.dirname(os.path.dirname(headwise_bin)), "CMakeCache.txt")
    if os.path.exists(cache):
        for line in open(cache):
            key, _, value = line.strip().partition("=")
            if key.startswith(("HEADWISE_BLAS:", "CMAKE_CXX_FLAGS:", "CMAKE_BUILD_TYPE:")):
                v["headwise_" + key.split(":")[0]] = value
            elif key.startswith("BLAS_") and "_LIBRARY:" in key and value.startswith("/"):
                v["headwise_blas_library"] = value
    try:
        v["headwise_openblas"] = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "libopenblas0-pthread"],
            capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", default="run", choices=["run", "worker", "report"],
                    help="report: print the tables (and --png) of a run's --json again")
    ap.add_argument("--headwise", help="bench_peers of a release build")
    ap.add_argument("--engine")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--long-rounds", type=int, default=3)
    ap.add_argument("--long", type=int, nargs="*", default=[4096])
    ap.add_argument("--thread-counts", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--target-seconds", type=float, default=0.15,
                    help="timed calls per worker and case per round: about this long")
    ap.add_argument("--work", default="/tmp/headwise-peers")
    ap.add_argument("--json")
    ap.add_argument("--png")
    ap.add_argument("--quick", action="store_true", help="2 rounds, main shapes (8,128,512,8)")
    ap.add_argument("--only-long", action="store_true", help="the long-sequence cases alone")
    ap.add_argument("--headwise-omp", help="bench_peers of an OpenMP build: engine headwise-omp")
    ap.add_argument("--headwise-plain",
                    help="bench_peers of a plain Release consumer build: engine headwise-plain")
    ap.add_argument("--engines", nargs="+", help="only these engines (default: all available)")
    ap.add_argument("--shapes", nargs="+",
                    help="B,L,E,H of the default-shape cases (default: the five default shapes)")
    ap.add_argument("--no-decode", action="store_true", help="leave out the decode steps")
    ap.add_argument("--omp-wait-policy", default="PASSIVE",
                    help="OMP_WAIT_POLICY of every worker (PASSIVE: idle workers' threads sleep "
                         "instead of spinning on the shared cores); 'unset' leaves it unset")
    ap.add_argument("--pools", choices=["sleep", "spin"], default="sleep",
                    help="sleep (default): every engine's idle thread pool sleeps between calls "
                         "(OMP_WAIT_POLICY as above, OPENBLAS_THREAD_TIMEOUT=4, ONNX Runtime's "
                         "session.intra_op.allow_spinning=0), so that a pool left spinning after "
                         "its call does not take a core from the next worker; spin: the engines' "
                         "defaults")
    args = ap.parse_args()
    if args.mode == "worker":
        return py_worker(args.engine, args.threads)
    if args.mode == "report":
        if not args.json:
            raise SystemExit("report needs --json <a run's JSON>")
        with open(args.json) as f:
            return report(json.load(f), args)
    if not args.headwise:
        raise SystemExit("--headwise <build>/bench/bench_peers is needed")

    import numpy as np

    binaries = {"headwise": args.headwise, "headwise-omp": args.headwise_omp,
                "headwise-plain": args.headwise_plain}
    available = [e for e in HEADWISE_BUILDS if binaries[e]] + list(PEERS)
    engines_run = [e for e in available if not args.engines or e in args.engines]
    if args.engines and set(args.engines) - set(available):
        raise SystemExit("unknown or unavailable engines: %s (available: %s)" % (
            " ".join(sorted(set(args.engines) - set(available))), " ".join(available)))
    if "headwise" not in engines_run:
        raise SystemExit("--engines must include headwise (the reference of the comparisons)")
    hw_run = [e for e in engines_run if e in HEADWISE_BUILDS]

    def pick(engines):
        return tuple(e for e in engines_run if e in hw_run or e in engines)

    ver = versions(args.headwise)
    ver["builds"] = {e: build_config(binaries[e]) for e in hw_run}
    print("versions:", ver, flush=True)
    print("load before:", open("/proc/loadavg").read().strip(), flush=True)
    os.makedirs(args.work, exist_ok=True)

    # Phases: (name, rounds, [(cid, kind, B, L, E, H, causal, cache, engines)])
    shapes = DEFAULT_SHAPES[:1] if args.quick else DEFAULT_SHAPES
    if args.shapes:
        shapes = [tuple(int(v) for v in sh.split(",")) for sh in args.shapes]
    rounds = 2 if args.quick else args.rounds
    phases = []
    main_cases = []
    for (B, L, E, H) in shapes:
        main_cases.append(("infer-%d-%d-%d-%d" % (B, L, E, H), "infer", B, L, E, H, 0, 0,
                           pick(PEERS)))
        main_cases.append(("train-%d-%d-%d-%d" % (B, L, E, H), "train", B, L, E, H, 0, 0,
                           pick(PEERS[:2])))
    if not args.only_long:
        phases.append(("default shapes", rounds, main_cases))
        if not args.no_decode:
            phases.append(("decode", rounds, [("decode-%d" % c, "decode", 1, 1, 512, 8, 0, c,
                                               pick(("torch-sdpa",))) for c in CACHES]))
    for L in ([] if args.quick else args.long):
        for causal in (0, 1):
            cs = [("long-infer-%d-%s" % (L, "causal" if causal else "none"), "infer", 1, L, 512,
                   8, causal, 0, pick(PEERS if L <= 4096 else ("torch-sdpa",))),
                  ("long-train-%d-%s" % (L, "causal" if causal else "none"), "train", 1, L, 512,
                   8, causal, 0, pick(PEERS[:2] if L <= 4096 else ("torch-sdpa",)))]
            phases.append(("long L=%d %s" % (L, "causal" if causal else "none"),
                           args.long_rounds if L <= 4096 else 1, cs))

    me = os.path.abspath(__file__)
    workers = {}
    for threads in args.thread_counts:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
                   MKL_NUM_THREADS=str(threads))
        if args.omp_wait_policy != "unset":
            env["OMP_WAIT_POLICY"] = args.omp_wait_policy
        env["HEADWISE_PEERS_POOLS"] = args.pools
        if args.pools == "sleep":
            # OpenBLAS's pthreads server polls for 2^28 cycles (about 0.1 s) after a call before
            # its threads sleep; 2^4 cycles makes them sleep at once.
            env["OPENBLAS_THREAD_TIMEOUT"] = "4"
        env.pop("OPENBLAS_CORETYPE", None)
        for engine in engines_run:
            cmd = [sys.executable, me, "worker", "--engine", engine, "--threads", str(threads)]
            wenv = env
            if engine in HEADWISE_BUILDS:
                cmd = [binaries[engine], "worker", str(threads)]
            if engine == "headwise-omp":
                # One threading runtime at a time: OpenMP's threads, the BLAS at 1 per call.
                wenv = dict(env, OPENBLAS_NUM_THREADS="1")
            workers[(engine, threads)] = Worker(engine, threads, cmd, wenv)
            if engine in HEADWISE_BUILDS:
                info = dict(kv.split("=") for kv in workers[(engine, threads)].ask("info")[1:])
                ver["builds"][engine]["worker_%d" % threads] = info
                print("%s/%d: %s" % (engine, threads, info), flush=True)

    results = {"versions": ver, "cases": {}, "ort": {}, "engines": engines_run,
               "thread_counts": args.thread_counts,
               "omp_wait_policy": args.omp_wait_policy, "pools": args.pools}
    started = time.time()
    for name, nrounds, cases in phases:
        print("\n== %s (%d rounds) ==" % (name, nrounds), flush=True)
        active = []
        calls = {}
        for (cid, kind, B, L, E, H, causal, cache, engines) in cases:
            d, info = make_case(args.work, cid, kind, B, L, E, H, causal, cache,
                                "ort" in engines)
            if info:
                results["ort"][cid] = info
            firsts = []
            for engine in engines:
                for threads in args.thread_counts:
                    w = workers[(engine, threads)]
                    out = os.path.join(d, "out-%s-%d" % (engine, threads))
                    r = w.ask("setup %s %s %s %d %d %d %d %d %d %s" % (
                        cid, kind, d, B, L, E, H, causal, cache, out))
                    firsts.append(float(r[1]))
                    active.append((cid, w))
            calls[cid] = max(1, min(200, int(args.target_seconds / max(min(firsts), 1e-6))))
            ref_y = np.load(os.path.join(d, "out-headwise-%d.y.npy" % args.thread_counts[0]))
            diffs = {}
            for engine in engines:
                for threads in args.thread_counts:
                    o = os.path.join(d, "out-%s-%d" % (engine, threads))
                    dy = float(np.abs(np.load(o + ".y.npy").reshape(ref_y.shape) - ref_y).max())
                    dx = None
                    if kind == "train":
                        ref_dx = np.load(os.path.join(d, "out-headwise-%d.dx.npy" %
                                                      args.thread_counts[0]))
                        dx = float(np.abs(np.load(o + ".dx.npy") - ref_dx).max())
                    diffs["%s/%d" % (engine, threads)] = (dy, dx)
            results["cases"][cid] = {"kind": kind, "shape": [B, L, E, H], "causal": causal,
                                     "cache": cache, "diff": diffs, "times": {}, "peak_kB": {}}
            print("%s: max |y - y_headwise| (|dx - dx_headwise|): %s" % (
                cid, ", ".join("%s %.1e%s" % (k, v[0], "" if v[1] is None else " (%.1e)" % v[1])
                               for k, v in diffs.items())), flush=True)
        for r in range(nrounds):
            order = active[r % len(active):] + active[:r % len(active)]
            for cid, w in order:
                t = float(w.ask("run %s %d" % (cid, calls[cid]))[1])
                results["cases"][cid]["times"].setdefault(
                    "%s/%d" % (w.engine, w.threads), []).append(t)
        if name.startswith("long"):
            for cid, w in active:
                results["cases"][cid]["peak_kB"]["%s/%d" % (w.engine, w.threads)] = int(
                    w.ask("peak %s" % cid)[1])
        for cid, w in active:
            w.ask("free %s" % cid)
        print("(%.0f s so far; load %s)" % (time.time() - started,
                                            open("/proc/loadavg").read().split()[0]), flush=True)
    for w in workers.values():
        w.close()
    results["load_after"] = open("/proc/loadavg").read().strip()
    results["seconds"] = time.time() - started
    print("\nload after:", results["load_after"], "; %.0f s" % results["seconds"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    report(results, args)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def headwise_at(engines, t):
    """The headwise build a ratio to the peers takes at t threads: the OpenMP build above 1."""
    return "headwise-omp" if t > 1 and "headwise-omp" in engines else "headwise"


def round_ratios(c, a, b):
    """Per-round time ratios a / b of one case (rounds interleave every worker, so the times of
    one round index were taken side by side): (median, min, max)."""
    ta, tb = c["times"].get(a, []), c["times"].get(b, [])
    rs = [x / y for x, y in zip(ta, tb)]
    return (med(rs), min(rs), max(rs)) if rs else (float("nan"),) * 3


def report(res, args):
    cases = res["cases"]
    engines = res.get("engines", list(ENGINES))
    tcs = res.get("thread_counts", args.thread_counts)
    print("\n## ONNX Runtime's optimised graphs (ORT_ENABLE_ALL)")
    seen = set()
    for cid, info in res["ort"].items():
        key = json.dumps(info["optimised"], sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        print("- %s: exported %s -> optimised %s" % (cid, info["exported"], info["optimised"]))
    others = [e for e in engines if e != "headwise"]
    print("\n| case | threads | %s | headwise / fastest peer | max abs diff (%s) |" % (
        " | ".join("%s ms" % e for e in engines), ", ".join(others)))
    print("|---|---|%s---|---|" % ("---|" * len(engines)))
    rows = []
    for cid, c in cases.items():
        for t in tcs:
            ms = {e: med(c["times"].get("%s/%d" % (e, t), [])) * 1e3 for e in engines}
            peers = [v for e, v in ms.items() if e in PEERS and v == v]
            hw = ms[headwise_at(engines, t)]
            ratio = hw / min(peers) if peers and hw == hw else float("nan")
            rows.append((cid, t, ms, ratio))
            diffs = []
            for e in others:
                dd = c["diff"].get("%s/%d" % (e, t))
                diffs.append("-" if dd is None else "%.0e" % max(v for v in dd if v is not None))
            print("| %s | %d | %s | %.2f | %s |" % (
                cid, t, " | ".join("-" if v != v else "%.3f" % v for v in ms.values()), ratio,
                ", ".join(diffs)))
    if any(c["peak_kB"] for c in cases.values()):
        print("\n| long case | threads | %s |" % " | ".join("%s MiB" % e for e in engines))
        print("|---|---|%s" % ("---|" * len(engines)))
        for cid, c in cases.items():
            if not c["peak_kB"]:
                continue
            for t in tcs:
                print("| %s | %d | %s |" % (cid, t, " | ".join(
                    "%.0f" % (c["peak_kB"]["%s/%d" % (e, t)] / 1024) if "%s/%d" % (e, t) in
                    c["peak_kB"] else "-" for e in engines)))
    if len(tcs) == 2:
        t1, t2 = tcs
        omp = "headwise-omp" in engines
        print("\n| case | speed-up %d -> %d threads: %s |%s" % (
            t1, t2, " | ".join(engines),
            " headwise-omp at %d / headwise at %d (per-round median, min-max) |" % (t2, t1)
            if omp else ""))
        print("|---|%s%s" % ("---|" * len(engines), "---|" if omp else ""))
        for cid, c in cases.items():
            sp = []
            for e in engines:
                a = med(c["times"].get("%s/%d" % (e, t1), []))
                b = med(c["times"].get("%s/%d" % (e, t2), []))
                sp.append("-" if a != a or b != b else "%.2f" % (a / b))
            extra = ""
            if omp:
                r = round_ratios(c, "headwise/%d" % t1, "headwise-omp/%d" % t2)
                extra = " %.2f (%.2f-%.2f) |" % r
            print("| %s | %s |%s" % (cid, " | ".join(sp), extra))
    if "headwise-plain" in engines:
        print("\n| case | threads | headwise ms | headwise-plain ms | plain / release: of the "
              "medians | per-round median (min-max) |")
        print("|---|---|---|---|---|---|")
        for cid, c in cases.items():
            for t in tcs:
                a = med(c["times"].get("headwise-plain/%d" % t, []))
                b = med(c["times"].get("headwise/%d" % t, []))
                if a != a or b != b:
                    continue
                print("| %s | %d | %.3f | %.3f | %.3f | %.3f (%.3f-%.3f) |" % (
                    (cid, t, b * 1e3, a * 1e3, a / b) +
                    round_ratios(c, "headwise-plain/%d" % t, "headwise/%d" % t)))
    if args.png:
        plot(rows, args.png, res["versions"], engines, tcs)


def plot(rows, png, ver, engines, tcs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tcs), figsize=(6.5 * len(tcs), 5.5), sharey=True,
                             squeeze=False)
    width = 0.8 / len(engines)
    for ax, t in zip(axes[0], tcs):
        sel = [r for r in rows if r[1] == t]
        labels = [r[0] for r in sel]
        ref = headwise_at(engines, t)
        for i, e in enumerate(engines):
            vals = [r[2][e] / r[2][ref] if r[2][e] == r[2][e] else 0 for r in sel]
            ax.barh([k + (i - (len(engines) - 1) / 2) * width for k in range(len(sel))],
                    vals, height=width, label=e)
        ax.axvline(1.0, color="k", lw=0.8)
        ax.set_yticks(range(len(sel)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("engine time / %s time (log; > 1: headwise faster)" % ref)
        ax.set_title("%d thread%s" % (t, "s" if t > 1 else ""))
    axes[0][0].legend(fontsize=8)
    fig.suptitle("MultiheadAttention, float, one interleaved run: torch %s, onnxruntime %s, "
                 "headwise on %s" % (ver.get("torch"), ver.get("onnxruntime"),
                                     "OpenBLAS " + ver.get("headwise_openblas", "?")),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print("plot:", png)


if __name__ == "__main__":
    sys.exit(main())
