// SPDX-License-Identifier: MIT
// Hostile model directories: a config.json that asks for more than the weight file holds, that
// is not a regular file, that nests deeply or holds huge strings; files that disagree. Each is
// refused at once, naming the file and the key.
#include <headwise/models/bert.hpp>
#include <headwise/models/llama.hpp>
#if __has_include(<utf8proc.h>)
#include <headwise/models/sentence_embedding.hpp>
#define HEADWISE_TEST_SENTENCE 1
#endif

#include <sys/stat.h>  // mkfifo

#include <chrono>      // std::chrono::steady_clock
#include <filesystem>  // std::filesystem::copy_file, create_symlink, create_directory
#include <fstream>     // std::ifstream, std::ofstream
#include <iterator>    // std::istreambuf_iterator
#include <stdexcept>   // std::invalid_argument, std::runtime_error
#include <string>      // std::string

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/golden_models.hpp"
#include "support/instantiations.hpp"

namespace test_model_directories {

using headwise::models::BertModel;
using headwise::models::LlamaForCausalLM;
using headwise::test::ScratchDir;

namespace {

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary)
        .write(text.data(), static_cast<std::streamsize>(text.size()));
}

/// In `dir`'s config.json, the value of `key` ("key": value, on one line) becomes `value`.
void set_key(const ScratchDir& dir, const std::string& key, const std::string& value) {
    std::string config = read_text(dir.file("config.json"));
    const std::string quoted = "\"" + key + "\": ";
    const auto at = config.find(quoted);
    REQUIRE(at != std::string::npos);
    const auto begin = at + quoted.size();
    const auto end = config.find_first_of(",\n", begin);
    config.replace(begin, end - begin, value);
    write_text(dir.file("config.json"), config);
}

/// A copy of model directory `from` (config.json and model.safetensors) in `dir`, with the value
/// of `key` in config.json replaced by `value` when `key` is given.
void copy_model(const std::string& from, const ScratchDir& dir, const std::string& key = "",
                const std::string& value = "") {
    std::filesystem::copy_file(from + "/model.safetensors", dir.file("model.safetensors"),
                               std::filesystem::copy_options::overwrite_existing);
    write_text(dir.file("config.json"), read_text(from + "/config.json"));
    if (!key.empty()) set_key(dir, key, value);
}

/// Seconds since `start`.
double since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("Llama: config.json sizes are checked against the weight file before allocating",
          "[models][llama][files]") {
    const ScratchDir dir("llama-sizes");
    const std::string d = dir.path().string();
    const std::string fn = "headwise::models::LlamaForCausalLM::from_pretrained: ";
    const std::string weights = d + "/model.safetensors";
    const std::string tied = headwise::test::llama_dir("tied");
    // 100000 layers against a 2-layer file: at once, not after allocating and initialising them.
    copy_model(tied, dir, "num_hidden_layers", "100000");
    auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_pretrained(d), std::invalid_argument,
                         Message(fn + d + "/config.json: num_hidden_layers is 100000, but " +
                                 weights + " holds 2 layers (model.layers.0 to model.layers.1)"));
    CHECK(since(start) < 2.0);
    copy_model(tied, dir, "num_hidden_layers", "1");
    CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_pretrained(d), std::invalid_argument,
                         Message(fn + d + "/config.json: num_hidden_layers is 1, but " + weights +
                                 " holds 2 layers (model.layers.0 to model.layers.1)"));
    // A hidden size of 10^12 (divisible by the 4 heads, an even head dimension): a clear error.
    copy_model(tied, dir, "hidden_size", "1000000000000");
    set_key(dir, "head_dim", "null");
    start = std::chrono::steady_clock::now();
    CHECK_THROWS_MATCHES(
        LlamaForCausalLM<float>::from_pretrained(d), std::invalid_argument,
        Message(fn + d + "/config.json: hidden_size is 1000000000000, but " + weights +
                " holds model.embed_tokens.weight of shape [128, 64] (expected [128, "
                "1000000000000])"));
    CHECK(since(start) < 2.0);
    copy_model(tied, dir, "vocab_size", "1000000000000");
    CHECK_THROWS_MATCHES(
        LlamaForCausalLM<double>::from_pretrained(d), std::invalid_argument,
        Message(fn + d + "/config.json: vocab_size is 1000000000000, but " + weights +
                " holds model.embed_tokens.weight of shape [128, 64] (expected [1000000000000, "
                "64])"));
    copy_model(tied, dir, "intermediate_size", "4000000000");
    CHECK_THROWS_MATCHES(
        LlamaForCausalLM<float>::from_pretrained(d), std::invalid_argument,
        Message(fn + d + "/config.json: intermediate_size is 4000000000, but " + weights +
                " holds model.layers.0.mlp.gate_proj.weight of shape [128, 64] (expected "
                "[4000000000, 64])"));
    // The unchanged copy loads.
    copy_model(tied, dir);
    CHECK(LlamaForCausalLM<float>::from_pretrained(d).config().num_hidden_layers == 2);
}

TEST_CASE("Llama: an odd head dimension names config.json", "[models][llama][files]") {
    const ScratchDir dir("llama-head-dim");
    const std::string d = dir.path().string();
    // 64 heads of hidden_size 64: heads of 1 feature, which RoPE cannot rotate.
    copy_model(headwise::test::llama_dir("tied"), dir, "num_attention_heads", "64");
    set_key(dir, "head_dim", "null");  // (else head_dim 16 is the head dimension)
    CHECK_THROWS_MATCHES(
        LlamaForCausalLM<float>::from_pretrained(d), std::runtime_error,
        Message("headwise::models::LlamaConfig::from_json_file: " + d +
                "/config.json: num_attention_heads: the head dimension hidden_size / "
                "num_attention_heads = 64 / 64 = 1 must be even (RoPE rotates pairs of "
                "features)"));
}

TEST_CASE("BERT: config.json sizes are checked against the weight file before allocating",
          "[models][bert][files]") {
    const ScratchDir dir("bert-sizes");
    const std::string d = dir.path().string();
    const std::string fn = "headwise::models::BertModel::from_pretrained: ";
    const std::string weights = d + "/model.safetensors";
    const std::string tiny = headwise::test::tiny_bert_dir();
    copy_model(tiny, dir, "num_hidden_layers", "100000");
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_MATCHES(BertModel<float>::from_pretrained(d), std::invalid_argument,
                         Message(fn + d + "/config.json: num_hidden_layers is 100000, but " +
                                 weights + " holds 2 layers (encoder.layer.0 to encoder.layer.1)"));
    CHECK(since(start) < 2.0);
    copy_model(tiny, dir, "hidden_size", "1000000000000");
    CHECK_THROWS_MATCHES(
        BertModel<float>::from_pretrained(d), std::invalid_argument,
        Message(fn + d + "/config.json: hidden_size is 1000000000000, but " + weights +
                " holds embeddings.word_embeddings.weight of shape [40, 8] (expected [40, "
                "1000000000000])"));
    copy_model(tiny, dir, "max_position_embeddings", "100000000000");
    CHECK_THROWS_MATCHES(
        BertModel<double>::from_pretrained(d), std::invalid_argument,
        Message(fn + d + "/config.json: max_position_embeddings is 100000000000, but " + weights +
                " holds embeddings.position_embeddings.weight of shape [16, 8] (expected "
                "[100000000000, 8])"));
    copy_model(tiny, dir, "type_vocab_size", "3");
    CHECK_THROWS_MATCHES(
        BertModel<double>::from_pretrained(d), std::invalid_argument,
        Message(fn + d + "/config.json: type_vocab_size is 3, but " + weights +
                " holds embeddings.token_type_embeddings.weight of shape [2, 8] (expected [3, "
                "8])"));
    copy_model(tiny, dir, "intermediate_size", "16000000000");
    CHECK_THROWS_MATCHES(
        BertModel<double>::from_pretrained(d), std::invalid_argument,
        Message(fn + d + "/config.json: intermediate_size is 16000000000, but " + weights +
                " holds encoder.layer.0.intermediate.dense.weight of shape [16, 8] (expected "
                "[16000000000, 8])"));
    copy_model(tiny, dir);
    CHECK(BertModel<double>::from_pretrained(d).config().num_hidden_layers == 2);
}

TEST_CASE("a config.json that is no regular file is refused naming it", "[models][files]") {
    const ScratchDir dir("model-config-special");
    const std::string d = dir.path().string();
    std::filesystem::copy_file(headwise::test::tiny_bert_dir() + "/model.safetensors",
                               dir.file("model.safetensors"));
    // /dev/zero would be read forever; a directory failed inside the stream naming nothing.
    std::filesystem::create_symlink("/dev/zero", dir.file("config.json"));
    CHECK_THROWS_MATCHES(BertModel<float>::from_pretrained(d), std::runtime_error,
                         Message("headwise::models::BertConfig::from_json_file: " + d +
                                 "/config.json: is a symbolic link to a character device, not a "
                                 "regular file"));
    CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_pretrained(d), std::runtime_error,
                         Message("headwise::models::LlamaConfig::from_json_file: " + d +
                                 "/config.json: is a symbolic link to a character device, not a "
                                 "regular file"));
    std::filesystem::remove(dir.file("config.json"));
    std::filesystem::create_directory(dir.file("config.json"));
    CHECK_THROWS_MATCHES(BertModel<float>::from_pretrained(d), std::runtime_error,
                         Message("headwise::models::BertConfig::from_json_file: " + d +
                                 "/config.json: is a directory, not a regular file"));
}

TEST_CASE("hostile config.json values give bounded messages", "[models][files]") {
    const ScratchDir dir("model-config-values");
    const std::string d = dir.path().string();
    const std::string tiny = headwise::test::tiny_bert_dir();
    // A 1 MB hidden_act: 64 bytes of it in the message.
    copy_model(tiny, dir, "hidden_act", "\"" + std::string(1000000, 'g') + "\"");
    CHECK_THROWS_MATCHES(BertModel<float>::from_pretrained(d), std::runtime_error,
                         Message("headwise::models::BertConfig::from_json_file: " + d +
                                 "/config.json: hidden_act: expected \"gelu\", \"gelu_new\" or "
                                 "\"gelu_pytorch_tanh\", got \"" +
                                 std::string(64, 'g') + "\"... (1000000 bytes)"));
    copy_model(tiny, dir, "hidden_act", "[[[\"gelu\"]]]");
    CHECK_THROWS_MATCHES(BertModel<float>::from_pretrained(d), std::runtime_error,
                         Message("headwise::models::BertConfig::from_json_file: " + d +
                                 "/config.json: hidden_act: expected \"gelu\", \"gelu_new\" or "
                                 "\"gelu_pytorch_tanh\", got an array of 1 element"));
    // 200,000 nesting levels in the Llama's rope_parameters: refused before parsing.
    const std::string llama = headwise::test::llama_dir("untied");
    std::string config = read_text(llama + "/config.json");
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    const auto at = config.find("\"rope_parameters\": ") + 19;
    config.insert(at, deep + ", \"ignored\": ");
    write_text(dir.file("config.json"), config);
    try {
        LlamaForCausalLM<float>::from_pretrained(d);
        FAIL("no error");
    } catch (const std::runtime_error& e) {
        CHECK_THAT(e.what(), StartsWith("headwise::models::LlamaConfig::from_json_file: " + d +
                                        "/config.json: JSON nested deeper than 128 levels"));
    }
    write_text(dir.file("config.json"), read_text(llama + "/config.json"));
    config = read_text(llama + "/config.json");
    config.replace(config.find("\"rope_type\": \"linear\""), 21,
                   "\"rope_type\": {\"a\": [1, 2, 3]}");
    write_text(dir.file("config.json"), config);
    CHECK_THROWS_MATCHES(LlamaForCausalLM<float>::from_pretrained(d), std::runtime_error,
                         Message("headwise::models::LlamaConfig::from_json_file: " + d +
                                 "/config.json: rope_parameters: only the \"default\", "
                                 "\"linear\", \"llama3\", \"dynamic\" and \"yarn\" rope types "
                                 "are supported, got an object of 1 key"));
}

#ifdef HEADWISE_TEST_SENTENCE
TEST_CASE("sentence-transformers files that are no regular files or disagree are named",
          "[models][pooling][files]") {
    using headwise::models::SentenceEmbedder;
    using headwise::models::SentenceEmbeddingConfig;
    const ScratchDir dir("sentence-files");
    const std::string d = dir.path().string();
    const std::string fn = "headwise::models::SentenceEmbeddingConfig::from_directory: ";
    // A FIFO: opening it to read would wait for a writer that never comes.
    REQUIRE(::mkfifo(dir.file("modules.json").c_str(), 0600) == 0);
    CHECK_THROWS_MATCHES(SentenceEmbeddingConfig::from_directory(d), std::runtime_error,
                         Message(fn + d + "/modules.json: is a FIFO, not a regular file"));
    std::filesystem::remove(dir.file("modules.json"));
    std::filesystem::create_symlink("/dev/zero", dir.file("sentence_bert_config.json"));
    CHECK_THROWS_MATCHES(SentenceEmbeddingConfig::from_directory(d), std::runtime_error,
                         Message(fn + d +
                                 "/sentence_bert_config.json: is a symbolic link to a character "
                                 "device, not a regular file"));
    std::filesystem::remove(dir.file("sentence_bert_config.json"));
    write_text(dir.file("modules.json"), "[{\"type\": [[[[]]]], \"path\": \"x\"}]");
    CHECK_THROWS_MATCHES(SentenceEmbeddingConfig::from_directory(d), std::runtime_error,
                         Message(fn + d +
                                 "/modules.json: a module without a string \"type\": an object of "
                                 "2 keys"));
    write_text(dir.file("modules.json"), "{\"type\": \"" + std::string(100000, 't') + "\"}");
    CHECK_THROWS_MATCHES(SentenceEmbeddingConfig::from_directory(d), std::runtime_error,
                         Message(fn + d +
                                 "/modules.json: expected a JSON array of modules, got an object "
                                 "of 1 key"));
    write_text(dir.file("modules.json"), "[{\"type\": \"" + std::string(100000, 't') + "\"}]");
    CHECK_THROWS_MATCHES(SentenceEmbeddingConfig::from_directory(d), std::runtime_error,
                         Message(fn + d + "/modules.json: module type \"" + std::string(64, 't') +
                                 "\"... (100000 bytes) is not supported (Transformer, Pooling, "
                                 "Normalize are)"));
    std::filesystem::remove(dir.file("modules.json"));

    // The tiny BERT (vocab_size 40, max_position_embeddings 16) with files that disagree.
    copy_model(headwise::test::tiny_bert_dir(), dir);
    write_text(dir.file("sentence_bert_config.json"), "{\"max_seq_length\": 17}");
    CHECK_THROWS_MATCHES(SentenceEmbedder<float>::from_directory(d), std::runtime_error,
                         Message("headwise::models::SentenceEmbedder::from_directory: " + d +
                                 "/sentence_bert_config.json: max_seq_length is 17, but " + d +
                                 "/config.json: max_position_embeddings is 16"));
    write_text(dir.file("sentence_bert_config.json"), "{\"max_seq_length\": 16}");
    std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
    for (int i = 0; i < 36; ++i) vocab += "w" + std::to_string(i) + "\n";
    write_text(dir.file("vocab.txt"), vocab);  // 41 tokens
    CHECK_THROWS_MATCHES(SentenceEmbedder<float>::from_directory(d), std::runtime_error,
                         Message("headwise::models::SentenceEmbedder::from_directory: " + d +
                                 "/vocab.txt: holds 41 tokens, but " + d +
                                 "/config.json: vocab_size is 40 (every token id must be below "
                                 "it)"));
    vocab.resize(vocab.size() - 4);  // "w35\n" off: 40 tokens
    write_text(dir.file("vocab.txt"), vocab);
    CHECK(SentenceEmbedder<float>::from_directory(d).dimension() == 8);
}
#endif

}  // namespace test_model_directories
