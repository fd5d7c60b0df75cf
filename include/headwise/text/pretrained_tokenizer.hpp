// SPDX-License-Identifier: MIT
// PretrainedTokenizer: a causal LM's tokenizer, BOS rule, chat template and stop tokens, loaded
// from a Hugging Face model directory or a GGUF file's metadata.
#pragma once

#if !__has_include(<utf8proc.h>) || !__has_include(<nlohmann/json.hpp>)
#error \
    "headwise/text/pretrained_tokenizer.hpp needs utf8proc (Debian: libutf8proc-dev) and \
nlohmann/json (Debian: nlohmann-json3-dev); headwise::headwise links both when CMake finds them"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>    // std::find
#include <cstdint>      // std::int64_t
#include <filesystem>   // std::filesystem::exists, is_directory
#include <optional>     // std::optional
#include <stdexcept>    // std::runtime_error, std::invalid_argument
#include <string>       // std::string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

#include "../io/detail/json_file.hpp"
#include "../io/gguf.hpp"
#include "bpe.hpp"
#include "chat_template.hpp"

namespace headwise::text {

/// What a program needs besides the weights to turn text into a causal LM's ids and back:
/// the byte-level BPE tokenizer with the model's BOS rule, its chat template (when it has one),
/// and the ids at which generation stops.
class PretrainedTokenizer {
public:
    /// From `path`: a GGUF file when the path ends in ".gguf" or names a regular file
    /// (from_gguf(io::load_gguf)),
    /// else a Hugging Face model directory:
    ///   tokenizer.json         the tokenizer (BpeTokenizer::from_tokenizer_json; required);
    ///   tokenizer_config.json  chat_template (a string, or a list whose "default" entry is
    ///                          taken), bos_token, eos_token (strings or {"content": ...}),
    ///                          tokenizer_class and add_bos_token (optional file);
    ///   chat_template.jinja    the chat template, taking precedence over tokenizer_config's;
    ///   generation_config.json eos_token_id (an integer or a list; optional file).
    /// The BOS rule is transformers': tokenizer.json's post-processor adds BOS or not, except
    /// for the tokenizer classes that rebuild it from tokenizer_config.json's add_bos_token
    /// (LlamaTokenizer, LlamaTokenizerFast, CodeLlamaTokenizer(Fast), GemmaTokenizer(Fast)),
    /// where a boolean add_bos_token decides, BOS being bos_token.
    /// Throws std::runtime_error naming the file and the field.
    static PretrainedTokenizer from_pretrained(const std::string& path);
    /// From GGUF metadata: BpeTokenizer::from_gguf (tokenizer.ggml.add_bos_token is the BOS
    /// rule, as llama.cpp reads it), tokenizer.chat_template, and the stop ids
    /// tokenizer.ggml.eos_token_id and tokenizer.ggml.eot_token_id.
    static PretrainedTokenizer from_gguf(const io::GgufFile& file);

    const BpeTokenizer& tokenizer() const noexcept { return tokenizer_; }
    /// True when encode() starts with BOS.
    bool add_bos() const noexcept { return tokenizer_.config().add_bos; }
    std::optional<std::int64_t> bos_id() const noexcept { return tokenizer_.bos_id(); }
    /// The chat template, or nullptr when the model has none.
    const ChatTemplate* chat_template() const noexcept {
        return chat_template_ ? &*chat_template_ : nullptr;
    }
    /// Where the template came from, or where it was looked for (for messages).
    const std::string& chat_template_source() const noexcept { return template_source_; }
    /// The ids that end a generated answer: the end-of-sequence ids of the tokenizer (and of
    /// generation_config.json or GGUF's eot), and the template's end-of-turn token, each once.
    const std::vector<std::int64_t>& stop_ids() const noexcept { return stop_ids_; }
    /// What the tokenizer was loaded from (a directory or a file).
    const std::string& name() const noexcept { return name_; }

    /// `text` as the model's tokenizer encodes it for a prompt: BOS first by the BOS rule,
    /// special tokens written in the text matched (transformers' tokenizer(text)).
    std::vector<std::int64_t> encode(std::string_view text) const {
        return tokenizer_.encode(text, /*add_special=*/true);
    }
    /// The conversation through the chat template (with the opening of the assistant's turn
    /// when add_generation_prompt), tokenized without adding BOS, as transformers'
    /// apply_chat_template(tokenize=True) does (a template that wants BOS writes it). Throws
    /// std::invalid_argument naming the template source when the model has no chat template.
    std::vector<std::int64_t> encode_chat(const std::vector<ChatMessage>& conversation,
                                          bool add_generation_prompt = true) const;

private:
    PretrainedTokenizer(BpeTokenizer tokenizer, std::optional<ChatTemplate> chat_template,
                        std::string template_source, std::vector<std::int64_t> stop_ids,
                        std::string name)
        : tokenizer_(std::move(tokenizer)),
          chat_template_(std::move(chat_template)),
          template_source_(std::move(template_source)),
          stop_ids_(std::move(stop_ids)),
          name_(std::move(name)) {}

    BpeTokenizer tokenizer_;
    std::optional<ChatTemplate> chat_template_;
    std::string template_source_;
    std::vector<std::int64_t> stop_ids_;
    std::string name_;
};

// ---- definitions ----------------------------------------------------------------------------

namespace pretrained_tokenizer_detail {

inline void add_unique(std::vector<std::int64_t>& ids, std::int64_t id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

/// The end-of-turn token's id, added to the stop ids (it is a token of every template family).
inline void add_end_of_turn(const BpeTokenizer& tokenizer, const std::optional<ChatTemplate>& t,
                            std::vector<std::int64_t>& ids) {
    if (!t) return;
    if (const auto id = tokenizer.token_to_id(t->end_of_turn())) add_unique(ids, *id);
}

}  // namespace pretrained_tokenizer_detail

inline PretrainedTokenizer PretrainedTokenizer::from_pretrained(const std::string& path) {
    constexpr const char* fn = "headwise::text::PretrainedTokenizer::from_pretrained";
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool gguf_name = path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
    if (gguf_name || fs::is_regular_file(path, ec)) return from_gguf(io::load_gguf(path));
    const std::string base = path.empty() || path.back() == '/' ? path : path + "/";
    const std::string tokenizer_path = base + "tokenizer.json";
    const auto fail = [&](const std::string& file, const std::string& field,
                          const std::string& what) {
        throw std::runtime_error(std::string(fn) + ": " + file + ": " + field + ": " + what);
    };
    if (!fs::exists(tokenizer_path, ec))
        throw std::runtime_error(std::string(fn) + ": " + tokenizer_path +
                                 ": no such file (a Hugging Face model directory holds the "
                                 "tokenizer in tokenizer.json)");
    const nlohmann::json tj = headwise::detail::read_json_file(fn, tokenizer_path);
    BpeTokenizer parsed = BpeTokenizer::from_json(tj, tokenizer_path);

    // tokenizer_config.json (optional).
    const std::string config_path = base + "tokenizer_config.json";
    nlohmann::json tc = nlohmann::json::object();
    if (fs::exists(config_path, ec)) tc = headwise::detail::read_json_file(fn, config_path);
    // A token field: a string, {"content": string}, null or absent.
    const auto token_field = [&](const char* key) -> std::optional<std::string> {
        const auto it = tc.find(key);
        if (it == tc.end() || it->is_null()) return std::nullopt;
        if (it->is_string()) return it->get<std::string>();
        if (it->is_object()) {
            const auto c = it->find("content");
            if (c != it->end() && c->is_string()) return c->get<std::string>();
        }
        fail(config_path, key,
             "must be a string, {\"content\": string} or null, got " +
                 headwise::detail::describe_json(*it));
        return std::nullopt;
    };
    const auto id_of = [&](const char* key, const std::string& token) {
        const auto id = parsed.token_to_id(token);
        if (!id)
            fail(
                config_path, key,
                "must be a token of tokenizer.json, got " + headwise::detail::quote_bounded(token));
        return *id;
    };
    const std::optional<std::string> bos_token = token_field("bos_token");
    const std::optional<std::string> eos_token = token_field("eos_token");

    // The BOS rule (see the declaration).
    BpeConfig config = parsed.config();
    bool rebuilt = false;
    if (const auto cls = tc.find("tokenizer_class"); cls != tc.end() && cls->is_string()) {
        const std::string c = cls->get<std::string>();
        for (const char* name : {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
                                 "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"})
            if (c == name) rebuilt = true;
    }
    if (const auto it = tc.find("add_bos_token"); rebuilt && it != tc.end() && !it->is_null()) {
        if (!it->is_boolean())
            fail(config_path, "add_bos_token",
                 "must be true or false, got " + headwise::detail::describe_json(*it));
        config.add_bos = it->get<bool>();
        if (config.add_bos) {
            if (!bos_token)
                fail(config_path, "bos_token", "must name a token when add_bos_token is true");
            config.bos_id = id_of("bos_token", *bos_token);
        }
    }
    if (!config.bos_id && bos_token) config.bos_id = id_of("bos_token", *bos_token);
    if (!config.eos_id && eos_token) config.eos_id = id_of("eos_token", *eos_token);
    BpeTokenizer tokenizer(std::move(config));

    // The chat template: chat_template.jinja, else tokenizer_config.json's.
    std::optional<std::string> source;
    std::string template_source = config_path + " (no chat_template)";
    const std::string jinja_path = base + "chat_template.jinja";
    if (fs::exists(jinja_path, ec)) {
        source =
            headwise::detail::read_text_file(fn, jinja_path, headwise::detail::kMaxTextFileBytes);
        template_source = jinja_path;
    } else if (const auto it = tc.find("chat_template"); it != tc.end() && !it->is_null()) {
        template_source = config_path;
        if (it->is_string()) {
            source = it->get<std::string>();
        } else if (it->is_array()) {
            for (const auto& entry : *it)
                if (entry.is_object() && entry.value("name", "") == "default" &&
                    entry.contains("template") && entry["template"].is_string())
                    source = entry["template"].get<std::string>();
            if (!source)
                fail(config_path, "chat_template",
                     "a list of templates must have one named \"default\"");
        } else {
            fail(config_path, "chat_template",
                 "must be a string or a list of {name, template}, got " +
                     headwise::detail::describe_json(*it));
        }
    }
    std::optional<ChatTemplate> chat;
    if (source) {
        try {
            chat.emplace(*source, bos_token.value_or(""), eos_token.value_or(""));
        } catch (const std::invalid_argument& e) {
            throw std::runtime_error(std::string(fn) + ": " + template_source + ": " + e.what());
        }
    }

    // Stop ids: the tokenizer's eos, generation_config.json's, the end of turn.
    std::vector<std::int64_t> stops;
    if (tokenizer.eos_id()) stops.push_back(*tokenizer.eos_id());
    const std::string generation_path = base + "generation_config.json";
    if (fs::exists(generation_path, ec)) {
        const nlohmann::json g = headwise::detail::read_json_file(fn, generation_path);
        if (const auto it = g.find("eos_token_id"); it != g.end() && !it->is_null()) {
            const auto one = [&](const nlohmann::json& v) {
                if (!v.is_number_unsigned() ||
                    v.get<std::uint64_t>() >= static_cast<std::uint64_t>(tokenizer.vocab_size()))
                    fail(generation_path, "eos_token_id",
                         "must be token ids below " + std::to_string(tokenizer.vocab_size()) +
                             ", got " + headwise::detail::describe_json(v));
                pretrained_tokenizer_detail::add_unique(stops, v.get<std::int64_t>());
            };
            if (it->is_array()) {
                for (const auto& v : *it) one(v);
            } else {
                one(*it);
            }
        }
    }
    pretrained_tokenizer_detail::add_end_of_turn(tokenizer, chat, stops);
    return PretrainedTokenizer(std::move(tokenizer), std::move(chat), std::move(template_source),
                               std::move(stops), path);
}

inline PretrainedTokenizer PretrainedTokenizer::from_gguf(const io::GgufFile& file) {
    constexpr const char* fn = "headwise::text::PretrainedTokenizer::from_gguf";
    BpeTokenizer tokenizer = BpeTokenizer::from_gguf(file);
    const auto token_text = [&](std::optional<std::int64_t> id) {
        return id ? tokenizer.id_to_token(*id) : std::string();
    };
    std::optional<ChatTemplate> chat;
    const std::string key = "tokenizer.chat_template";
    std::string template_source = file.name() + ": '" + key + "'";
    if (const io::GgufValue* v = file.find(key)) {
        if (v->type() != io::GgufValueType::string)
            throw std::runtime_error(std::string(fn) + ": " + file.name() + ": '" + key +
                                     "' must be a STRING, got " +
                                     io::gguf_value_type_name(v->type()));
        try {
            chat.emplace(v->as_string(), token_text(tokenizer.bos_id()),
                         token_text(tokenizer.eos_id()));
        } catch (const std::invalid_argument& e) {
            throw std::runtime_error(std::string(fn) + ": " + template_source + ": " + e.what());
        }
    } else {
        template_source += " (missing)";
    }
    std::vector<std::int64_t> stops;
    if (tokenizer.eos_id()) stops.push_back(*tokenizer.eos_id());
    if (const io::GgufValue* v = file.find("tokenizer.ggml.eot_token_id")) {
        if (v->is_array() || v->type() == io::GgufValueType::string ||
            v->type() == io::GgufValueType::boolean || v->type() == io::GgufValueType::float32 ||
            v->type() == io::GgufValueType::float64 || v->as_int() < 0 ||
            v->as_int() >= tokenizer.vocab_size())
            throw std::runtime_error(std::string(fn) + ": " + file.name() +
                                     ": 'tokenizer.ggml.eot_token_id' must be a token id below " +
                                     std::to_string(tokenizer.vocab_size()));
        pretrained_tokenizer_detail::add_unique(stops, v->as_int());
    }
    pretrained_tokenizer_detail::add_end_of_turn(tokenizer, chat, stops);
    return PretrainedTokenizer(std::move(tokenizer), std::move(chat), std::move(template_source),
                               std::move(stops), file.name());
}

inline std::vector<std::int64_t> PretrainedTokenizer::encode_chat(
    const std::vector<ChatMessage>& conversation, bool add_generation_prompt) const {
    if (!chat_template_)
        throw std::invalid_argument(
            "headwise::text::PretrainedTokenizer::encode_chat: the model has no chat template (" +
            template_source_ + ")");
    return tokenizer_.encode(chat_template_->apply(conversation, add_generation_prompt),
                             /*add_special=*/false);
}

}  // namespace headwise::text
