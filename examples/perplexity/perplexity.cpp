// SPDX-License-Identifier: MIT
// perplexity: a Llama-family causal LM's perplexity on a text file, as llama.cpp's
// llama-perplexity computes it.
//
//   perplexity MODEL TEXTFILE [--context N] [--weights stored|float32] [--threads N]
//
// MODEL is a Hugging Face model directory (config.json, weights, tokenizer.json) or a .gguf
// file. The file is read whole (one final newline dropped, as llama.cpp's -f does), tokenized
// with BOS when the model adds it (special tokens in the text read as text, llama.cpp's
// parse_special = false), cut into windows of N tokens (default 512); each window runs alone,
// its first token BOS when the model adds BOS, and the second half of it is scored
// (headwise::models::perplexity). Prints the perplexity so far after each window on one line
// ("[1]x,[2]y,..." as llama-perplexity does), then `perplexity: X` as the last line. A missing
// or malformed model or file, a file of fewer than 2N tokens: a message on standard error, exit
// status 1. A bad command line: exit status 2.
#include <headwise/headwise.hpp>
#include <headwise/io/gguf.hpp>
#include <headwise/models/llama.hpp>
#include <headwise/models/perplexity.hpp>
#include <headwise/text/pretrained_tokenizer.hpp>

#include <cctype>      // std::isdigit
#include <cerrno>      // errno, ERANGE
#include <cstdint>     // std::int64_t, std::uint64_t
#include <cstdio>      // std::printf, std::fprintf, std::fflush, std::ferror
#include <cstdlib>     // std::strtoull
#include <cstring>     // std::strerror
#include <exception>   // std::exception
#include <filesystem>  // std::filesystem::is_regular_file
#include <fstream>     // std::ifstream
#include <iterator>    // std::istreambuf_iterator
#include <optional>    // std::optional
#include <string>      // std::string
#include <vector>      // std::vector

namespace {

constexpr const char* kUsage =
    "usage: perplexity MODEL TEXTFILE [--context N] [--weights stored|float32] [--threads N]\n"
    "  MODEL         a Hugging Face LlamaForCausalLM directory (config.json, weights,\n"
    "                tokenizer.json) or a .gguf file\n"
    "  TEXTFILE      the text, UTF-8\n"
    "  --context N   the window, 3 to 1048576 tokens (default 512); the file must hold 2N\n"
    "  --weights W   stored: quantized GGUF tensors run as stored (default); float32:\n"
    "                dequantized at load\n"
    "  --threads N   threads for the matrix products, 1 to 1024 (OpenMP and OpenBLAS builds)\n";

void set_threads(int n) {
#if HEADWISE_PARALLEL
    omp_set_num_threads(n);
#endif
#if defined(HEADWISE_USE_CBLAS) && defined(OPENBLAS_VERSION)
    openblas_set_num_threads(n);
#endif
    static_cast<void>(n);
}

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

int usage_error(const std::string& message) {
    std::fprintf(stderr, "perplexity: %s\n%s", message.c_str(), kUsage);
    return 2;
}

std::string quoted(const char* value) {
    const std::string v = value;
    return "\"" + (v.size() > 40 ? v.substr(0, 40) + "..." : v) + "\"";
}

bool flushed_stdout() {
    errno = 0;
    if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return true;
    const int error = errno;
    std::fprintf(stderr, "perplexity: cannot write to standard output: %s\n",
                 error ? std::strerror(error) : "write error");
    return false;
}

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
    std::vector<std::string> positional;
    std::uint64_t context = 512, threads = 0;
    GgufWeights weights = GgufWeights::stored;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            std::fputs(kUsage, stdout);
            return flushed_stdout() ? 0 : 1;
        }
        if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
            if (i + 1 >= argc) return usage_error(arg + " needs a value");
            const char* value = argv[++i];
            if (arg == "--context") {
                if (!whole(value, 3, std::uint64_t{1} << 20, context))
                    return usage_error(arg + " needs a whole number from 3 to 1048576, got " +
                                       quoted(value));
            } else if (arg == "--weights") {
                const std::string w = value;
                if (w == "stored") {
                    weights = GgufWeights::stored;
                } else if (w == "float32") {
                    weights = GgufWeights::float32;
                } else {
                    return usage_error(arg + " needs stored or float32, got " + quoted(value));
                }
            } else if (arg == "--threads") {
                if (!whole(value, 1, 1024, threads))
                    return usage_error(arg + " needs a whole number from 1 to 1024, got " +
                                       quoted(value));
            } else {
                return usage_error("unknown option " + arg);
            }
        } else {
            positional.push_back(arg);
        }
    }
    if (positional.empty()) return usage_error("MODEL is missing");
    if (positional.size() == 1) return usage_error("TEXTFILE is missing");
    if (positional.size() > 2)
        return usage_error("unexpected argument " + quoted(positional[2].c_str()) +
                           " (expected MODEL TEXTFILE)");
    const std::string& model_path = positional[0];
    const std::string& text_path = positional[1];
    if (threads > 0) set_threads(static_cast<int>(threads));
    try {
        std::ifstream in(text_path, std::ios::binary);
        std::error_code ec;
        if (!in || std::filesystem::is_directory(text_path, ec)) {
            std::fprintf(stderr, "perplexity: %s: cannot open the file\n", text_path.c_str());
            return 1;
        }
        std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        if (in.bad()) {
            std::fprintf(stderr, "perplexity: %s: read error\n", text_path.c_str());
            return 1;
        }
        if (!text.empty() && text.back() == '\n') text.pop_back();  // llama.cpp's -f

        const bool gguf = is_gguf(model_path);
        std::optional<headwise::io::GgufFile> file;
        if (gguf) file = headwise::io::load_gguf(model_path);
        const PretrainedTokenizer tokenizer =
            gguf ? PretrainedTokenizer::from_gguf(*file)
                 : PretrainedTokenizer::from_pretrained(model_path);
        const std::vector<std::int64_t> tokens =
            tokenizer.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/false);
        const auto n_ctx = static_cast<headwise::Index>(context);
        if (static_cast<std::uint64_t>(tokens.size()) / 2 < context) {
            std::fprintf(stderr,
                         "perplexity: %s: tokenizes to %zu tokens; --context %llu needs at least "
                         "%llu\n",
                         text_path.c_str(), tokens.size(), static_cast<unsigned long long>(context),
                         static_cast<unsigned long long>(2 * context));
            return 1;
        }
        auto model = gguf ? LlamaForCausalLM<float>::from_gguf(*file, weights)
                          : LlamaForCausalLM<float>::from_pretrained(model_path);
        headwise::models::PerplexityOptions options;
        options.context = n_ctx;
        if (tokenizer.add_bos()) options.bos_id = tokenizer.bos_id();
        std::fprintf(stderr, "perplexity: %zu tokens, %lld windows of %lld\n", tokens.size(),
                     static_cast<long long>(static_cast<headwise::Index>(tokens.size()) / n_ctx),
                     static_cast<long long>(n_ctx));
        const auto result = headwise::models::perplexity(
            model, tokens, options, [](headwise::Index w, double running) {
                std::printf("[%lld]%.4f,", static_cast<long long>(w + 1), running);
                std::fflush(stdout);
            });
        std::printf("\nperplexity: %.4f\n", result.perplexity);
    } catch (const std::exception& ex) {
        std::fprintf(stderr, "perplexity: %s\n", ex.what());
        return 1;
    }
    return flushed_stdout() ? 0 : 1;
}
