// SPDX-License-Identifier: MIT
// ChatTemplate: a model's chat template (ChatML, Llama-3, Mistral [INST]) recognised from its Jinja
// text and applied to a conversation as transformers' apply_chat_template(tokenize=False) renders
// it.
#pragma once

#include <cstddef>      // std::size_t
#include <ctime>        // std::time, std::localtime, std::strftime
#include <stdexcept>    // std::invalid_argument
#include <string>       // std::string, std::to_string
#include <string_view>  // std::string_view
#include <utility>      // std::move
#include <vector>       // std::vector

namespace headwise::text {

/// The template families ChatTemplate knows.
enum class ChatTemplateFamily {
    chatml,   // <|im_start|>role\ncontent<|im_end|>\n (SmolLM2, Qwen2.5), maybe a default system
    llama3,   // bos <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|> (Llama
              // 3, 3.1, 3.2)
    mistral,  // bos [INST] user [/INST]assistant eos (Mistral-7B-Instruct-v0.1/v0.2, Mixtral v0.1)
};

/// One turn of a conversation; role is "system", "user" or "assistant".
struct ChatMessage {
    std::string role;
    std::string content;
};

/// A chat template recognised from its text (no Jinja engine: the families' fixed shapes).
class ChatTemplate {
public:
    /// `source` is the template text (tokenizer.chat_template); bos_token and eos_token are the
    /// tokenizer's (the Jinja variables of those names). Throws std::invalid_argument when the text
    /// is of no family above, or of a variant of one that is not implemented.
    ChatTemplate(std::string_view source, std::string bos_token, std::string eos_token);

    ChatTemplateFamily family() const { return family_; }
    /// The system prompt the template adds when the conversation has none ("" if it adds none).
    const std::string& default_system() const { return default_system_; }
    /// The token that ends a turn, where generation stops: <|im_end|>, <|eot_id|>, or eos_token.
    const std::string& end_of_turn() const { return end_of_turn_; }

    /// The conversation as the template renders it; with add_generation_prompt, followed by the
    /// opening of an assistant turn (Mistral's template has none: it is unchanged). date_string
    /// is Llama-3.1/3.2's "Today Date" (empty: the template's own, today's date for a template
    /// that calls strftime_now). Throws std::invalid_argument for an empty conversation, a role
    /// other than system/user/assistant, and where the template raises (Mistral: roles that do not
    /// alternate user/assistant starting with user; a system turn).
    std::string apply(const std::vector<ChatMessage>& conversation, bool add_generation_prompt,
                      std::string_view date_string = {}) const;

private:
    ChatTemplateFamily family_ = ChatTemplateFamily::chatml;
    std::string bos_token_, eos_token_, end_of_turn_;
    std::string default_system_;
    bool llama_system_block_ = false;  // Llama 3.1/3.2: a system turn with the dates, always
    bool llama_strftime_ = false;      // Llama 3.2: the date is today's unless given
    std::string llama_date_;           // the template's fallback date_string
};

// ---------------------------------------------------------------------------------------------
namespace detail {

/// At most 60 bytes of a value from a file, for messages.
inline std::string chat_prefix(std::string_view s) {
    constexpr std::size_t n = 60;
    return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

/// Decodes the code point at s[i] (n bytes); an invalid sequence is one byte, code point -1.
inline long chat_code_point(std::string_view s, std::size_t i, std::size_t& n) {
    const auto b = static_cast<unsigned char>(s[i]);
    n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
        n = 1;
        return -1;
    }
    long cp = n == 1 ? b : b & (0x7F >> n);
    for (std::size_t k = 1; k < n; ++k) {
        const auto c = static_cast<unsigned char>(s[i + k]);
        if ((c >> 6) != 0x2) {
            n = 1;
            return -1;
        }
        cp = (cp << 6) | (c & 0x3F);
    }
    return cp;
}

/// Python's str.isspace, which Jinja's `trim` (str.strip) uses.
inline bool chat_is_space(long cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/// Jinja's `trim`: Python's str.strip() on the UTF-8 text.
inline std::string_view chat_trim(std::string_view s) {
    std::size_t begin = 0, n = 0;
    while (begin < s.size() && chat_is_space(chat_code_point(s, begin, n))) begin += n;
    std::size_t end = begin;  // one past the last non-space code point
    for (std::size_t i = begin; i < s.size(); i += n) {
        if (!chat_is_space(chat_code_point(s, i, n))) end = i + n;
    }
    return s.substr(begin, end - begin);
}

/// The text of a Jinja string literal's body: \n, \t, \\, \' and \" unescaped.
inline std::string chat_unescape(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) {
            const char c = s[++i];
            out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
        } else {
            out += s[i];
        }
    }
    return out;
}

inline bool chat_contains(std::string_view s, std::string_view what) {
    return s.find(what) != std::string_view::npos;
}

}  // namespace detail

inline ChatTemplate::ChatTemplate(std::string_view source, std::string bos_token,
                                  std::string eos_token)
    : bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {
    using detail::chat_contains;
    const auto refuse = [&](const std::string& why) {
        throw std::invalid_argument("ChatTemplate: " + why + "; the template begins \"" +
                                    detail::chat_prefix(source) + "\"");
    };
    if (chat_contains(source, "<|im_start|>") && chat_contains(source, "<|im_end|>")) {
        // Qwen3-style templates rewrite earlier assistant turns (their <think> part): not ChatML.
        if (chat_contains(source, "<think>") || chat_contains(source, "reasoning_content")) {
            refuse("a ChatML template with reasoning (<think>) turns is not supported");
        }
        family_ = ChatTemplateFamily::chatml;
        end_of_turn_ = "<|im_end|>";
        // A default system prompt is a string literal '<|im_start|>system\n...<|im_end|>' whose
        // body is plain text (Qwen2.5 also has '<|im_start|>system\n' + messages[0]['content']).
        const std::string_view open = "<|im_start|>system";
        for (auto at = source.find(open); at != std::string_view::npos;
             at = source.find(open, at + 1)) {
            std::size_t body = at + open.size();
            if (source.compare(body, 1, "\n") == 0) {
                body += 1;
            } else if (source.compare(body, 2, "\\n") == 0) {
                body += 2;
            } else {
                continue;
            }
            const auto close = source.find("<|im_end|>", body);
            if (close == std::string_view::npos) break;
            const auto text = source.substr(body, close - body);
            if (text.empty() || text.find_first_of("'\"{}") != std::string_view::npos) continue;
            default_system_ = detail::chat_unescape(text);
            break;
        }
    } else if (chat_contains(source, "<|start_header_id|>") &&
               chat_contains(source, "<|end_header_id|>") && chat_contains(source, "<|eot_id|>")) {
        family_ = ChatTemplateFamily::llama3;
        end_of_turn_ = "<|eot_id|>";
        if (chat_contains(source, "Cutting Knowledge Date")) {
            // Llama 3.1/3.2: the dates and the system message in one system turn, always.
            if (!chat_contains(source, "Cutting Knowledge Date: December 2023\\n") ||
                !chat_contains(source, "Today Date: \" + date_string")) {
                refuse("a Llama-3 template whose system turn is not Llama 3.1/3.2's");
            }
            llama_system_block_ = true;
            llama_strftime_ = chat_contains(source, "strftime_now");
            const std::string_view set = "set date_string = \"";
            const auto at = source.find(set);
            const auto end = at == std::string_view::npos ? at : source.find('"', at + set.size());
            if (end == std::string_view::npos) {
                refuse("a Llama-3.1 template without a default date_string");
            }
            llama_date_ = std::string(source.substr(at + set.size(), end - at - set.size()));
        }
    } else if (chat_contains(source, "[INST]") && chat_contains(source, "[/INST]")) {
        family_ = ChatTemplateFamily::mistral;
        if (!chat_contains(source, "'[INST] ' + message['content'] + ' [/INST]'") ||
            !chat_contains(source, "message['content'] + eos_token") ||
            chat_contains(source, "system")) {
            refuse("a Mistral [INST] template of a variant other than Mistral-7B-Instruct-v0.2's");
        }
        if (eos_token_.empty()) {
            throw std::invalid_argument(
                "ChatTemplate: Mistral's template ends assistant turns with eos_token; expected a "
                "non-empty eos_token, got \"\"");
        }
        end_of_turn_ = eos_token_;
    } else {
        refuse(
            "unrecognised chat template (known: ChatML <|im_start|>, Llama-3 "
            "<|start_header_id|>, Mistral [INST])");
    }
}

inline std::string ChatTemplate::apply(const std::vector<ChatMessage>& conversation,
                                       bool add_generation_prompt,
                                       std::string_view date_string) const {
    if (conversation.empty()) {
        throw std::invalid_argument(
            "ChatTemplate::apply: the conversation is empty; expected at least one message");
    }
    for (std::size_t i = 0; i < conversation.size(); ++i) {
        const std::string& role = conversation[i].role;
        if (role != "system" && role != "user" && role != "assistant") {
            throw std::invalid_argument("ChatTemplate::apply: message " + std::to_string(i) +
                                        " has role \"" + detail::chat_prefix(role) +
                                        "\"; expected system, user or assistant");
        }
    }
    std::string out;
    switch (family_) {
        case ChatTemplateFamily::chatml: {
            if (!default_system_.empty() && conversation.front().role != "system") {
                out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
            }
            for (const ChatMessage& m : conversation) {
                out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
            }
            if (add_generation_prompt) out += "<|im_start|>assistant\n";
            break;
        }
        case ChatTemplateFamily::llama3: {
            out += bos_token_;
            std::size_t first = 0;
            if (llama_system_block_) {
                // Llama 3.1/3.2 take a leading system message into their own system turn.
                std::string date(date_string);
                if (date.empty() && llama_strftime_) {
                    // transformers' strftime_now: the local date, "%d %b %Y".
                    const std::time_t now = std::time(nullptr);
                    char buffer[32] = {};
                    std::strftime(buffer, sizeof buffer, "%d %b %Y", std::localtime(&now));
                    date = buffer;
                }
                if (date.empty()) date = llama_date_;
                std::string_view system;
                if (conversation.front().role == "system") {
                    system = detail::chat_trim(conversation.front().content);
                    first = 1;
                }
                out += "<|start_header_id|>system<|end_header_id|>\n\n";
                out += "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n";
                out += std::string(system) + "<|eot_id|>";
            }
            for (std::size_t i = first; i < conversation.size(); ++i) {
                out += "<|start_header_id|>" + conversation[i].role + "<|end_header_id|>\n\n";
                out += std::string(detail::chat_trim(conversation[i].content)) + "<|eot_id|>";
            }
            if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            break;
        }
        case ChatTemplateFamily::mistral: {
            out += bos_token_;
            for (std::size_t i = 0; i < conversation.size(); ++i) {
                const ChatMessage& m = conversation[i];
                // The template's own checks, in its order: alternation first, then the role.
                if ((m.role == "user") != (i % 2 == 0)) {
                    throw std::invalid_argument(
                        "ChatTemplate::apply: message " + std::to_string(i) + " has role \"" +
                        m.role + "\"; Mistral's template expects " +
                        (i % 2 == 0 ? "user" : "assistant") +
                        " (conversation roles must alternate user/assistant/user/assistant/...)");
                }
                if (m.role == "user") {
                    out += "[INST] " + m.content + " [/INST]";
                } else if (m.role == "assistant") {
                    out += m.content + eos_token_;
                } else {
                    throw std::invalid_argument(
                        "ChatTemplate::apply: message " + std::to_string(i) +
                        " has role \"system\"; Mistral's template supports only user and "
                        "assistant roles");
                }
            }
            break;
        }
    }
    return out;
}

}  // namespace headwise::text
