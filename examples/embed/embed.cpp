// SPDX-License-Identifier: MIT
// embed: sentence embeddings from a sentence-transformers model directory (all-MiniLM-L6-v2 and
// other BERT models with mean, CLS or max pooling), with nothing from Python at run time.
//
//   embed MODEL_DIR [--threads N] [--batch N] [--bf16] [--tokens]
//         [--prune-heads "LAYER:HEAD,HEAD;LAYER:HEAD"] [TEXT ...]
//
// Texts come from the arguments, or one per line from standard input when there are none. One
// output line per text, in input order: the pooled, L2-normalised embedding as space-separated
// %.9g numbers; with --tokens, the token ids instead ([CLS] and [SEP] included, after
// truncation). --bf16 runs the encoder's products in bfloat16 (Precision::bf16, docs/precision.md:
// cosine >= 0.999 to the float embeddings) and, as nothing here trains, keeps its weight matrices
// in bf16 only (FloatWeights::release: half their float bytes). --prune-heads removes attention
// heads (0-based layer and head numbers, BertModel::prune_heads) before embedding. A missing or
// malformed model directory, standard input that cannot be read (a directory, closed) or output
// that cannot be written (a full disk, a closed standard output): a message on standard error, exit
// status 1. A bad command line: exit status 2.
#include <headwise/headwise.hpp>

#include <algorithm>   // std::min
#include <cctype>      // std::isdigit
#include <cerrno>      // errno, ERANGE
#include <cstdio>      // std::printf, std::fprintf, std::fputs, std::fflush, std::ferror
#include <cstdlib>     // std::strtoll
#include <cstring>     // std::strerror
#include <exception>   // std::exception
#include <functional>  // std::function
#include <iostream>    // std::cin
#include <limits>      // std::numeric_limits
#include <stdexcept>   // std::invalid_argument
#include <string>      // std::string, std::getline
#include <vector>      // std::vector

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>  // isatty, STDERR_FILENO
#define HEADWISE_EMBED_ISATTY 1
#endif

namespace {

constexpr const char* kUsage =
    "usage: embed MODEL_DIR [--threads N] [--batch N] [--bf16] [--tokens]\n"
    "             [--prune-heads \"LAYER:HEAD,HEAD;LAYER:HEAD\"] [TEXT ...]\n"
    "  MODEL_DIR   a sentence-transformers model directory (config.json, model.safetensors,\n"
    "              vocab.txt, tokenizer_config.json, modules.json)\n"
    "  --threads N threads for the matrix products, 1 to 1024 (OpenMP and OpenBLAS builds)\n"
    "  --batch N   texts per forward pass, at least 1 (default 32)\n"
    "  --bf16      the encoder's products in bfloat16 (embeddings within cosine 0.999 of\n"
    "              float; faster only on CPUs with AVX512_BF16, see docs/precision.md), its\n"
    "              weight matrices held in bf16 only (half their memory)\n"
    "  --tokens    print the token ids instead of the embeddings\n"
    "  --prune-heads \"LAYER:HEAD,HEAD;LAYER:HEAD\"\n"
    "              remove these attention heads (0-based numbers) before embedding\n"
    "  TEXT ...    the texts; without any, one text per line from standard input\n";

constexpr long long kMaxThreads = 1024;

// A whole number written in decimal digits only (at most 9 of them), or -1.
long long index_of(const std::string& s) {
    if (s.empty() || s.size() > 9) return -1;
    for (char c : s)
        if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
    return std::stoll(s);
}

// "LAYER:HEAD,HEAD;LAYER:HEAD" -> {layer: [heads]}: each group a layer, a colon and one or more
// heads separated by commas; groups separated by semicolons; a layer named once. false when the
// text is anything else (the heads' ranges are the model's to check).
bool parse_heads(const std::string& text, headwise::models::HeadsToPrune& heads) {
    std::size_t start = 0;
    while (true) {
        const std::size_t end = std::min(text.find(';', start), text.size());
        const std::string group = text.substr(start, end - start);
        const std::size_t colon = group.find(':');
        if (colon == std::string::npos) return false;
        const long long layer = index_of(group.substr(0, colon));
        if (layer < 0 || heads.count(layer) != 0) return false;
        std::vector<headwise::Index>& list = heads[layer];
        std::size_t h = colon + 1;
        while (true) {
            const std::size_t comma = std::min(group.find(',', h), group.size());
            const long long head = index_of(group.substr(h, comma - h));
            if (head < 0) return false;
            list.push_back(head);
            if (comma == group.size()) break;
            h = comma + 1;
        }
        if (end == text.size()) return true;
        start = end + 1;
    }
}

// The option's value as a message quotes it: at most 40 characters.
std::string shown(const std::string& value) {
    return "\"" + (value.size() > 40 ? value.substr(0, 40) + "..." : value) + "\"";
}

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
    std::string prune;  // --prune-heads' value, as given
    headwise::models::HeadsToPrune heads;
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
        } else if (!options_done && arg == "--prune-heads") {
            if (i + 1 >= argc || !parse_heads(argv[i + 1], heads)) {
                std::fprintf(stderr,
                             "embed: --prune-heads needs \"LAYER:HEAD,HEAD;LAYER:HEAD\" (whole "
                             "numbers, each layer once), got %s\n%s",
                             i + 1 < argc ? shown(argv[i + 1]).c_str() : "nothing", kUsage);
                return 2;
            }
            prune = argv[++i];
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
        try {
            embedder.model().prune_heads(heads);
        } catch (const std::invalid_argument& ex) {  // a head or layer the model does not have
            std::fprintf(stderr, "embed: --prune-heads %s: %s\n", shown(prune).c_str(), ex.what());
            return 2;
        }
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
