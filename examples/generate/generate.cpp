// SPDX-License-Identifier: MIT
// generate: text generation from a Llama-family causal LM, a Hugging Face model directory or a
// llama.cpp GGUF file, with nothing from Python at run time.
//
//   generate MODEL [--text TEXT | --chat MESSAGE | --prompt "ID ..."] [--ids]
//            [--tokens [TEXT ...]] [--weights stored|float32] [--ignore-eos]
//            [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
//            [--threads N]
//
// MODEL is a directory (config.json; model.safetensors or the shards of
// model.safetensors.index.json; tokenizer.json and tokenizer_config.json for text) or a .gguf
// file (weights, tokenizer and chat template in one). --text: the text tokenized with the
// model's tokenizer, BOS by its rule; --chat: one user turn through the model's chat template
// with the generation prompt. The new text is printed as it is generated (each piece once its
// UTF-8 characters are complete; special tokens print nothing), then a newline; with --ids, or
// for --prompt, the new token ids instead, space-separated, on one line. --tokens prints the
// ids of each TEXT (each standard-input line when there is none), one line per text, and
// exits. Generation stops after N new tokens (default 32) or at an end-of-sequence id (the
// config's; for text, also the tokenizer's and the template's end of turn), unless
// --ignore-eos. Greedy when --temperature is absent or 0, else sampling
// (headwise::models::choose_next_token). A missing or malformed model, or output that cannot be
// written: a message on standard error, exit status 1. A bad command line: exit status 2.
#include <headwise/headwise.hpp>
#include <headwise/io/gguf.hpp>
#include <headwise/models/generation.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/text/pretrained_tokenizer.hpp>
#include <headwise/text/streaming_decoder.hpp>

#include <algorithm>  // std::find
#include <cctype>     // std::isdigit
#include <cerrno>     // errno, ERANGE
#include <cmath>      // std::isfinite
#include <cstdint>    // std::int64_t, std::uint64_t
#include <cstdio>   // std::printf, std::fprintf, std::fputs, std::fwrite, std::fflush, std::ferror
#include <cstdlib>  // std::strtod, std::strtoll, std::strtoull
#include <cstring>  // std::strerror
#include <exception>   // std::exception
#include <filesystem>  // std::filesystem::is_regular_file
#include <iostream>    // std::cin
#include <limits>      // std::numeric_limits
#include <optional>    // std::optional
#include <string>      // std::string, std::getline
#include <vector>      // std::vector

namespace {

constexpr const char* kUsage =
    "usage: generate MODEL [--text TEXT | --chat MESSAGE | --prompt \"ID ID ...\"] [--ids]\n"
    "                [--tokens [TEXT ...]] [--weights stored|float32] [--ignore-eos]\n"
    "                [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
    "                [--threads N]\n"
    "  MODEL              a Hugging Face LlamaForCausalLM directory (config.json,\n"
    "                     model.safetensors or its shards, tokenizer.json) or a .gguf file\n"
    "  --text TEXT        the prompt as text, tokenized as the model's tokenizer does\n"
    "  --chat MESSAGE     the prompt as one user turn in the model's chat template\n"
    "  --prompt           the prompt's token ids, space-separated\n"
    "  --ids              print the new token ids instead of the text\n"
    "  --tokens [TEXT...] print the token ids of each TEXT (or standard-input line) and exit\n"
    "  --weights W        stored: quantized GGUF tensors run as stored (default); float32:\n"
    "                     dequantized at load\n"
    "  --ignore-eos       do not stop at end-of-sequence tokens: exactly N new tokens\n"
    "  --max-new-tokens N at most N new tokens (default 32)\n"
    "  --temperature T    0 or absent: greedy; > 0: sampling from softmax(logits / T)\n"
    "  --top-k K          sample among the K most likely ids only (0: all)\n"
    "  --top-p P          sample within the smallest set of ids of probability >= P (1: all)\n"
    "  --seed S           the sampling seed, 0 to 18446744073709551615 (default 0)\n"
    "  --threads N        threads for the matrix products, 1 to 1024 (OpenMP and OpenBLAS\n"
    "                     builds)\n";

constexpr std::uint64_t kMaxThreads = 1024;

void set_threads(int n) {
#if HEADWISE_PARALLEL
    omp_set_num_threads(n);
#endif
#if defined(HEADWISE_USE_CBLAS) && defined(OPENBLAS_VERSION)
    openblas_set_num_threads(n);
#endif
    static_cast<void>(n);
}

// A whole number in [minimum, maximum] written in decimal digits only (no sign, no blanks), or
// false: strtoull alone would take "-1" as 2^64 - 1 and "1e3" as 1.
bool whole(const char* s, std::uint64_t minimum, std::uint64_t maximum, std::uint64_t& into) {
    for (const char* p = s; *p != '\0'; ++p)
        if (!std::isdigit(static_cast<unsigned char>(*p))) return false;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE || v < minimum || v > maximum) return false;
    into = static_cast<std::uint64_t>(v);
    return true;
}

bool real(const char* s, double& into) {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end == s || *end != '\0' || !std::isfinite(v)) return false;
    into = v;
    return true;
}

// "ID ID ..." -> ids; false on anything but whole numbers >= 0 separated by blanks, or none.
bool parse_ids(const std::string& text, std::vector<std::int64_t>& ids) {
    const char* p = text.c_str();
    while (true) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == ',') ++p;
        if (*p == '\0') break;
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(p, &end, 10);
        if (end == p || v < 0 || errno == ERANGE ||
            !(*end == '\0' || *end == ' ' || *end == '\t' || *end == '\n' || *end == ','))
            return false;
        ids.push_back(static_cast<std::int64_t>(v));
        p = end;
    }
    return !ids.empty();
}

int usage_error(const std::string& message) {
    std::fprintf(stderr, "generate: %s\n%s", message.c_str(), kUsage);
    return 2;
}

// An option's value as messages quote it: at most 40 characters.
std::string quoted(const char* value) {
    const std::string v = value;
    return "\"" + (v.size() > 40 ? v.substr(0, 40) + "..." : v) + "\"";
}

// Standard output flushed; false, with a message, when anything written to it was lost.
bool flushed_stdout() {
    errno = 0;
    if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return true;
    const int error = errno;
    std::fprintf(stderr, "generate: cannot write to standard output: %s\n",
                 error ? std::strerror(error) : "write error");
    return false;
}

void print_ids(const std::vector<std::int64_t>& ids) {
    std::string line;
    for (const std::int64_t id : ids) line += (line.empty() ? "" : " ") + std::to_string(id);
    std::printf("%s\n", line.c_str());
}

// A GGUF file: a path ending in ".gguf", or any regular file (a directory is a Hugging Face
// model).
bool is_gguf(const std::string& model) {
    std::error_code ec;
    return (model.size() >= 5 && model.compare(model.size() - 5, 5, ".gguf") == 0) ||
           std::filesystem::is_regular_file(model, ec);
}

}  // namespace

int main(int argc, char** argv) {
    using headwise::models::GgufWeights;
    using headwise::models::LlamaForCausalLM;
    using headwise::text::PretrainedTokenizer;
    std::string model_path;
    std::vector<std::string> texts;  // positional TEXTs, for --tokens
    std::optional<std::string> prompt, text, chat;
    bool ids_out = false, tokens_mode = false, ignore_eos = false;
    GgufWeights weights = GgufWeights::stored;
    headwise::models::GenerationOptions options;
    std::uint64_t threads = 0;
    constexpr auto kMaxIndex =
        static_cast<std::uint64_t>(std::numeric_limits<headwise::Index>::max());
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            std::fputs(kUsage, stdout);
            return flushed_stdout() ? 0 : 1;
        }
        if (arg == "--ids") {
            ids_out = true;
        } else if (arg == "--tokens") {
            tokens_mode = true;
        } else if (arg == "--ignore-eos") {
            ignore_eos = true;
        } else if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
            if (i + 1 >= argc) return usage_error(arg + " needs a value");
            const char* value = argv[++i];
            std::uint64_t n = 0;
            if (arg == "--prompt") {
                prompt = value;
            } else if (arg == "--text") {
                text = value;
            } else if (arg == "--chat") {
                chat = value;
            } else if (arg == "--weights") {
                const std::string w = value;
                if (w == "stored") {
                    weights = GgufWeights::stored;
                } else if (w == "float32") {
                    weights = GgufWeights::float32;
                } else {
                    return usage_error(arg + " needs stored or float32, got " + quoted(value));
                }
            } else if (arg == "--max-new-tokens") {
                if (!whole(value, 0, kMaxIndex, n))
                    return usage_error(arg + " needs a whole number from 0 to " +
                                       std::to_string(kMaxIndex) + ", got " + quoted(value));
                options.max_new_tokens = static_cast<headwise::Index>(n);
            } else if (arg == "--temperature") {
                if (!real(value, options.temperature) || options.temperature < 0)
                    return usage_error(arg + " needs a finite number >= 0, got " + quoted(value));
            } else if (arg == "--top-k") {
                if (!whole(value, 0, kMaxIndex, n))
                    return usage_error(arg + " needs a whole number from 0 to " +
                                       std::to_string(kMaxIndex) + ", got " + quoted(value));
                options.top_k = static_cast<headwise::Index>(n);
            } else if (arg == "--top-p") {
                if (!real(value, options.top_p) || !(options.top_p > 0 && options.top_p <= 1))
                    return usage_error(arg + " needs a number in (0, 1], got " + quoted(value));
            } else if (arg == "--seed") {
                if (!whole(value, 0, std::numeric_limits<std::uint64_t>::max(), options.seed))
                    return usage_error(arg + " needs a whole number from 0 to " +
                                       std::to_string(std::numeric_limits<std::uint64_t>::max()) +
                                       ", got " + quoted(value));
            } else if (arg == "--threads") {
                if (!whole(value, 1, kMaxThreads, threads))
                    return usage_error(arg + " needs a whole number from 1 to " +
                                       std::to_string(kMaxThreads) + ", got " + quoted(value));
            } else {
                return usage_error("unknown option " + arg);
            }
        } else if (model_path.empty()) {
            model_path = arg;
        } else {
            texts.push_back(arg);
        }
    }
    if (model_path.empty()) return usage_error("MODEL is missing");
    // Exactly one prompt: --text, --chat or --prompt (none with --tokens).
    std::vector<std::string> given;
    if (text) given.push_back("--text");
    if (chat) given.push_back("--chat");
    if (prompt) given.push_back("--prompt");
    if (tokens_mode && !given.empty())
        return usage_error("--tokens prints token ids and exits; it takes no " + given[0] +
                           " (expected --tokens [TEXT ...] alone)");
    if (given.size() > 1)
        return usage_error(given[0] + " and " + given[1] +
                           " cannot be given together: expected one of --text, --chat, --prompt");
    if (!texts.empty() && !tokens_mode)
        return usage_error("unexpected argument " + quoted(texts[0].c_str()) +
                           " (texts after MODEL are read with --tokens only)");
    if (!tokens_mode && given.empty())
        return usage_error(
            "a prompt is missing: expected --text, --chat or --prompt (or --tokens)");
    std::vector<std::int64_t> ids;
    if (prompt && !parse_ids(*prompt, ids))
        return usage_error("--prompt needs token ids (whole numbers >= 0), got " +
                           quoted(prompt->c_str()));
    if (threads > 0) set_threads(static_cast<int>(threads));
    try {
        const bool gguf = is_gguf(model_path);
        std::optional<headwise::io::GgufFile> file;
        if (gguf) file = headwise::io::load_gguf(model_path);
        // The tokenizer first, for text: its errors come before the weights are read.
        std::optional<PretrainedTokenizer> tokenizer;
        if (tokens_mode || text || chat)
            tokenizer = gguf ? PretrainedTokenizer::from_gguf(*file)
                             : PretrainedTokenizer::from_pretrained(model_path);
        if (tokens_mode) {
            if (texts.empty()) {
                errno = 0;
                for (std::string line; std::getline(std::cin, line);) {
                    if (!line.empty() && line.back() == '\r') line.pop_back();
                    texts.push_back(line);
                }
                if (std::cin.bad() || std::ferror(stdin)) {
                    const int error = errno;
                    std::fprintf(stderr, "generate: cannot read standard input: %s\n",
                                 error ? std::strerror(error) : "read error");
                    return 1;
                }
            }
            for (const std::string& t : texts) print_ids(tokenizer->encode(t));
            return flushed_stdout() ? 0 : 1;
        }
        if (chat && tokenizer->chat_template() == nullptr) {
            std::fprintf(stderr,
                         "generate: --chat needs a model with a chat template; %s has none "
                         "(looked in %s)\n",
                         model_path.c_str(), tokenizer->chat_template_source().c_str());
            return 1;
        }
        if (text) ids = tokenizer->encode(*text);
        if (chat) ids = tokenizer->encode_chat({{"user", *chat}});
        if (ids.empty()) {
            std::fprintf(stderr,
                         "generate: --text: the text gives no tokens (an empty text, and the "
                         "model adds no BOS); expected at least one\n");
            return 1;
        }

        auto model = gguf ? LlamaForCausalLM<float>::from_gguf(*file, weights)
                          : LlamaForCausalLM<float>::from_pretrained(model_path);
        if (!ignore_eos) {
            options.stop_tokens = model.config().eos_token_ids;
            if (tokenizer)
                for (const std::int64_t id : tokenizer->stop_ids())
                    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), id) ==
                        options.stop_tokens.end())
                        options.stop_tokens.push_back(id);
        }
        if (prompt || ids_out) {
            print_ids(headwise::models::generate(model, {ids}, options).at(0));
            return flushed_stdout() ? 0 : 1;
        }
        // Text, streamed: each piece printed and flushed once its characters are complete.
        headwise::text::StreamingDecoder decoder(tokenizer->tokenizer(), /*skip_special=*/true);
        bool written = true;
        headwise::models::generate(model, {ids}, options, [&](headwise::Index, std::int64_t id) {
            const std::string piece = decoder.push(id);
            if (!piece.empty() && written) {
                std::fwrite(piece.data(), 1, piece.size(), stdout);
                written = std::fflush(stdout) == 0 && !std::ferror(stdout);
            }
        });
        const std::string rest = decoder.finish() + "\n";
        std::fwrite(rest.data(), 1, rest.size(), stdout);
    } catch (const std::exception& ex) {
        std::fprintf(stderr, "generate: %s\n", ex.what());
        return 1;
    }
    return flushed_stdout() ? 0 : 1;
}
