// SPDX-License-Identifier: MIT
// text/wordpiece.hpp: BertTokenizer against Hugging Face tokenizers on a committed corpus, and
// each step of it on small cases.

#include <headwise/text/wordpiece.hpp>

#include <sys/stat.h>  // mkfifo

#include <algorithm>   // std::find_if, std::stable_sort
#include <cstdint>     // std::int64_t
#include <cstdio>      // std::snprintf
#include <cstdlib>     // std::getenv, std::free
#include <filesystem>  // std::filesystem::remove
#include <fstream>     // std::ifstream, std::ofstream
#include <memory>      // std::unique_ptr
#include <random>      // std::mt19937
#include <set>         // std::set
#include <sstream>     // std::ostringstream
#include <string>      // std::string
#include <vector>      // std::vector

#include <nlohmann/json.hpp>

#include "support/catch.hpp"
#include "support/golden.hpp"

namespace test_wordpiece {

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

namespace {

// Steps 3-5 as utf8proc_map's NFD over the whole text does them, for texts that steps 0-2 leave
// as they are and whose only white space and punctuation is ' '.
Words reference_words(const std::u32string& cps, const BertTokenizerOptions& o) {
    std::string utf8;
    for (char32_t c : cps) headwise::detail::append_utf8(utf8, static_cast<std::int32_t>(c));
    std::u32string s;
    if (o.strip_accents.value_or(o.lowercase)) {
        utf8proc_uint8_t* nfd = nullptr;
        const utf8proc_ssize_t n =
            utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                         static_cast<utf8proc_ssize_t>(utf8.size()), &nfd,
                         static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
        REQUIRE(n >= 0);
        const std::unique_ptr<utf8proc_uint8_t, void (*)(void*)> owner(nfd, std::free);
        std::u32string all;
        headwise::detail::decode_utf8(
            "reference",
            std::string(reinterpret_cast<const char*>(nfd), static_cast<std::size_t>(n)), 0, all);
        for (char32_t c : all)
            if (utf8proc_category(static_cast<std::int32_t>(c)) != UTF8PROC_CATEGORY_MN)
                s.push_back(c);
    } else {
        s = cps;
    }
    Words words(1);
    for (char32_t c : s) {
        if (c == U' ') {
            if (!words.back().empty()) words.emplace_back();
            continue;
        }
        if (o.lowercase && c == 0x130) {
            words.back() += "i\u0307";
            continue;
        }
        headwise::detail::append_utf8(words.back(),
                                      o.lowercase ? utf8proc_tolower(static_cast<std::int32_t>(c))
                                                  : static_cast<std::int32_t>(c));
    }
    if (words.back().empty()) words.pop_back();
    return words;
}

}  // namespace

TEST_CASE("BertTokenizer: NFD's canonical order of combining marks, against utf8proc_map",
          "[text][wordpiece]") {
    // Starters, precomposed letters, marks of many combining classes, nonspacing (dropped) and
    // spacing (kept, and ordered: U+1D165 216, U+1D16D 226), a nonspacing mark of class 0
    // (U+034F, which bounds the ordering though it is dropped), Hangul, and the space.
    const std::u32string pool = {U'a',  U'B',    0xC5,    0x212B,  0x1E69,  0x344,  0xF73,
                                 0xF71, 0xF72,   0x301,   0x323,   0x315,   0x31B,  0x334,
                                 0x34F, 0x1D165, 0x1D16D, 0x1D15E, 0x903,   0x93C,  0xAC01,
                                 0x130, 0x5B0,   0x345,   U' ',    0x1D16E, 0x1D166};
    BertTokenizerOptions cased_stripped;
    cased_stripped.lowercase = false;
    cased_stripped.strip_accents = true;
    for (const BertTokenizerOptions& o : {BertTokenizerOptions{}, cased_stripped}) {
        const BertTokenizer tok = small_tokenizer(o);
        std::mt19937 gen(38);
        std::size_t differ = 0;
        for (int t = 0; t < 3000; ++t) {
            std::u32string text(1 + gen() % 14, U' ');
            for (char32_t& c : text) c = pool[gen() % pool.size()];
            std::string utf8;
            for (char32_t c : text)
                headwise::detail::append_utf8(utf8, static_cast<std::int32_t>(c));
            const Words expected = reference_words(text, o);
            const Words got = tok.basic_tokenize(utf8);
            if (got != expected && ++differ <= 3) {
                CAPTURE(t, utf8, expected, got);
                CHECK(got == expected);
            }
        }
        CHECK(differ == 0);
    }
}

TEST_CASE("BertTokenizer: a 1 MB line of combining marks or of long words is tokenized whole",
          "[text][wordpiece][size]") {
    // Quadratic work (utf8proc_map's exchange sort of alternating combining classes took 3.7 s
    // for 80 KB) would not finish here in any reasonable time; linear work takes well under a
    // second.
    const std::size_t megabyte = 1 << 20;
    auto line = [&](const std::string& head, const std::string& unit) {
        std::string s = head;
        while (s.size() < megabyte) s += unit;
        return s;
    };
    const BertTokenizer tok = small_tokenizer();
    BertTokenizerOptions keep_accents;
    keep_accents.strip_accents = false;
    const BertTokenizer kept = small_tokenizer(keep_accents);
    const std::string alternating = line("a", "\u0323\u0301");
    CHECK(tok.tokenize(alternating) == Ids{15});
    CHECK(tok.tokenize(line("a", "\u0301")) == Ids{15});
    CHECK(kept.tokenize(alternating) == Ids{1});  // one word of 699,051 characters: [UNK]
    CHECK(tok.encode(alternating) == Ids{2, 15, 3});
    // Spacing marks of alternating classes are kept, so sorted: in canonical order, [UNK].
    CHECK(tok.tokenize(line("a", "\U0001D16D\U0001D165")) == Ids{1});
    // Words as long as a word may be, each in 100 one-character pieces (128 KB of them): a
    // candidate piece is never longer than the longest vocabulary entry.
    const BertTokenizer pieces({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x", "##x"});
    std::string words;
    while (words.size() < megabyte / 8) words += std::string(100, 'x') + " ";
    const Ids ids = pieces.tokenize(words);
    CHECK(ids.size() == (words.size() / 101) * 100);
    CHECK(pieces.encode(words).size() == 512);
    // Special tokens everywhere.
    CHECK(tok.tokenize(line("", "[SEP]")).size() == megabyte / 5 + 1);
}

TEST_CASE("BertTokenizer: many special tokens, some prefixes of others, matched leftmost-longest",
          "[text][wordpiece]") {
    std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a",
                                      "b",     "##a",   "##b",   "<",     ">",      "x"};
    BertTokenizerOptions o;
    // 1000 tokens: <t0> ... <t999>, and the prefixes <t1, <t12 and the extensions <t1>> and
    // <t12>a of some of them, listed in an order unrelated to their length.
    for (int i = 0; i < 1000; ++i)
        o.additional_special_tokens.push_back("<t" + std::to_string(i) + ">");
    for (const char* t : {"<t1", "<t12>a", "<t12", "<t1>>", "[SEP][SEP]", "\xff\xfe"})
        o.additional_special_tokens.push_back(t);
    for (const std::string& t : o.additional_special_tokens) vocab.push_back(t);
    const BertTokenizer tok(vocab, o);
    auto id = [&](const std::string& t) { return *tok.token_to_id(t); };
    CHECK(tok.tokenize("<t12>ab") == Ids{id("<t12>a"), 6});
    CHECK(tok.tokenize("<t12>b") == Ids{id("<t12>"), 6});
    CHECK(tok.tokenize("<t12<t1>>>") == Ids{id("<t12"), id("<t1>>"), 10});
    CHECK(tok.tokenize("<t1<t999>") == Ids{id("<t1"), id("<t999>")});
    CHECK(tok.tokenize("<t1000>") == Ids{id("<t1"), 1, 10});  // <t1, then 000 ([UNK]) and >
    CHECK(tok.tokenize("[SEP][SEP][SEP]") == Ids{id("[SEP][SEP]"), 3});
    CHECK(tok.tokenize("a\xff\xfe"
                       "b") == Ids{5, id("\xff\xfe"), 6});  // not UTF-8, but special

    // Random texts of token fragments, against the scan that tries every token at every byte.
    std::vector<std::pair<std::string, std::int64_t>> longest_first;
    for (const std::string& t : {std::string("[UNK]"), std::string("[SEP]"), std::string("[PAD]"),
                                 std::string("[CLS]"), std::string("[MASK]")})
        longest_first.emplace_back(t, id(t));
    for (const std::string& t : o.additional_special_tokens) longest_first.emplace_back(t, id(t));
    std::stable_sort(longest_first.begin(), longest_first.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    const std::vector<std::string> fragments = {"<t", "1", "2",     "12",  ">",  "<t1>", "a",
                                                "b",  " ", "[SEP]", "[SE", "P]", "<t99"};
    std::mt19937 gen(7);
    for (int t = 0; t < 2000; ++t) {
        std::string text;
        for (std::size_t k = 1 + gen() % 12; k > 0; --k)
            text += fragments[gen() % fragments.size()];
        Ids expected;
        std::size_t start = 0, i = 0;
        while (i < text.size()) {
            const auto m = std::find_if(
                longest_first.begin(), longest_first.end(),
                [&](const auto& s) { return text.compare(i, s.first.size(), s.first) == 0; });
            if (m == longest_first.end()) {
                ++i;
                continue;
            }
            const Ids gap = tok.tokenize(text.substr(start, i - start));
            expected.insert(expected.end(), gap.begin(), gap.end());
            expected.push_back(m->second);
            i += m->first.size();
            start = i;
        }
        const Ids gap = tok.tokenize(text.substr(start));
        expected.insert(expected.end(), gap.begin(), gap.end());
        CAPTURE(text);
        REQUIRE(tok.tokenize(text) == expected);
    }
}

TEST_CASE("BertTokenizer::from_directory: errors name vocab.txt and quote a bounded prefix",
          "[text][wordpiece][files][errors]") {
    const ScratchDir dir("wordpiece-errors");
    const std::string fn = "headwise::text::BertTokenizer::from_directory: ";
    const std::string config = dir.file("tokenizer_config.json");
    std::ofstream(dir.file("vocab.txt")) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n";
    // A special token the vocabulary lacks: vocab.txt, and where the token was named.
    CHECK_THROWS_MATCHES(BertTokenizer::from_directory(dir.path().string()), std::runtime_error,
                         Message(fn + dir.file("vocab.txt") +
                                 ": mask_token '[MASK]' (the default) is not a token of the "
                                 "vocabulary"));
    std::ofstream(config) << R"({"mask_token": "[PAD]", "unk_token": "<unk>"})";
    CHECK_THROWS_MATCHES(BertTokenizer::from_directory(dir.path().string()), std::runtime_error,
                         Message(fn + dir.file("vocab.txt") + ": unk_token '<unk>' (from " +
                                 config + ") is not a token of the vocabulary"));
    std::ofstream(dir.file("special_tokens_map.json"))
        << R"({"additional_special_tokens": ["hello", ")" << std::string(100000, 'z') << R"("]})";
    std::ofstream(config) << R"({"mask_token": "[PAD]"})";
    CHECK_THROWS_MATCHES(
        BertTokenizer::from_directory(dir.path().string()), std::runtime_error,
        Message(fn + dir.file("vocab.txt") + ": additional_special_tokens '" +
                std::string(64, 'z') + "'... (100000 bytes) (from " +
                dir.file("special_tokens_map.json") + ") is not a token of the vocabulary"));
    std::filesystem::remove(dir.file("special_tokens_map.json"));
    // Values from a file are quoted up to 64 bytes, at a character boundary; arrays and objects
    // by their size, however deep.
    std::ofstream(config) << R"({"do_lower_case": ")" << std::string(63, 'y') << "\u00e9"
                          << std::string(1 << 20, 'y') << R"("})";
    CHECK_THROWS_MATCHES(
        BertTokenizer::from_directory(dir.path().string()), std::runtime_error,
        Message(fn + config + ": 'do_lower_case' must be true, false or null, got \"" +
                std::string(63, 'y') + "\"... (1048641 bytes)"));
    std::ofstream(config) << R"({"strip_accents": )" << std::string(100, '[')
                          << std::string(100, ']') << "}";
    CHECK_THROWS_MATCHES(BertTokenizer::from_directory(dir.path().string()), std::runtime_error,
                         Message(fn + config +
                                 ": 'strip_accents' must be true, false or null, got an array of "
                                 "1 element"));
    std::ofstream(config) << R"({"unk_token": {"content": 1, "lstrip": false}})";
    CHECK_THROWS_MATCHES(BertTokenizer::from_directory(dir.path().string()), std::runtime_error,
                         Message(fn + config +
                                 ": 'unk_token' is neither a string nor an object with 'content', "
                                 "got an object of 2 keys"));
    // An optional file that is a FIFO is refused, not opened: opening it would wait for a
    // writer that never comes.
    std::filesystem::remove(config);
    REQUIRE(::mkfifo(config.c_str(), 0600) == 0);
    CHECK_THROWS_MATCHES(BertTokenizer::from_directory(dir.path().string()), std::runtime_error,
                         Message(fn + config + ": is a FIFO, not a regular file"));
    std::filesystem::remove(config);
    // The constructor quotes a bounded prefix too.
    BertTokenizerOptions o;
    o.unk_token = std::string(1000, 'u');
    CHECK_THROWS_MATCHES(small_tokenizer(o), std::invalid_argument,
                         Message("headwise::text::BertTokenizer::BertTokenizer: options.unk_token: "
                                 "must be a token of the vocabulary, got '" +
                                 std::string(64, 'u') + "'... (1000 bytes)"));
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

}  // namespace test_wordpiece
