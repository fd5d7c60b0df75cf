# SPDX-License-Identifier: MIT
"""The engines bench/run.py times, as plug-ins: each starts one worker per thread count that
answers the one protocol (bench/common/worker.py).

  HeadwiseEngine   a headwise worker program of a build (bench_peers, bench_minilm,
                   bench_llama): `<program> worker <threads> <program args>`
  PythonEngine     torch, ONNX Runtime, CTranslate2, transformers: `run.py worker <suite>
                   <engine> <threads> <suite args>`, the suite's make_case() building each case
  LlamaCppEngine   llama.cpp: llama-bench, one run per timed request, behind the same methods
"""

import json
import os
import subprocess
import sys

from common import Worker

RUN_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run.py")


def thread_env(threads, pools="sleep", blas_threads=None):
    """The environment of a worker on `threads` threads. pools=sleep: idle thread pools sleep
    between calls instead of spinning on the cores the next worker needs: OpenBLAS's server
    polls for 2^28 cycles after a call unless OPENBLAS_THREAD_TIMEOUT is small; GNU OpenMP's
    threads spin GOMP_SPINCOUNT times (its default, well under a millisecond) before they
    sleep, so that the parallel regions of one call (a decode step starts about 150) find them
    awake, as llama.cpp's pool is within a step. OMP_WAIT_POLICY=PASSIVE, which put them to
    sleep after every region, made an OpenMP build's 2-thread SmolLM2 decode a third of its
    speed (48 against 144 tokens/s)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(blas_threads or threads), HEADWISE_BENCH_POOLS=pools)
    env.pop("OPENBLAS_CORETYPE", None)
    if pools == "sleep":
        env.pop("OMP_WAIT_POLICY", None)
        env.update(GOMP_SPINCOUNT="300000", OPENBLAS_THREAD_TIMEOUT="4")
    return env


def cmake_cache(binary):
    """What the CMake cache of the build holding `binary` says (build type, flags, BLAS)."""
    keys = ("HEADWISE_BLAS", "HEADWISE_USE_OPENMP", "CMAKE_CXX_FLAGS", "CMAKE_BUILD_TYPE")
    here = os.path.dirname(os.path.abspath(binary))
    for d in (here, os.path.dirname(here)):
        path = os.path.join(d, "CMakeCache.txt")
        if os.path.exists(path):
            found = {}
            for line in open(path):
                key, _, value = line.strip().partition("=")
                name = key.split(":")[0]
                if name in keys or (name.startswith("BLAS_") and name.endswith("_LIBRARY")
                                    and value.startswith("/")):
                    found[name] = value
            return found
    return {}


def program_facts(program, gb):
    """What a results record says of a Google Benchmark program's run: the program, its build's
    configuration and the context the program reported."""
    return {"program": program, "build": cmake_cache(program), "context": gb["context"]}


class HeadwiseEngine:
    """A headwise build's worker program. openmp: an OpenMP build, the BLAS at one thread."""

    def __init__(self, name, binary, args=(), openmp=False):
        if not binary or not os.path.exists(binary):
            raise SystemExit("%s: no worker program at %r (build it first)" % (name, binary))
        self.name, self.binary, self.args, self.openmp = name, binary, list(args), openmp

    def start(self, threads, pools="sleep"):
        """The worker on `threads` threads."""
        env = thread_env(threads, pools, blas_threads=1 if self.openmp else None)
        return Worker(self.name, threads,
                      [self.binary, "worker", str(threads)] + self.args, env)

    def describe(self):
        """The build's configuration."""
        return {"program": self.binary, "build": cmake_cache(self.binary)}


class PythonEngine:
    """An engine run in Python by a suite module (bench/suites/<suite>.py)."""

    def __init__(self, name, suite, args=()):
        self.name, self.suite, self.args = name, suite, list(args)

    def start(self, threads, pools="sleep"):
        """The worker on `threads` threads, in this interpreter's environment."""
        cmd = [sys.executable, RUN_PY, "worker", self.suite, self.name, str(threads)] + self.args
        return Worker(self.name, threads, cmd, thread_env(threads, pools))

    def describe(self):
        """The interpreter it runs on."""
        return {"python": sys.executable}


class LlamaBenchWorker:
    """llama-bench behind the Worker methods: a case's id is a llama-bench test (tg<N>: N tokens
    generated one by one from an empty context, pp<N>: one batch of N prompt tokens), a run is
    one llama-bench process of -r 1 (its own warm-up run first)."""

    def __init__(self, binary, model, threads):
        self.engine, self.threads = "llama.cpp", threads
        self.binary, self.model, self.cases, self.peak_kb = binary, model, {}, 0

    @property
    def key(self):
        """engine/threads, as results name a worker."""
        return "%s/%d" % (self.engine, self.threads)

    def setup(self, cid, words):
        """cid: tg<N> or pp<N> (the other engines' words are not llama-bench's); returns one
        run's seconds."""
        self.cases[cid] = cid
        return self.run(cid, 1)[0]

    def run(self, cid, calls):
        """One llama-bench run of the case: (seconds, seconds); CPU time is not reported."""
        test = self.cases[cid]
        n = test[2:]
        flags = ["-p", n, "-n", "0"] if test.startswith("pp") else ["-p", "0", "-n", n]
        cmd = [self.binary, "-m", self.model, "-t", str(self.threads), "-r", "1", "-o",
               "json"] + flags
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        out = p.stdout.read()
        _, status, usage = os.wait4(p.pid, 0)
        if status != 0:
            raise RuntimeError("llama-bench failed (%d): %s" % (status, " ".join(cmd)))
        self.peak_kb = max(self.peak_kb, usage.ru_maxrss)
        seconds = [r["avg_ns"] / 1e9 for r in json.loads(out)][0]
        return seconds, float("nan")

    def mem(self):
        """(the largest llama-bench resident set, 0): the kernel's maximum for the process."""
        return self.peak_kb, 0

    def info(self):
        """The llama.cpp version of the cached build."""
        version = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(self.binary))),
                               "VERSION")
        return {"version": open(version).read().strip()} if os.path.exists(version) else {}

    def free(self, cid):
        """Drops the case."""
        self.cases.pop(cid, None)

    def close(self):
        """Nothing stays running between requests."""


class LlamaCppEngine:
    """llama.cpp's llama-bench from the build of scripts/llama_cpp.sh, on a GGUF file."""

    def __init__(self, bin_dir, model):
        self.name, self.model = "llama.cpp", model
        self.binary = os.path.join(bin_dir, "llama-bench")
        if not os.path.exists(self.binary):
            raise SystemExit("llama.cpp: no llama-bench in %s (bash scripts/llama_cpp.sh)"
                             % bin_dir)

    def start(self, threads, pools="sleep"):
        """A llama-bench adapter on `threads` threads."""
        return LlamaBenchWorker(self.binary, self.model, threads)

    def describe(self):
        """The program."""
        return {"program": self.binary}
