// SPDX-License-Identifier: MIT
// libFuzzer target for the safetensors reader that reads its input as choices in a small grammar
// of headers, so that what byte-level mutation rarely assembles is one choice away: arrays nested
// up to 100,000 deep, names and keys declared twice, numbers at and beyond 2^64, NULs and other
// bytes after the JSON object, offsets that agree with the shape or do not, a wrong length field.
// The file built is then checked as fuzz_safetensors checks raw bytes.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>  // std::size_t
#include <cstdint>  // std::uint8_t, std::uint64_t
#include <string>   // std::string, std::to_string
#include <vector>   // std::vector

#include "safetensors_check.hpp"

namespace {

// FuzzedDataProvider answers 0 (the low end of a range) once the input is used up, so each
// choice below puts the ordinary case at 0 and the hostile ones at the top of its range: a short
// input builds a well-formed header, and each byte more can make one part of it hostile.

/// Picks one of `options`.
template <std::size_t N>
const char* pick(FuzzedDataProvider& in, const char* const (&options)[N]) {
    return options[in.ConsumeIntegralInRange<std::size_t>(0, N - 1)];
}

/// `inner` inside `depth` arrays; the depths are the limit's neighbours and far beyond.
std::string nested(FuzzedDataProvider& in, const std::string& inner) {
    static constexpr std::size_t kDepths[] = {1, 2, 13, 14, 15, 16, 100, 100000};
    const std::size_t depth = kDepths[in.ConsumeIntegralInRange<std::size_t>(0, 7)];
    return std::string(depth, '[') + inner + std::string(depth, ']');
}

/// A JSON value where a non-negative integer belongs: usually one, sometimes anything else.
std::string number(FuzzedDataProvider& in) {
    static const char* const kNumbers[] = {"0",
                                           "1",
                                           "2",
                                           "3",
                                           "4",
                                           "8",
                                           "4294967296",
                                           "4611686018427387905",
                                           "18446744073709551615",
                                           "18446744073709551616",
                                           "-1",
                                           "1.5",
                                           "1e400",
                                           "\"2\"",
                                           "null",
                                           "true",
                                           "{}",
                                           "[]"};
    const unsigned kind = in.ConsumeIntegralInRange<unsigned>(0, 9);
    if (kind < 5) return std::to_string(in.ConsumeIntegralInRange<unsigned>(0, 6));
    if (kind < 8) return pick(in, kNumbers);
    if (kind == 8) return nested(in, pick(in, kNumbers));
    return "\"" + std::string(in.ConsumeIntegralInRange<std::size_t>(0, 2000), 'x') + "\"";
}

/// A name: a few short ones so that duplicates are likely, the metadata key, odd ones.
std::string name(FuzzedDataProvider& in) {
    static const char* const kNames[] = {"a", "b",         "c",       "a",      "__metadata__",
                                         "",  "w.\\u00e9", "\\u0000", "\\ud800"};
    if (in.ConsumeIntegralInRange<unsigned>(0, 15) == 15)
        return std::string(in.ConsumeIntegralInRange<std::size_t>(0, 5000), 'n');
    return pick(in, kNames);
}

struct Builder {
    FuzzedDataProvider& in;
    std::uint64_t offset = 0;  // where the next consistent entry's data begins

    /// An entry's object: its keys in any order, some left out or declared twice.
    std::string entry() {
        static const char* const kDtypes[] = {"F32", "F64", "BF16", "F16", "I64", "Q7", "f32"};
        const std::string dtype = pick(in, kDtypes);
        const std::size_t item = dtype == "F64" ? 8 : dtype == "F32" ? 4 : 2;
        std::string shape = "[";
        std::uint64_t numel = 1;
        bool plain = true;  // every extent a small integer: the byte count is known
        const std::size_t rank = in.ConsumeIntegralInRange<std::size_t>(0, 9);
        for (std::size_t i = 0; i < rank; ++i) {
            std::string extent;
            if (in.ConsumeIntegralInRange<unsigned>(0, 3) != 3) {
                const unsigned e = in.ConsumeIntegralInRange<unsigned>(0, 4);
                numel *= e;
                extent = std::to_string(e);
            } else {
                extent = number(in);
                plain = false;
            }
            shape += (i ? "," : "") + extent;
        }
        shape += "]";
        if (in.ConsumeIntegralInRange<unsigned>(0, 7) == 7) {
            shape = nested(in, shape);
            plain = false;
        }
        std::string offsets;
        if (plain && !in.ConsumeBool()) {
            offsets =
                "[" + std::to_string(offset) + "," + std::to_string(offset + numel * item) + "]";
            offset += numel * item;
        } else {
            offsets = "[" + number(in) + "," + number(in) + "]";
        }

        std::vector<std::string> members = {"\"dtype\":\"" + dtype + "\"", "\"shape\":" + shape,
                                            "\"data_offsets\":" + offsets};
        std::string out = "{";
        const std::size_t count = in.ConsumeIntegralInRange<std::size_t>(0, 5);
        for (std::size_t i = 0; i < count + 3; ++i) {
            // The three keys in order first (usually), then repeats or extra keys.
            const std::size_t which = i < 3 && in.ConsumeIntegralInRange<unsigned>(0, 7) != 7
                                          ? i
                                          : in.ConsumeIntegralInRange<std::size_t>(0, 3);
            out += (i ? "," : "");
            out += which < 3 ? members[which] : "\"extra\":" + number(in);
        }
        return out + "}";
    }

    std::string metadata() {
        std::string out = "{";
        const std::size_t count = in.ConsumeIntegralInRange<std::size_t>(0, 3);
        for (std::size_t i = 0; i < count; ++i)
            out += (i ? ",\"" : "\"") + name(in) +
                   "\":" + (in.ConsumeIntegralInRange<unsigned>(0, 3) != 3 ? "\"pt\"" : number(in));
        return out + "}";
    }

    std::string header() {
        if (in.ConsumeIntegralInRange<unsigned>(0, 31) == 31) return nested(in, "");
        std::string out = "{";
        const std::size_t count = in.ConsumeIntegralInRange<std::size_t>(1, 6) % 6;
        for (std::size_t i = 0; i < count; ++i) {
            const std::string key = name(in);
            out +=
                (i ? ",\"" : "\"") + key + "\":" + (key == "__metadata__" ? metadata() : entry());
        }
        out += "}";
        static const char* const kTails[] = {"", "", "", "   ", "\n", " x", "}"};
        switch (in.ConsumeIntegralInRange<unsigned>(0, 3)) {
            case 0:
                out += pick(in, kTails);
                break;
            case 1:  // a NUL, then whatever
                out += std::string(1, '\0') + pick(in, kTails) + "garbage";
                break;
            default:  // the format's padding to a multiple of 8
                out.append((8 - out.size() % 8) % 8, ' ');
        }
        return out;
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    Builder build{in};
    const std::string header = build.header();
    std::uint64_t length = header.size();
    switch (in.ConsumeIntegralInRange<unsigned>(0, 15)) {
        case 13:
            length += 1;
            break;
        case 14:
            length = length ? length - 1 : 0;
            break;
        case 15:
            length = ~std::uint64_t{0};
            break;
        default:
            break;
    }
    std::vector<std::uint8_t> file;
    for (int i = 0; i < 8; ++i) file.push_back(static_cast<std::uint8_t>(length >> (8 * i)));
    file.insert(file.end(), header.begin(), header.end());
    // The data: as many bytes as the consistent entries need (from the input, zero when it runs
    // out), or sometimes a few more or fewer.
    std::uint64_t data_size = build.offset;
    if (in.ConsumeIntegralInRange<unsigned>(0, 7) == 7)
        data_size = in.ConsumeIntegralInRange<std::uint64_t>(0, build.offset + 16);
    if (data_size > (std::uint64_t{1} << 20)) data_size = std::uint64_t{1} << 20;
    const std::vector<std::uint8_t> bytes = in.ConsumeBytes<std::uint8_t>(data_size);
    file.insert(file.end(), bytes.begin(), bytes.end());
    file.resize(file.size() + (data_size - bytes.size()), 0);
    headwise_fuzz::check(file.data(), file.size());
    return 0;
}
