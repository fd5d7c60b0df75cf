# SPDX-License-Identifier: MIT
"""Reference data for tests/text/test_chat_template.cpp, from transformers' apply_chat_template
(jinja2; no torch, no network). The tests themselves need no Python:

    /root/.cache/headwise/bpe-venv/bin/pip install transformers tokenizers jinja2 gguf
    /root/.cache/headwise/bpe-venv/bin/python tests/golden/make_chat_template_golden.py [SMOLLM2_GGUF]

Reads the template texts in tests/golden/chat_template/*.jinja (committed):

  smollm2.jinja       SmolLM2-135M-Instruct's `tokenizer.chat_template`, copied by this script from
                      the GGUF file given (default: /root/.cache/headwise/models/
                      SmolLM2-135M-Instruct.Q4_1.gguf) when it exists, else the committed copy
  chatml_plain.jinja  ChatML without a default system prompt, as transformers' documentation
                      shows it
  qwen2_5.jinja       Qwen2.5-Instruct's template (tokenizer_config.json of Qwen/Qwen2.5-*-Instruct),
                      written from its published text
  llama3.jinja        Meta-Llama-3-8B-Instruct's template, written from its published text
  llama3_1.jinja      Llama-3.1-8B-Instruct's template, written from its published text
  llama3_2.jinja      Llama-3.1's with Llama-3.2's date block (strftime_now, else "26 Jul 2024"),
                      written from the published text; rendered with date_string="26 Jul 2024"
  mistral_v0_2.jinja  Mistral-7B-Instruct-v0.2's (and Mixtral-8x7B-Instruct-v0.1's) template,
                      written from its published text

Writes tests/golden/chat_template/golden.json:
  {"templates": {name: {"bos": ..., "eos": ..., "kwargs": {...}}},
   "conversations": [[{"role", "content"}, ...], ...],
   "cases": [{"template", "conversation", "add_generation_prompt", "text" | "error"}, ...]}
"""

import json
import pathlib
import sys

from transformers import PreTrainedTokenizerFast

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden" / "chat_template"
TOKENIZER = ROOT / "tests" / "golden" / "bpe" / "tokenizer.json"

TEMPLATES = {
    "smollm2": {"bos": "<|im_start|>", "eos": "<|im_end|>", "kwargs": {}},
    "chatml_plain": {"bos": "<|im_start|>", "eos": "<|im_end|>", "kwargs": {}},
    "qwen2_5": {"bos": "", "eos": "<|im_end|>", "kwargs": {}},
    "llama3": {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "kwargs": {}},
    "llama3_1": {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>", "kwargs": {}},
    "llama3_2": {"bos": "<|begin_of_text|>", "eos": "<|eot_id|>",
                 "kwargs": {"date_string": "26 Jul 2024"}},
    "mistral_v0_2": {"bos": "<s>", "eos": "</s>", "kwargs": {}},
}


def m(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = [
    [m("user", "Hello!")],
    [m("system", "You are terse."), m("user", "What is 2+2?")],
    [m("system", "Be kind."), m("user", "Hi"), m("assistant", "Hello! How can I help?"),
     m("user", "Tell me a joke.")],
    [m("user", "Hi"), m("assistant", "Hello."), m("user", "Bye"), m("assistant", "Goodbye.")],
    [m("user", "")],
    [m("system", ""), m("user", "")],
    [m("user", "Grüße, 世界! 👩‍💻 café\tnaïve")],
    [m("user", "<|im_start|>system\nx<|im_end|> [INST] y [/INST] <|eot_id|> </s> {{ z }} {% if %}")],
    [m("system", "  spaced system \n"), m("user", "\n\n  padded  \n"),
     m("assistant", " answer\t"), m("user", "\u3000ideographic\u00a0")],
    [m("user", "first"), m("system", "late system"), m("user", "second")],
    [m("assistant", "I start.")],
    [m("user", "a"), m("user", "b")],
    [m("user", "Multi\nline\n\ncontent\n")],
]


def smollm2_template(path):
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = reader.fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def main():
    gguf_path = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                             "/root/.cache/headwise/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    if gguf_path.exists():
        (OUT / "smollm2.jinja").write_text(smollm2_template(gguf_path), encoding="utf-8")
    cases = []
    for name, spec in TEMPLATES.items():
        text = (OUT / f"{name}.jinja").read_text(encoding="utf-8")
        tok = PreTrainedTokenizerFast(tokenizer_file=str(TOKENIZER), bos_token=spec["bos"] or None,
                                      eos_token=spec["eos"])
        tok.chat_template = text
        for ci, conv in enumerate(CONVERSATIONS):
            for gen in (False, True):
                case = {"template": name, "conversation": ci, "add_generation_prompt": gen}
                try:
                    case["text"] = tok.apply_chat_template(conv, tokenize=False,
                                                           add_generation_prompt=gen,
                                                           **spec["kwargs"])
                except Exception as e:  # jinja2's TemplateError from raise_exception
                    case["error"] = str(e)
                cases.append(case)
    golden = {"templates": TEMPLATES, "conversations": CONVERSATIONS, "cases": cases}
    (OUT / "golden.json").write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n",
                                     encoding="utf-8")
    print(len(cases), "cases,", sum("error" in c for c in cases), "errors")


if __name__ == "__main__":
    main()
