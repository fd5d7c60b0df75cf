// SPDX-License-Identifier: MIT
// The tiny models of tests/golden (the Llamas of tests/golden/llama, the BERT of
// tests/golden/minilm/tiny_bert): their directories, the Llamas' prompts, and token ids as stored.
#pragma once

#include <cstdint>  // std::int64_t
#include <string>   // std::string
#include <vector>   // std::vector

#include <headwise/io/npy.hpp>
#include <headwise/tensor.hpp>

#include "golden.hpp"

namespace headwise::test {

/// tests/golden/llama/<name>: "tied" or "untied" (2 layers, weights of std 0.2).
inline std::string llama_dir(const std::string& name) {
    return (golden_dir() / "llama" / name).string();
}

/// The prompts of the tiny Llamas' golden cases: 7, 4 and 2 tokens.
inline const std::vector<std::vector<std::int64_t>> kLlamaPrompts = {
    {1, 17, 42, 99, 5, 63, 120}, {1, 8, 77, 31}, {1, 54}};

/// tests/golden/minilm/tiny_bert: a 2-layer BERT with its input_ids, token_type_ids and
/// padding_mask for 3 texts of up to 6 tokens.
inline std::string tiny_bert_dir() { return (golden_dir() / "minilm" / "tiny_bert").string(); }

/// Token ids from a .npy file, where they are stored as float64 (load_npy reads float, double and
/// bool arrays).
inline Tensor<std::int64_t> load_ids(const std::string& path) {
    const Tensor<double> d = load_npy<double>(path);
    Tensor<std::int64_t> ids(d.shape());
    for (Index i = 0; i < d.numel(); ++i) ids.data()[i] = static_cast<std::int64_t>(d.data()[i]);
    return ids;
}

}  // namespace headwise::test
