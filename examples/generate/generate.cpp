// SPDX-License-Identifier: MIT
// generate: text generation (token ids in, token ids out) from a Hugging Face Llama-family
// causal-LM directory, with nothing from Python at run time.
//
//   generate MODEL_DIR --prompt "ID ID ..." [--max-new-tokens N] [--temperature T] [--top-k K]
//            [--top-p P] [--seed S] [--threads N]
//
// MODEL_DIR holds config.json and model.safetensors of a LlamaForCausalLM. Greedy when
// --temperature is absent or 0, else sampling (headwise::models::choose_next_token describes
// the procedure). Prints the new token ids only, space-separated, on one line; stops after N new
// tokens (default 32) or after an end-of-sequence id of the config (printed). A missing or
// malformed model directory, or output that cannot be written (a full disk, a closed standard
// output): a message on standard error, exit status 1. A bad command line: exit status 2.
#include <headwise/headwise.hpp>
#include <headwise/models/generation.hpp>
#include <headwise/models/llama.hpp>

#include <cctype>     // std::isdigit
#include <cerrno>     // errno, ERANGE
#include <cmath>      // std::isfinite
#include <cstdint>    // std::int64_t, std::uint64_t
#include <cstdio>     // std::printf, std::fprintf, std::fputs, std::fflush, std::ferror
#include <cstdlib>    // std::strtod, std::strtoll, std::strtoull
#include <cstring>    // std::strerror
#include <exception>  // std::exception
#include <limits>     // std::numeric_limits
#include <string>     // std::string
#include <vector>     // std::vector

namespace {

constexpr const char* kUsage =
    "usage: generate MODEL_DIR --prompt \"ID ID ...\" [--max-new-tokens N] [--temperature T]\n"
    "                [--top-k K] [--top-p P] [--seed S] [--threads N]\n"
    "  MODEL_DIR          a Hugging Face LlamaForCausalLM directory (config.json,\n"
    "                     model.safetensors)\n"
    "  --prompt           the prompt's token ids, space-separated\n"
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

}  // namespace

int main(int argc, char** argv) {
    std::string model_dir, prompt;
    bool has_prompt = false;
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
        if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
            if (i + 1 >= argc) return usage_error(arg + " needs a value");
            const char* value = argv[++i];
            std::uint64_t n = 0;
            if (arg == "--prompt") {
                prompt = value;
                has_prompt = true;
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
        } else if (model_dir.empty()) {
            model_dir = arg;
        } else {
            return usage_error("unexpected argument " + arg);
        }
    }
    if (model_dir.empty()) return usage_error("MODEL_DIR is missing");
    if (!has_prompt) return usage_error("--prompt is missing");
    std::vector<std::int64_t> ids;
    if (!parse_ids(prompt, ids))
        return usage_error("--prompt needs token ids (whole numbers >= 0), got " +
                           quoted(prompt.c_str()));
    if (threads > 0) set_threads(static_cast<int>(threads));
    try {
        auto model = headwise::models::LlamaForCausalLM<float>::from_pretrained(model_dir);
        options.stop_tokens = model.config().eos_token_ids;
        const auto out = headwise::models::generate(model, {ids}, options).at(0);
        std::string line;
        for (const std::int64_t id : out) line += (line.empty() ? "" : " ") + std::to_string(id);
        std::printf("%s\n", line.c_str());
    } catch (const std::exception& ex) {
        std::fprintf(stderr, "generate: %s\n", ex.what());
        return 1;
    }
    return flushed_stdout() ? 0 : 1;
}
