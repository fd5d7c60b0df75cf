// SPDX-License-Identifier: MIT
// text/pretrained_tokenizer.hpp and text/streaming_decoder.hpp: a model's tokenizer, BOS rule,
// chat template and stop ids from the committed tiny model (a Hugging Face directory and a GGUF
// file, tests/golden/llama_text) against Hugging Face tokenizers' ids of the corpus; the
// streaming decoder against decode(); BpeTokenizer::encode with parse_special false.

#include <headwise/text/pretrained_tokenizer.hpp>
#include <headwise/text/streaming_decoder.hpp>

#include <cstdint>     // std::int64_t
#include <filesystem>  // std::filesystem::copy_file
#include <fstream>     // std::ifstream, std::ofstream
#include <random>      // std::mt19937
#include <stdexcept>   // std::runtime_error, std::invalid_argument, std::out_of_range
#include <string>      // std::string
#include <vector>      // std::vector

#include <nlohmann/json.hpp>

#include "support/catch.hpp"
#include "support/golden.hpp"

namespace test_pretrained_tokenizer {

using headwise::test::ScratchDir;
using headwise::text::BpeTokenizer;
using headwise::text::ChatMessage;
using headwise::text::PretrainedTokenizer;
using headwise::text::StreamingDecoder;
using Ids = std::vector<std::int64_t>;

namespace {

// Runs f; it must throw E whose what() contains `part`.
template <class E, class F>
void check_throws(F&& f, const std::string& part) {
    try {
        f();
        FAIL("no exception; expected one containing: " << part);
    } catch (const E& e) {
        CHECK_THAT(std::string(e.what()), ContainsSubstring(part));
    }
}

const std::string kSource = std::string(HEADWISE_SOURCE_DIR) + "/tests/golden/";
const std::string kHf = kSource + "llama_text/hf";
const std::string kGguf = kSource + "llama_text/model.gguf";

nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
}

const nlohmann::json& corpus() {
    static const nlohmann::json c = read_json(kSource + "bpe/corpus.json");
    return c;
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    REQUIRE(out.good());
}

// A directory holding the fixture's tokenizer.json and the given tokenizer_config.json.
void make_dir(const ScratchDir& dir, const nlohmann::json& tokenizer_config) {
    std::filesystem::copy_file(kHf + "/tokenizer.json", dir.file("tokenizer.json"));
    write_text(dir.file("tokenizer_config.json"), tokenizer_config.dump());
}

// The token of one byte: its character in GPT-2's byte alphabet (encode() takes valid UTF-8
// only).
std::int64_t byte_token(const BpeTokenizer& tok, unsigned char b) {
    std::string ch;
    headwise::detail::append_utf8(ch, headwise::text::bpe_detail::byte_alphabet()[b]);
    const auto id = tok.token_to_id(ch);
    REQUIRE(id);
    return *id;
}

}  // namespace

TEST_CASE("PretrainedTokenizer: a directory and a GGUF file encode the corpus as tokenizers does",
          "[text]") {
    for (const std::string& path : {kHf, kGguf}) {
        CAPTURE(path);
        const PretrainedTokenizer t = PretrainedTokenizer::from_pretrained(path);
        CHECK_FALSE(t.add_bos());
        const auto& texts = corpus()["texts"];
        std::size_t differ = 0;
        for (std::size_t i = 0; i < texts.size(); ++i) {
            const Ids want = corpus()["ids"][i].get<Ids>();
            if (t.encode(texts[i].get<std::string>()) != want) ++differ;
        }
        CHECK(differ == 0);
        REQUIRE(t.chat_template() != nullptr);
        CHECK(t.chat_template()->end_of_turn() == "<|im_end|>");
        // eos <|im_end|> (2): tokenizer_config.json / GGUF eos, generation_config, end of turn.
        CHECK(t.stop_ids() == Ids{2});
        CHECK(t.bos_id() == std::optional<std::int64_t>(1));
    }
}

TEST_CASE("PretrainedTokenizer: encode_chat renders SmolLM2's template without adding BOS",
          "[text]") {
    for (const std::string& path : {kHf, kGguf}) {
        CAPTURE(path);
        const PretrainedTokenizer t = PretrainedTokenizer::from_pretrained(path);
        const Ids ids = t.encode_chat({{"user", "Hi there"}});
        const std::string text =
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n";
        CHECK(ids == t.tokenizer().encode(text, /*add_special=*/false));
        CHECK(ids.front() == 1);  // <|im_start|>, written by the template
        CHECK(t.tokenizer().decode(ids) == text);
    }
}

TEST_CASE("PretrainedTokenizer: the BOS rule of the tokenizer class", "[text]") {
    // LlamaTokenizerFast rebuilds its post-processor from add_bos_token.
    ScratchDir llama("pretrained-tokenizer-llama");
    make_dir(llama, {{"tokenizer_class", "LlamaTokenizerFast"},
                     {"add_bos_token", true},
                     {"bos_token", {{"content", "<|endoftext|>"}, {"special", true}}},
                     {"eos_token", "<|im_end|>"}});
    const PretrainedTokenizer with_bos =
        PretrainedTokenizer::from_pretrained(llama.path().string());
    CHECK(with_bos.add_bos());
    CHECK(with_bos.encode("hello") == Ids{0, 261, 78, 294});
    CHECK(with_bos.chat_template() == nullptr);
    // GPT2Tokenizer keeps tokenizer.json's post-processor (which adds nothing) whatever
    // add_bos_token says.
    ScratchDir gpt2("pretrained-tokenizer-gpt2");
    make_dir(gpt2, {{"tokenizer_class", "GPT2Tokenizer"},
                    {"add_bos_token", true},
                    {"bos_token", "<|endoftext|>"}});
    const PretrainedTokenizer plain = PretrainedTokenizer::from_pretrained(gpt2.path().string());
    CHECK_FALSE(plain.add_bos());
    CHECK(plain.encode("hello") == Ids{261, 78, 294});
}

TEST_CASE("PretrainedTokenizer: errors name the file and the field", "[text]") {
    ScratchDir empty("pretrained-tokenizer-empty");
    check_throws<std::runtime_error>(
        [&] { (void)PretrainedTokenizer::from_pretrained(empty.path().string()); },
        "headwise::text::PretrainedTokenizer::from_pretrained: " + empty.file("tokenizer.json") +
            ": no such file");
    ScratchDir bad_bos("pretrained-tokenizer-bad-bos");
    make_dir(
        bad_bos,
        {{"tokenizer_class", "LlamaTokenizer"}, {"add_bos_token", true}, {"bos_token", "<s>"}});
    check_throws<std::runtime_error>(
        [&] { (void)PretrainedTokenizer::from_pretrained(bad_bos.path().string()); },
        bad_bos.file("tokenizer_config.json") +
            ": bos_token: must be a token of tokenizer.json, got \"<s>\"");
    ScratchDir bad_flag("pretrained-tokenizer-bad-flag");
    make_dir(bad_flag, {{"tokenizer_class", "LlamaTokenizerFast"}, {"add_bos_token", "yes"}});
    check_throws<std::runtime_error>(
        [&] { (void)PretrainedTokenizer::from_pretrained(bad_flag.path().string()); },
        "add_bos_token: must be true or false, got \"yes\"");
    ScratchDir bad_template("pretrained-tokenizer-bad-template");
    make_dir(bad_template, {{"chat_template", "{{ messages }}"}});
    check_throws<std::runtime_error>(
        [&] { (void)PretrainedTokenizer::from_pretrained(bad_template.path().string()); },
        bad_template.file("tokenizer_config.json") + ": ChatTemplate: unrecognised chat template");
    // No template: encode_chat says so, naming where it looked.
    ScratchDir none("pretrained-tokenizer-none");
    make_dir(none, nlohmann::json::object());
    const PretrainedTokenizer t = PretrainedTokenizer::from_pretrained(none.path().string());
    check_throws<std::invalid_argument>(
        [&] {
            (void)t.encode_chat({{"user", "hi"}});
        },
        "headwise::text::PretrainedTokenizer::encode_chat: the model has no chat "
        "template (" +
            none.file("tokenizer_config.json") + " (no chat_template))");
    check_throws<std::runtime_error>(
        [&] { (void)PretrainedTokenizer::from_pretrained(kHf + "/no-such.gguf"); }, "no-such.gguf");
}

TEST_CASE("BpeTokenizer::encode with parse_special false encodes special tokens as text",
          "[text]") {
    const PretrainedTokenizer t = PretrainedTokenizer::from_pretrained(kGguf);
    const BpeTokenizer& tok = t.tokenizer();
    const std::string text = "a<|im_end|>b<think>";
    const Ids parsed = tok.encode(text);
    CHECK(parsed == Ids{67, 2, 68, 1759});
    const Ids plain = tok.encode(text, true, /*parse_special=*/false);
    // <|im_end|> (special) is spelled out; <think> (added, not special) still matches.
    CHECK(plain.size() > 4);
    CHECK(std::find(plain.begin(), plain.end(), 2) == plain.end());
    CHECK(plain.back() == 1759);
    CHECK(tok.decode(plain) == text);
}

TEST_CASE("StreamingDecoder: the pieces join to decode(), characters whole", "[text]") {
    const PretrainedTokenizer t = PretrainedTokenizer::from_pretrained(kHf);
    const BpeTokenizer& tok = t.tokenizer();
    const auto check_stream = [&](const Ids& ids, bool skip) {
        StreamingDecoder d(tok, skip);
        std::string joined;
        for (const std::int64_t id : ids) {
            const std::string piece = d.push(id);
            // Every piece is whole characters: valid UTF-8 or U+FFFD in place of bytes.
            std::string again;
            headwise::text::bpe_detail::append_utf8_lossy(piece, again);
            CHECK(again == piece);
            joined += piece;
        }
        joined += d.finish();
        CHECK(d.pending() == 0);
        CHECK(joined == tok.decode(ids, skip));
    };
    for (const auto& ids : corpus()["ids"]) check_stream(ids.get<Ids>(), false);
    // Random sequences of single-byte tokens: split, invalid and truncated UTF-8.
    Ids bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(byte_token(tok, static_cast<unsigned char>(b)));
    REQUIRE(bytes.size() == 256);
    std::mt19937 rng(7);
    for (int round = 0; round < 2000; ++round) {
        Ids ids;
        const auto n = static_cast<int>(1 + rng() % 8);
        for (int k = 0; k < n; ++k) {
            // Mostly lead and continuation bytes, some ASCII.
            const auto r = static_cast<unsigned>(rng() % 10);
            const auto b = static_cast<unsigned>(r < 2   ? rng() % 128
                                                 : r < 6 ? 0x80 + rng() % 64
                                                         : 0xC0 + rng() % 64);
            ids.push_back(bytes[b]);
        }
        CAPTURE(ids);
        check_stream(ids, false);
        ids.push_back(2);  // <|im_end|>, special
        check_stream(ids, true);
    }
}

TEST_CASE("StreamingDecoder: a character split over tokens is held until it is complete",
          "[text]") {
    const PretrainedTokenizer t = PretrainedTokenizer::from_pretrained(kHf);
    const BpeTokenizer& tok = t.tokenizer();
    const auto byte = [&](unsigned char b) { return byte_token(tok, b); };
    StreamingDecoder d(tok);
    // U+20AC (euro sign) = E2 82 AC, one byte per token.
    CHECK(d.push(byte('a')) == "a");
    CHECK(d.push(byte(0xE2)).empty());
    CHECK(d.pending() == 1);
    CHECK(d.push(byte(0x82)).empty());
    CHECK(d.pending() == 2);
    CHECK(d.push(byte(0xAC)) == "\xE2\x82\xAC");
    CHECK(d.pending() == 0);
    // A sequence broken by the next byte: U+FFFD for E2 82, then the byte itself.
    CHECK(d.push(byte(0xE2)).empty());
    CHECK(d.push(byte(0x82)).empty());
    CHECK(d.push(byte('b')) ==
          "\xEF\xBF\xBD"
          "b");
    // An unfinished character at the end: finish() gives U+FFFD, as decode() does.
    CHECK(d.push(byte(0xF0)).empty());
    CHECK(d.push(byte(0x9F)).empty());
    CHECK(d.finish() == "\xEF\xBF\xBD");
    CHECK(d.pending() == 0);
    // Special tokens skipped give nothing and keep what is held.
    StreamingDecoder s(tok, /*skip_special=*/true);
    CHECK(s.push(byte(0xC3)).empty());
    CHECK(s.push(2).empty());
    CHECK(s.pending() == 1);
    CHECK(s.push(byte(0xA9)) == "\xC3\xA9");
    CHECK_THROWS_AS(s.push(1760), std::out_of_range);
    CHECK_THROWS_AS(s.push(-1), std::out_of_range);
}

}  // namespace test_pretrained_tokenizer
