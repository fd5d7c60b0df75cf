# SPDX-License-Identifier: MIT
"""The one worker protocol, both sides: Worker drives a worker process (a headwise program or a
Python engine), serve() answers for a Python engine. The protocol, line by line (one answer
each; bench/worker_process.hpp is the C++ side):

    setup <id> <words...>  -> ready <seconds of the warm-up call>
    run <id> <calls>       -> time <median wall s> <median CPU s of the calling thread>
    peak <id>              -> peak <kB one more call adds to the resident set at its peak>
    output <id>            -> output <words: what the last call produced, e.g. generated ids>
    mem                    -> mem <peak RSS kB (VmHWM)> <RSS kB when serving started>
    info                   -> info <key=value ...>
    free <id>              -> freed
    quit
An exception answers "error <message>" and the worker goes on.
"""

import ctypes
import subprocess
import sys
import time

from .measure import status_kb, time_calls


class Case:
    """A Python engine's case: call() is what `run` times; release() drops what a call leaves
    behind before `peak` measures one more; output() gives the words of `output`."""

    def __init__(self, call, release=None, output=None):
        self.call = call
        self.release = release or (lambda: None)
        self.output = output or (lambda: "")


def _peak_kb(case):
    """The resident set one more call adds at its peak, above the process holding the case."""
    case.release()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status_kb("VmRSS")
    case.call()
    return status_kb("VmHWM") - before


def _answer(words, cases, make_case, info, baseline):
    """The answer line to one request (words: the request split on blanks)."""
    cmd, cid = words[0], words[1] if len(words) > 1 else ""
    if cmd == "setup":
        case = make_case(words[2:])
        t0 = time.perf_counter()
        case.call()
        cases[cid] = case
        return "ready %r" % (time.perf_counter() - t0)
    if cmd == "run":
        return "time %r %r" % time_calls(cases[cid].call, int(words[2]))
    if cmd == "peak":
        return "peak %d" % _peak_kb(cases[cid])
    if cmd == "output":
        return "output " + cases[cid].output()
    if cmd == "mem":
        return "mem %d %d" % (status_kb("VmHWM"), baseline)
    if cmd == "info":
        return "info " + " ".join("%s=%s" % kv for kv in info.items())
    if cmd == "free":
        cases.pop(cid, None)
        return "freed"
    return "error unknown command %r" % cmd


def serve(make_case, info=None, stdin=None, stdout=None):
    """Answers the protocol until quit: make_case(words after "setup <id>") -> Case."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    baseline, cases = status_kb("VmRSS"), {}
    for line in stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        try:
            answer = _answer(words, cases, make_case, info or {}, baseline)
        except Exception as e:  # noqa: BLE001 - every failure is answered, the worker goes on
            answer = "error %s: %s" % (type(e).__name__, str(e).replace("\n", " ")[:200])
        print(answer, file=stdout, flush=True)


class Worker:
    """A worker process of one engine at one thread count, asked line by line."""

    def __init__(self, engine, threads, cmd, env=None):
        self.engine, self.threads = engine, threads
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env)

    @property
    def key(self):
        """engine/threads, as results name a worker."""
        return "%s/%d" % (self.engine, self.threads)

    def ask(self, line):
        """Sends one request and returns the answer's words; a dead worker or an error raises."""
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        reply = self.p.stdout.readline()
        words = reply.split()
        if not words or words[0] == "error":
            raise RuntimeError("%s on %r: %s" % (self.key, line, reply.strip() or "no answer "
                                                 "(the worker died; its stderr is above)"))
        return words

    def setup(self, cid, words):
        """Builds case cid; the warm-up call's seconds."""
        return float(self.ask("setup %s %s" % (cid, " ".join(str(w) for w in words)))[1])

    def run(self, cid, calls):
        """(median wall s, median CPU s) of `calls` calls of case cid."""
        words = self.ask("run %s %d" % (cid, calls))
        return float(words[1]), float(words[2])

    def peak(self, cid):
        """kB one more call of case cid adds at its peak."""
        return int(self.ask("peak %s" % cid)[1])

    def output(self, cid):
        """The words the last call of case cid produced."""
        return self.ask("output %s" % cid)[1:]

    def mem(self):
        """(peak RSS kB, RSS kB when the worker started serving)."""
        words = self.ask("mem")
        return int(words[1]), int(words[2])

    def info(self):
        """The worker's build and thread facts as a dict."""
        return dict(kv.split("=", 1) for kv in self.ask("info")[1:])

    def free(self, cid):
        """Drops case cid."""
        self.ask("free %s" % cid)

    def close(self):
        """Asks the worker to quit and waits for it."""
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait()
