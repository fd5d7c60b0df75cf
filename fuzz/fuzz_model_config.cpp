// SPDX-License-Identifier: MIT
// libFuzzer target for the model directories' configuration readers: LlamaConfig and BertConfig
// (config.json) and SentenceEmbeddingConfig (modules.json, the Pooling module's config.json,
// sentence_bert_config.json). Any bytes either give a configuration the models accept or throw
// std::runtime_error naming the function and the file in a message of bounded length.
#include <headwise/models/bert.hpp>
#include <headwise/models/llama.hpp>
#if __has_include(<utf8proc.h>)
#include <headwise/models/sentence_embedding.hpp>
#define HEADWISE_FUZZ_SENTENCE 1
#endif

#include <unistd.h>  // getpid

#include <cstddef>       // std::size_t
#include <cstdint>       // std::uint8_t
#include <cstdlib>       // std::abort
#include <filesystem>    // std::filesystem::path, create_directories, remove_all
#include <fstream>       // std::ofstream
#include <stdexcept>     // std::runtime_error
#include <string>        // std::string
#include <system_error>  // std::error_code

namespace {

/// A directory of this process's own, in memory (/dev/shm) where there is one; made for each
/// input and removed after it (libFuzzer may end with _Exit, which runs no clean-up).
const std::filesystem::path& scratch_dir() {
    static const std::filesystem::path dir =
        (std::filesystem::is_directory("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                   : std::filesystem::temp_directory_path()) /
        ("headwise_fuzz_model_config_" + std::to_string(getpid()));
    return dir;
}

void write_file(const std::filesystem::path& path, const char* data, std::size_t size) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data, static_cast<std::streamsize>(size));
}

void write_file(const std::filesystem::path& path, const std::string& text) {
    write_file(path, text.data(), text.size());
}

/// A refusal must be a std::runtime_error that starts "<function>: <dir>/" and is short: the
/// file's values are quoted up to 64 bytes, arrays and objects by their size.
void check_message(const std::runtime_error& e, const std::string& function) {
    const std::string what = e.what();
    const std::string start = function + ": " + scratch_dir().string() + "/";
    if (what.compare(0, start.size(), start) != 0 || what.size() > start.size() + 1024)
        std::abort();
}

void llama(const std::string& config) {
    constexpr const char* fn = "headwise::models::LlamaConfig::from_json_file";
    try {
        const auto c = headwise::models::LlamaConfig::from_json_file(config);
        // What the reader accepts, the model's own checks accept.
        if (c.vocab_size < 1 || c.hidden_size < 1 || c.intermediate_size < 1 ||
            c.num_hidden_layers < 1 || c.num_attention_heads < 1 || c.num_key_value_heads < 1 ||
            c.head_dim < 0 ||
            // head_dim given: H head_dim may differ from hidden_size; else hidden_size / H.
            (c.head_dim == 0 && c.hidden_size % c.num_attention_heads != 0) ||
            (c.head_dim == 0 ? c.hidden_size / c.num_attention_heads : c.head_dim) % 2 != 0 ||
            c.num_attention_heads % c.num_key_value_heads != 0 || !(c.rope_theta > 1.0) ||
            !(c.rope_scaling_factor >= 1.0) || !(c.rms_norm_eps >= 0.0))
            std::abort();
    } catch (const std::runtime_error& e) {
        check_message(e, fn);
    }
}

void bert(const std::string& config) {
    constexpr const char* fn = "headwise::models::BertConfig::from_json_file";
    try {
        const auto c = headwise::models::BertConfig::from_json_file(config);
        if (c.vocab_size < 1 || c.hidden_size < 1 || c.num_hidden_layers < 1 ||
            c.num_attention_heads < 1 || c.intermediate_size < 1 || c.max_position_embeddings < 1 ||
            c.type_vocab_size < 1 || c.pad_token_id < 0 ||
            c.hidden_size % c.num_attention_heads != 0 || !(c.layer_norm_eps >= 0.0))
            std::abort();
    } catch (const std::runtime_error& e) {
        check_message(e, fn);
    }
}

#ifdef HEADWISE_FUZZ_SENTENCE
/// The input as one of the three sentence-transformers files (chosen by its size), the other two
/// valid.
void sentence(const char* data, std::size_t size) {
    constexpr const char* fn = "headwise::models::SentenceEmbeddingConfig::from_directory";
    const std::filesystem::path& d = scratch_dir();
    write_file(d / "modules.json",
               R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.)"
               R"(Transformer"}, {"idx": 1, "name": "1", "path": "1_Pooling", "type": )"
               R"("sentence_transformers.models.Pooling"}])");
    write_file(d / "1_Pooling" / "config.json", R"({"pooling_mode_mean_tokens": true})");
    write_file(d / "sentence_bert_config.json", R"({"max_seq_length": 128})");
    const char* target[] = {"modules.json", "1_Pooling/config.json", "sentence_bert_config.json"};
    write_file(d / target[size % 3], data, size);
    try {
        const auto c = headwise::models::SentenceEmbeddingConfig::from_directory(d.string());
        if (c.max_seq_length != 0 && c.max_seq_length < 2) std::abort();
    } catch (const std::runtime_error& e) {
        check_message(e, fn);
    }
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const char* bytes = reinterpret_cast<const char*>(data);
    std::filesystem::create_directories(scratch_dir() / "1_Pooling");
    const std::string config = (scratch_dir() / "config.json").string();
    write_file(config, bytes, size);
    llama(config);
    bert(config);
#ifdef HEADWISE_FUZZ_SENTENCE
    sentence(bytes, size);
#endif
    std::error_code ignored;
    std::filesystem::remove_all(scratch_dir(), ignored);
    return 0;
}
