// SPDX-License-Identifier: MIT
// embed: sentence embeddings from a sentence-transformers model directory (all-MiniLM-L6-v2 and
// other BERT models with mean, CLS or max pooling), with nothing from Python at run time.
//
//   embed MODEL_DIR [--threads N] [--batch N] [--bf16] [--tokens] [TEXT ...]
//
// Texts come from the arguments, or one per line from standard input when there are none. One
// output line per text, in input order: the pooled, L2-normalised embedding as space-separated
// %.9g numbers; with --tokens, the token ids instead ([CLS] and [SEP] included, after
// truncation). --bf16 runs the encoder's products in bfloat16 (Precision::bf16, docs/precision.md:
// cosine >= 0.999 to the float embeddings) and, as nothing here trains, keeps its weight matrices
// in bf16 only (FloatWeights::release: half their float bytes). A missing or malformed model
// directory, standard input that cannot be read (a directory, closed) or output that cannot be
// written (a full disk, a closed standard output): a message on standard error, exit status 1.
// A bad command line: exit status 2.
#include <headwise/headwise.hpp>

#include <cctype>      // std::isdigit
#include <cerrno>      // errno, ERANGE
#include <cstdio>      // std::printf, std::fprintf, std::fputs, std::fflush, std::ferror
#include <cstdlib>     // std::strtoll
#include <cstring>     // std::strerror
#include <exception>   // std::exception
#include <functional>  // std::function
#include <iostream>    // std::cin
#include <limits>      // std::numeric_limits
#include <string>      // std::string, std::getline
#include <vector>      // std::vector

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>  // isatty, STDERR_FILENO
#define HEADWISE_EMBED_ISATTY 1
#endif

namespace {

constexpr const char* kUsage =
    "usage: embed MODEL_DIR [--threads N] [--batch N] [--bf16] [--tokens] [TEXT ...]\n"
    "  MODEL_DIR   a sentence-transformers model directory (config.json, model.safetensors,\n"
    "              vocab.txt, tokenizer_config.json, modules.json)\n"
    "  --threads N threads for the matrix products, 1 to 1024 (OpenMP and OpenBLAS builds)\n"
    "  --batch N   texts per forward pass, at least 1 (default 32)\n"
    "  --bf16      the encoder's products in bfloat16 (embeddings within cosine 0.999 of\n"
    "              float; faster only on CPUs with AVX512_BF16, see docs/precision.md), its\n"
    "              weight matrices held in bf16 only (half their memory)\n"
    "  --tokens    print the token ids instead of the embeddings\n"
    "  TEXT ...    the texts; without any, one text per line from standard input\n";

constexpr long long kMaxThreads = 1024;

// A whole number in [1, maximum] written in decimal digits only (no sign, no blanks), or -1.
long long positive(const char* s, long long maximum) {
    for (const char* p = s; *p != '\0'; ++p)
        if (!std::isdigit(static_cast<unsigned char>(*p))) return -1;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s, &end, 10);
    return end != s && *end == '\0' && errno != ERANGE && v >= 1 && v <= maximum ? v : -1;
}

// Standard output flushed; false, with a message, when anything written to it was lost.
bool flushed_stdout() {
    errno = 0;
    if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return true;
    const int error = errno;
    std::fprintf(stderr, "embed: cannot write to standard output: %s\n",
                 error ? std::strerror(error) : "write error");
    return false;
}

void set_threads(int n) {
#if HEADWISE_PARALLEL
    omp_set_num_threads(n);
#endif
#if defined(HEADWISE_USE_CBLAS) && defined(OPENBLAS_VERSION)
    openblas_set_num_threads(n);
#endif
    static_cast<void>(n);
}

bool stderr_is_terminal() {
#ifdef HEADWISE_EMBED_ISATTY
    return isatty(STDERR_FILENO) != 0;
#else
    return false;
#endif
}

}  // namespace

int main(int argc, char** argv) {
    std::string dir;
    long long threads = 0, batch = 32;
    bool tokens = false, bf16 = false;
    std::vector<std::string> texts;
    bool options_done = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (!options_done && (arg == "--threads" || arg == "--batch")) {
            const long long maximum =
                arg == "--threads"
                    ? kMaxThreads
                    : static_cast<long long>(std::numeric_limits<headwise::Index>::max());
            const long long v = i + 1 < argc ? positive(argv[i + 1], maximum) : -1;
            if (v < 0) {
                std::string got = i + 1 < argc ? argv[i + 1] : "nothing";
                if (got.size() > 40) got = got.substr(0, 40) + "...";
                std::fprintf(stderr, "embed: %s needs a whole number from 1 to %lld, got %s\n%s",
                             arg.c_str(), maximum, got.c_str(), kUsage);
                return 2;
            }
            (arg == "--threads" ? threads : batch) = v;
            ++i;
        } else if (!options_done && arg == "--tokens") {
            tokens = true;
        } else if (!options_done && arg == "--bf16") {
            bf16 = true;
        } else if (!options_done && (arg == "--help" || arg == "-h")) {
            std::fputs(kUsage, stdout);
            return flushed_stdout() ? 0 : 1;
        } else if (!options_done && arg == "--") {
            options_done = true;
        } else if (!options_done && arg.size() > 1 && arg[0] == '-' && arg[1] == '-') {
            std::fprintf(stderr, "embed: unknown option %s\n%s", arg.c_str(), kUsage);
            return 2;
        } else if (dir.empty()) {
            dir = arg;
        } else {
            texts.push_back(arg);
        }
    }
    if (dir.empty()) {
        std::fputs(kUsage, stderr);
        return 2;
    }
    if (threads > 0) set_threads(static_cast<int>(threads));

    try {
        auto embedder = headwise::models::SentenceEmbedder<float>::from_directory(dir);
        // Inference only: the float weight matrices are not needed beside their bf16 copies.
        if (bf16)
            embedder.with_precision(headwise::Precision::bf16, headwise::FloatWeights::release);
        if (texts.empty()) {
            errno = 0;
            for (std::string line; std::getline(std::cin, line);) {
                if (!line.empty() && line.back() == '\r') line.pop_back();
                texts.push_back(line);
            }
            // The end of the input, or a read that failed (a directory, a closed descriptor):
            // std::cin shares stdin's error flag.
            if (std::cin.bad() || std::ferror(stdin)) {
                const int error = errno;
                std::fprintf(stderr, "embed: cannot read standard input: %s\n",
                             error ? std::strerror(error) : "read error");
                return 1;
            }
        }
        if (tokens) {
            for (const std::string& t : texts) {
                const std::vector<std::int64_t> ids = embedder.tokenizer().encode(t);
                for (std::size_t i = 0; i < ids.size(); ++i)
                    std::printf(i ? " %lld" : "%lld", static_cast<long long>(ids[i]));
                std::printf("\n");
            }
            return flushed_stdout() ? 0 : 1;
        }
        // Progress on standard error, for large inputs or when someone watches it.
        const bool show = texts.size() > 1000 || (stderr_is_terminal() && texts.size() > 64);
        std::function<void(headwise::Index, headwise::Index)> progress;
        if (show)
            progress = [](headwise::Index done, headwise::Index total) {
                std::fprintf(stderr, "\rembed: %lld / %lld texts", static_cast<long long>(done),
                             static_cast<long long>(total));
                if (done == total) std::fprintf(stderr, "\n");
            };
        const headwise::Tensor<float> e = embedder.encode(texts, batch, progress);  // [N, E]
        const headwise::Index E = embedder.dimension();
        for (headwise::Index n = 0; n < e.shape()[0]; ++n) {
            for (headwise::Index j = 0; j < E; ++j)
                std::printf(j ? " %.9g" : "%.9g", static_cast<double>(e.data()[n * E + j]));
            std::printf("\n");
        }
    } catch (const std::exception& ex) {
        std::fprintf(stderr, "embed: %s\n", ex.what());
        return 1;
    }
    return flushed_stdout() ? 0 : 1;
}
