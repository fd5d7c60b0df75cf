// SPDX-License-Identifier: MIT
// text/wordpiece.hpp: BertTokenizer against Hugging Face tokenizers on a committed corpus, and
// each step of it on small cases.

#include <headwise/text/wordpiece.hpp>

#include <cstdint>  // std::int64_t
#include <cstdio>   // std::snprintf
#include <cstdlib>  // std::getenv
#include <fstream>  // std::ifstream, std::ofstream
#include <set>      // std::set
#include <sstream>  // std::ostringstream
#include <string>   // std::string
#include <vector>   // std::vector

#include <nlohmann/json.hpp>

#include "support/catch.hpp"
#include "support/golden.hpp"

using headwise::test::ScratchDir;
using headwise::text::BertTokenizer;
using headwise::text::BertTokenizerOptions;
using Ids = std::vector<std::int64_t>;
using Words = std::vector<std::string>;

namespace {

const std::string kGolden = std::string(HEADWISE_SOURCE_DIR) + "/tests/golden/minilm/";

// A vocabulary with the special tokens at BERT's ids' order and a few pieces.
BertTokenizer small_tokenizer(BertTokenizerOptions o = {}) {
    return BertTokenizer(
        {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "hello", "world",
         ",",     "!",     "cafe",  "中",    "文",     "a",  "##b",   "##bc",   "abc",   "x"},
        o);
}

}  // namespace

TEST_CASE("BertTokenizer gives Hugging Face tokenizers' ids on the whole corpus",
          "[text][wordpiece][golden]") {
    std::ifstream in(kGolden + "corpus.json");
    REQUIRE(in.good());
    const nlohmann::json corpus = nlohmann::json::parse(in);
    BertTokenizerOptions o;  // all-MiniLM-L6-v2's tokenizer_config.json: BERT's defaults
    o.max_length = corpus["max_length"].get<headwise::Index>();
    const BertTokenizer tok(headwise::text::read_vocab(kGolden + "vocab.txt"), o);
    REQUIRE(tok.vocab_size() == 30522);
    const auto& texts = corpus["texts"];
    const auto& ids = corpus["ids"];
    REQUIRE(texts.size() >= 500);
    std::size_t differ = 0, truncated = 0;
    for (std::size_t i = 0; i < texts.size(); ++i) {
        const std::string text = texts[i].get<std::string>();
        const Ids expected = ids[i].get<Ids>();
        const Ids got = tok.encode(text);
        truncated += expected.size() == 256 ? 1 : 0;
        if (got != expected) {
            ++differ;
            if (differ <= 5) {
                CAPTURE(i, text, expected, got);
                CHECK(got == expected);
            }
        }
    }
    INFO(differ << " of " << texts.size() << " texts differ");
    CHECK(differ == 0);
    CHECK(truncated >= 10);  // the corpus exercises truncation
}

TEST_CASE("BertTokenizer: normalisation and pre-tokenization, step by step", "[text][wordpiece]") {
    const BertTokenizer tok = small_tokenizer();
    // Lower case, accents stripped, punctuation on its own.
    CHECK(tok.basic_tokenize("Héllo, WORLD!") == Words{"hello", ",", "world", "!"});
    // ASCII symbols count as punctuation; Unicode symbols (So, Sm) do not.
    CHECK(tok.basic_tokenize("a$b^c`d") == Words{"a", "$", "b", "^", "c", "`", "d"});
    CHECK(tok.basic_tokenize("a\u00a9b") == Words{"a\u00a9b"});
    // Every CJK ideograph is a word; kana are not split, but lose their voicing marks (NFD
    // splits が into か and U+3099, a nonspacing mark), as in BERT.
    CHECK(tok.basic_tokenize("中文abc") == Words{"中", "文", "abc"});
    CHECK(tok.basic_tokenize("ひらがな") == Words{"ひらかな"});
    // Controls and format characters vanish; all Unicode white space separates.
    CHECK(tok.basic_tokenize("ze\u200bro\x01 \t a\u3000b\u00a0c\u2028d") ==
          Words{"zero", "a", "b", "c", "d"});
    // U+0130's full lower case is i + U+0307, which accent stripping then drops.
    CHECK(tok.basic_tokenize("\u0130") == Words{"i"});
    BertTokenizerOptions keep_accents;
    keep_accents.strip_accents = false;
    CHECK(small_tokenizer(keep_accents).basic_tokenize("\u0130É") == Words{"i\u0307\u00e9"});
    // NFD puts combining marks in canonical order before they are dropped.
    CHECK(tok.basic_tokenize("a\u0323\u0301 A\u0301\u0323") == Words{"a", "a"});
    // Special tokens written in the text pass through whole, exactly as written.
    CHECK(tok.basic_tokenize("x[SEP]y [unk]") == Words{"x", "[SEP]", "y", "[", "unk", "]"});
    CHECK(tok.basic_tokenize("") == Words{});
    CHECK(tok.basic_tokenize(" \t\n ") == Words{});
    BertTokenizerOptions cased;
    cased.lowercase = false;
    CHECK(small_tokenizer(cased).basic_tokenize("Héllo") == Words{"Héllo"});
}

TEST_CASE("BertTokenizer: WordPiece, [UNK], [CLS]/[SEP], truncation and batches",
          "[text][wordpiece]") {
    const BertTokenizer tok = small_tokenizer();
    CHECK(tok.wordpiece("unaffable") == Ids{5, 6, 7});
    CHECK(tok.wordpiece("abc") == Ids{18});        // the longest match first
    CHECK(tok.wordpiece("abcb") == Ids{18, 16});   // then "##"-pieces
    CHECK(tok.wordpiece("unaffablez") == Ids{1});  // an unmatched part: the whole word is [UNK]
    CHECK(tok.wordpiece(std::string(100, 'x')) == Ids{1});  // no "##x" piece
    BertTokenizerOptions short_words;
    short_words.max_input_chars_per_word = 3;
    CHECK(small_tokenizer(short_words).wordpiece("abc") == Ids{18});
    CHECK(small_tokenizer(short_words).wordpiece("abcb") == Ids{1});  // 4 characters > 3
    CHECK(tok.encode("Hello, world!") == Ids{2, 8, 10, 9, 11, 3});
    CHECK(tok.encode("") == Ids{2, 3});
    CHECK(tok.encode("[MASK] x") == Ids{2, 4, 19, 3});

    BertTokenizerOptions four;
    four.max_length = 4;
    CHECK(small_tokenizer(four).encode("hello world hello") == Ids{2, 8, 9, 3});

    const headwise::text::BertBatch batch = tok.encode_batch({"hello", "", "hello world !"});
    REQUIRE(batch.input_ids.shape() == headwise::Shape{3, 5});
    CHECK(batch.lengths == std::vector<headwise::Index>{3, 2, 5});
    const Ids flat(batch.input_ids.data(), batch.input_ids.data() + 15);
    CHECK(flat == Ids{2, 8, 3, 0, 0, 2, 3, 0, 0, 0, 2, 8, 9, 11, 3});
    const std::vector<bool> pad(batch.padding_mask.data(), batch.padding_mask.data() + 15);
    CHECK(pad == std::vector<bool>{false, false, false, true, true, false, false, true, true, true,
                                   false, false, false, false, false});
    CHECK(tok.encode_batch({}).input_ids.shape() == headwise::Shape{0, 0});
}

TEST_CASE("BertTokenizer: errors name the function, the argument and the value",
          "[text][wordpiece][errors]") {
    const BertTokenizer tok = small_tokenizer();
    CHECK_THROWS_MATCHES(tok.encode("ok \xff bad"), std::invalid_argument,
                         Message("headwise::text::BertTokenizer::tokenize: text: invalid UTF-8 "
                                 "at byte 3"));
    CHECK_THROWS_MATCHES(tok.encode("[CLS]\xc3"), std::invalid_argument,
                         Message("headwise::text::BertTokenizer::tokenize: text: invalid UTF-8 "
                                 "at byte 5"));
    CHECK_THROWS_MATCHES(BertTokenizer({"[PAD]", "[CLS]"}), std::invalid_argument,
                         Message("headwise::text::BertTokenizer::BertTokenizer: "
                                 "options.unk_token: must be a token of the vocabulary, got "
                                 "'[UNK]'"));
    BertTokenizerOptions one;
    one.max_length = 1;
    CHECK_THROWS_MATCHES(small_tokenizer(one), std::invalid_argument,
                         Message("headwise::text::BertTokenizer::BertTokenizer: "
                                 "options.max_length: must be at least 2 ([CLS] and [SEP]), "
                                 "got 1"));
    CHECK_THROWS_MATCHES(tok.id_to_token(20), std::out_of_range,
                         Message("headwise::text::BertTokenizer::id_to_token: id: expected an "
                                 "id in [0, 20), got 20"));
    CHECK(tok.id_to_token(8) == "hello");
    CHECK(tok.token_to_id("world") == 9);
    CHECK(!tok.token_to_id("nope"));
}

TEST_CASE("BertTokenizer::from_directory reads vocab.txt and the tokenizer config",
          "[text][wordpiece][files]") {
    const ScratchDir dir("wordpiece");
    CHECK_THROWS_MATCHES(
        BertTokenizer::from_directory(dir.path().string()), std::runtime_error,
        Message("headwise::text::read_vocab: " + dir.file("vocab.txt") + ": cannot open the file"));
    std::ofstream(dir.file("vocab.txt")) << "[PAD]\n[UNK]\r\n[CLS]\n[SEP]\n[MASK]\nhéllo\n<s>\n";
    std::ofstream(dir.file("tokenizer_config.json"))
        << R"({"do_lower_case": false, "strip_accents": null, "model_max_length": 3,
              "additional_special_tokens": [{"content": "<s>"}]})";
    const BertTokenizer tok = BertTokenizer::from_directory(dir.path().string());
    CHECK(tok.vocab_size() == 7);
    CHECK(tok.unk_id() == 1);
    CHECK(!tok.options().lowercase);
    CHECK(tok.options().max_length == 3);
    CHECK(tok.encode("héllo<s>") == Ids{2, 5, 3});
    CHECK(BertTokenizer::from_directory(dir.path().string(), 8).encode("héllo<s>") ==
          Ids{2, 5, 6, 3});
    std::ofstream(dir.file("tokenizer_config.json")) << R"({"do_lower_case": 1})";
    CHECK_THROWS_MATCHES(BertTokenizer::from_directory(dir.path().string()), std::runtime_error,
                         Message("headwise::text::BertTokenizer::from_directory: " +
                                 dir.file("tokenizer_config.json") +
                                 ": 'do_lower_case' must be true, false or null, got 1"));
    std::ofstream(dir.file("tokenizer_config.json")) << "{";
    CHECK_THROWS_MATCHES(BertTokenizer::from_directory(dir.path().string()), std::runtime_error,
                         Message("headwise::text::BertTokenizer::from_directory: " +
                                 dir.file("tokenizer_config.json") + ": not valid JSON"));
}

// Every code point through the first five steps, against what tokenizers makes of "a" + c + "b"
// (make_minilm_golden.py --sweep writes it; 40 MB, so not committed). The code points where they
// differ must be exactly those of unicode_skew.txt: characters whose category changed between
// the Unicode tables tokenizers uses and utf8proc's.
TEST_CASE("BertTokenizer: every code point, against a sweep of tokenizers (optional)",
          "[text][wordpiece][sweep]") {
    const char* sweep = std::getenv("HEADWISE_WORDPIECE_SWEEP");
    if (!sweep) {
        WARN("HEADWISE_WORDPIECE_SWEEP is not set: the every-code-point comparison did not run");
        return;
    }
    std::set<std::string> skew;
    {
        std::ifstream in(kGolden + "unicode_skew.txt");
        for (std::string line; std::getline(in, line);) skew.insert(line);
    }
    std::ifstream in(sweep);
    REQUIRE(in.good());
    const BertTokenizer strip = small_tokenizer();
    BertTokenizerOptions o;
    o.strip_accents = false;
    const BertTokenizer keep = small_tokenizer(o);
    const BertTokenizer* tok = &strip;
    std::set<std::string> differ;
    std::size_t lines = 0;
    for (std::string line; std::getline(in, line);) {
        if (line == "strip" || line == "nostrip") {
            tok = line == "strip" ? &strip : &keep;
            continue;
        }
        ++lines;
        const auto bar = line.find('|');
        const std::string cp = line.substr(0, bar);
        std::string text = "a";
        headwise::detail::append_utf8(text, static_cast<std::int32_t>(std::stol(cp, nullptr, 16)));
        text += "b";
        std::string got;
        for (const std::string& w : tok->basic_tokenize(text)) {
            std::u32string cps;
            headwise::detail::decode_utf8("sweep", w, 0, cps);
            std::string hex;
            for (char32_t c : cps) {
                char buf[16];
                std::snprintf(buf, sizeof buf, hex.empty() ? "%x" : " %x",
                              static_cast<unsigned>(c));
                hex += buf;
            }
            got += (got.empty() ? "" : "|") + hex;
        }
        if (got != line.substr(bar + 1)) differ.insert(cp);
    }
    INFO(lines << " code points compared; " << differ.size() << " differ");
    CHECK(lines == 2 * 1112064);
    CHECK(differ == skew);
}
