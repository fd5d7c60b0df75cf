// SPDX-License-Identifier: MIT
// A model's config.json read key by key, each value checked, every error naming the function,
// the file and the key (models/bert.hpp, models/llama.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>      // std::isfinite
#include <cstdint>    // std::uint64_t
#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::runtime_error
#include <string>     // std::string, std::to_string
#include <utility>    // std::move

#include "../../config.hpp"
#include "json_file.hpp"

namespace headwise::detail {

/// The JSON object of a config.json. A key that is absent or null leaves its value as it was
/// (or fails, "missing", when it is required); a key of the wrong type or range fails with
/// std::runtime_error "<fn>: <path>: <key>: expected ..., got <the JSON value>", the value as
/// describe_json() gives it (bounded: a long string cut, an array or object by its size).
class ConfigFile {
public:
    ConfigFile(const char* fn, std::string path)
        : fn_(fn), path_(std::move(path)), json_(read_json_file(fn_, path_)) {}

    const nlohmann::json& json() const noexcept { return json_; }

    /// Throws std::runtime_error naming the function, the file and `key`.
    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw std::runtime_error(std::string(fn_) + ": " + path_ + ": " + key + ": " + what);
    }

    /// `key` as an integer of at least `minimum`.
    void integer(const char* key, Index& into, bool required, Index minimum) const {
        const auto it = json_.find(key);
        if (it == json_.end() || it->is_null()) {
            if (required) fail(key, "missing");
            return;
        }
        if (!it->is_number_integer()) fail(key, "expected an integer, got " + describe_json(*it));
        // An unsigned value beyond Index's range would wrap to a negative one in get<Index>().
        const Index most = std::numeric_limits<Index>::max();
        if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(most))
            fail(key, "expected at most " + std::to_string(most) + ", got " + describe_json(*it));
        const auto v = it->get<Index>();
        if (v < minimum)
            fail(key,
                 "expected at least " + std::to_string(minimum) + ", got " + std::to_string(v));
        into = v;
    }

    /// `key` of object `o` (this file's or one inside it) as a finite number of at least
    /// `minimum`, or above it when `exclusive`.
    void number(const nlohmann::json& o, const char* key, double& into, double minimum,
                bool exclusive) const {
        const auto it = o.find(key);
        if (it == o.end() || it->is_null()) return;
        const double v = it->is_number() ? it->get<double>() : 0.0;
        if (!it->is_number() || !std::isfinite(v) || v < minimum || (exclusive && v == minimum))
            fail(key, std::string("expected a finite number ") +
                          (exclusive ? "above " : "of at least ") + nlohmann::json(minimum).dump() +
                          ", got " + describe_json(*it));
        into = v;
    }
    void number(const char* key, double& into, double minimum, bool exclusive) const {
        number(json_, key, into, minimum, exclusive);
    }

    /// `key` as true or false.
    void boolean(const char* key, bool& into) const {
        const auto it = json_.find(key);
        if (it == json_.end() || it->is_null()) return;
        if (!it->is_boolean()) fail(key, "expected true or false, got " + describe_json(*it));
        into = it->get<bool>();
    }

    /// `key`, when present and not null, must be the string `expected`.
    void expect_string(const char* key, const char* expected) const {
        const auto it = json_.find(key);
        if (it != json_.end() && !it->is_null() && *it != expected)
            fail(key, std::string("expected \"") + expected + "\", got " + describe_json(*it));
    }

    /// num_attention_heads must divide hidden_size.
    void check_heads_divide(Index hidden_size, Index num_attention_heads) const {
        if (hidden_size % num_attention_heads != 0)
            fail("num_attention_heads", "must divide hidden_size = " + std::to_string(hidden_size) +
                                            ", got " + std::to_string(num_attention_heads));
    }

private:
    const char* fn_;
    std::string path_;
    nlohmann::json json_;
};

}  // namespace headwise::detail
