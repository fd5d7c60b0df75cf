// SPDX-License-Identifier: MIT
// MultiheadAttention against torch.nn.MultiheadAttention 1.13: outputs, weights and gradients of
// every case in tests/golden/mha (written by tests/golden/make_mha_golden.py), every projection.
#include <headwise/io/npy.hpp>
#include <headwise/layers/attention/multihead_attention.hpp>

#include <filesystem>  // std::filesystem::directory_iterator
#include <map>         // std::map
#include <set>         // std::set
#include <string>      // std::string
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/golden_attention.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/projections.hpp"
#include "support/tolerance.hpp"

namespace test_mha_golden {

using headwise::Index;
using headwise::Projection;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
using headwise::test::golden_attention_options;
using headwise::test::GoldenCase;
using headwise::test::kGoldenTolerance;
using headwise::test::kProjections;

namespace {

// Largest |headwise - PyTorch| over a tensor, relative to the tensor's largest |PyTorch| value
// (support/tolerance.hpp says why these bounds).
constexpr double kToleranceDouble = kGoldenTolerance<double>;
constexpr double kToleranceFloat = kGoldenTolerance<float>;

template <class T>
Tensor<T> cast(const Tensor<double>& t) {
    Tensor<T> out(t.shape());
    for (Index i = 0; i < t.numel(); ++i) out.data()[i] = static_cast<T>(t.data()[i]);
    return out;
}

template <class T>
std::map<std::string, Tensor<T>> cast_dict(const std::map<std::string, Tensor<double>>& sd) {
    std::map<std::string, Tensor<T>> out;
    for (const auto& [key, tensor] : sd) out.emplace(key, cast<T>(tensor));
    return out;
}

template <class Map>
std::set<std::string> keys_of(const Map& map) {
    std::set<std::string> keys;
    for (const auto& entry : map) keys.insert(entry.first);
    return keys;
}

/// Runs one golden case through a fresh module with the given projection and attention kernel,
/// in training mode with dropout 0 (so forward keeps what backward needs), and compares
/// everything PyTorch saved.
template <class T>
void check_case(const GoldenCase& c, Projection projection, headwise::AttentionKernel kernel,
                double tolerance) {
    headwise::MultiheadAttention<T> mha(golden_attention_options(c, projection, kernel),
                                        /*seed=*/1);
    mha.load_state_dict(cast_dict<T>(c.state_dict()));

    headwise::AttentionMasks<T> m;
    if (c.masks.count("attn_mask")) m.attn_mask = c.mask("attn_mask");
    if (c.tensors.count("attn_bias")) m.attn_bias = cast<T>(c.tensor("attn_bias"));
    if (c.masks.count("key_padding_mask")) m.key_padding_mask = c.mask("key_padding_mask");
    m.is_causal = c.flag("is_causal");
    m.need_weights = c.flag("need_weights");
    m.average_attn_weights = c.flag("average_attn_weights");

    const Tensor<T> query = cast<T>(c.tensor("query"));
    const Tensor<T> key = cast<T>(c.tensor("key"));
    const Tensor<T> value = cast<T>(c.tensor("value"));
    // Pass one tensor several times where PyTorch was given one: that selects the packed paths.
    const Tensor<T>& k = c.flag("self_attention") ? query : key;
    const Tensor<T>& v = c.flag("self_attention") ? query : c.flag("kv_same") ? key : value;

    const auto fwd = mha.forward(query, k, v, m);
    HEADWISE_CHECK_CLOSE(fwd.output, c.tensor("output"), tolerance);
    if (m.need_weights) {
        HEADWISE_CHECK_CLOSE(fwd.attn_weights, c.tensor("attn_weights"), tolerance);
    } else {
        CHECK(fwd.attn_weights.numel() == 0);
    }

    const auto g = mha.backward(fwd, cast<T>(c.tensor("grad_output")));
    HEADWISE_CHECK_CLOSE(g.query, c.tensor("grad_query"), tolerance);
    HEADWISE_CHECK_CLOSE(g.key, c.tensor("grad_key"), tolerance);
    HEADWISE_CHECK_CLOSE(g.value, c.tensor("grad_value"), tolerance);

    const auto grads = mha.grad_dict();
    CHECK(keys_of(grads) == keys_of(c.grads));
    for (const auto& [name, expected] : c.grads) {
        INFO("gradient of " << name);
        const auto it = grads.find(name);
        if (it != grads.end()) HEADWISE_CHECK_CLOSE(it->second, expected, tolerance);
    }
}

}  // namespace

TEST_CASE("golden cases exist and are complete", "[mha][golden]") {
    const std::vector<std::string> names = headwise::test::golden_case_names();
    REQUIRE(names.size() >= 20);
    for (const std::string& name : names) {
        CAPTURE(name);
        const GoldenCase c = headwise::test::load_golden_case(name);
        for (const char* t : {"query", "key", "value", "grad_output", "output", "grad_query",
                              "grad_key", "grad_value"})
            CHECK(c.tensors.count(t) == 1);
        CHECK(c.tensors.count("attn_weights") == static_cast<std::size_t>(c.flag("need_weights")));
        CHECK_FALSE(c.grads.empty());
        // The causal mask is only ever described by is_causal, never by a file.
        if (c.flag("is_causal")) CHECK(c.masks.count("attn_mask") == 0);
    }
}

TEST_CASE("MultiheadAttention<double> reproduces PyTorch 1.13 on every golden case",
          "[mha][golden]") {
    const std::string name = GENERATE(from_range(headwise::test::golden_case_names()));
    const Projection projection = GENERATE(from_range(kProjections));
    const auto kernel =
        GENERATE(headwise::AttentionKernel::blocked, headwise::AttentionKernel::materialised);
    CAPTURE(name, headwise::to_string(projection), headwise::to_string(kernel));
    check_case<double>(headwise::test::load_golden_case(name), projection, kernel,
                       kToleranceDouble);
}

TEST_CASE(
    "MultiheadAttention<float> reproduces PyTorch 1.13 on every golden case within float "
    "rounding",
    "[mha][golden]") {
    const std::string name = GENERATE(from_range(headwise::test::golden_case_names()));
    const Projection projection = GENERATE(from_range(kProjections));
    const auto kernel =
        GENERATE(headwise::AttentionKernel::blocked, headwise::AttentionKernel::materialised);
    CAPTURE(name, headwise::to_string(projection), headwise::to_string(kernel));
    check_case<float>(headwise::test::load_golden_case(name), projection, kernel, kToleranceFloat);
}

TEST_CASE("golden state dicts load and save under PyTorch's names and shapes", "[mha][golden]") {
    const std::string name = GENERATE(from_range(headwise::test::golden_case_names()));
    CAPTURE(name);
    const GoldenCase c = headwise::test::load_golden_case(name);
    const auto expected = c.state_dict();

    headwise::MultiheadAttention<double> mha(golden_attention_options(c, Projection::fused), 1);
    // Before loading, the module already has exactly PyTorch's entries and shapes.
    const auto initial = mha.state_dict();
    REQUIRE(keys_of(initial) == keys_of(expected));
    for (const auto& [key, tensor] : expected) {
        CAPTURE(key);
        CHECK(initial.at(key).shape() == tensor.shape());
    }

    mha.load_state_dict(expected);
    headwise::test::ScratchDir dir("test_mha_golden-" + name);
    headwise::save_npy_dict(dir.path().string(), mha.state_dict());

    // The saved directory holds the same file names as the fixture's parameter files...
    std::set<std::string> saved_files, fixture_files;
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
        saved_files.insert(entry.path().filename().string());
    for (const auto& entry : std::filesystem::directory_iterator(c.dir / "grad"))
        fixture_files.insert(entry.path().filename().string());
    CHECK(saved_files == fixture_files);

    // ...with the same values, bit for bit.
    const auto reloaded = headwise::load_npy_dict<double>(dir.path().string());
    REQUIRE(keys_of(reloaded) == keys_of(expected));
    for (const auto& [key, tensor] : expected) {
        CAPTURE(key);
        const Tensor<double>& back = reloaded.at(key);
        REQUIRE(back.shape() == tensor.shape());
        bool identical = true;
        for (Index i = 0; i < tensor.numel(); ++i) identical &= back.data()[i] == tensor.data()[i];
        CHECK(identical);
    }

    // Every projection reads the same parameters: switching changes no entry.
    mha.with_projection(Projection::per_head);
    CHECK(keys_of(mha.state_dict()) == keys_of(expected));
    CHECK(keys_of(mha.grad_dict()) == keys_of(c.grads));
}

TEST_CASE("each forward keeps its own state until its backward, and eval mode agrees",
          "[mha][golden]") {
    const std::string name = GENERATE(as<std::string>{}, "attn_mask_bias_padding", "bias_kv");
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(name, headwise::to_string(projection));
    const GoldenCase c = headwise::test::load_golden_case(name);
    headwise::MultiheadAttention<double> mha(golden_attention_options(c, projection), 1);
    mha.load_state_dict(c.state_dict());

    headwise::AttentionMasks<double> m;
    if (c.masks.count("attn_mask")) m.attn_mask = c.mask("attn_mask");
    if (c.tensors.count("attn_bias")) m.attn_bias = c.tensor("attn_bias");
    if (c.masks.count("key_padding_mask")) m.key_padding_mask = c.mask("key_padding_mask");
    const Tensor<double>& q = c.tensor("query");
    const Tensor<double>& k = c.flag("self_attention") ? q : c.tensor("key");
    const Tensor<double>& v = c.flag("self_attention") ? q : c.tensor("value");

    // A second forward on other inputs, and its backward, run between the first forward and
    // its backward; the first backward must still see its own inputs and probabilities.
    const auto first = mha.forward(q, k, v, m);
    Tensor<double> other_q = c.tensor("query");
    for (double& x : other_q) x = 0.5 * x + 0.25;
    const Tensor<double>& other_k = c.flag("self_attention") ? other_q : k;
    const Tensor<double>& other_v = c.flag("self_attention") ? other_q : v;
    const auto second = mha.forward(other_q, other_k, other_v, m);
    (void)mha.backward(second, c.tensor("grad_output"));
    mha.zero_grad();

    const auto g = mha.backward(first, c.tensor("grad_output"));
    HEADWISE_CHECK_CLOSE(first.output, c.tensor("output"), kToleranceDouble);
    HEADWISE_CHECK_CLOSE(g.query, c.tensor("grad_query"), kToleranceDouble);
    HEADWISE_CHECK_CLOSE(g.key, c.tensor("grad_key"), kToleranceDouble);
    HEADWISE_CHECK_CLOSE(g.value, c.tensor("grad_value"), kToleranceDouble);
    const auto grads = mha.grad_dict();
    for (const auto& [key, expected] : c.grads) {
        INFO("gradient of " << key);
        HEADWISE_CHECK_CLOSE(grads.at(key), expected, kToleranceDouble);
    }

    mha.eval();
    const auto inference = mha.forward(q, k, v, m);
    HEADWISE_CHECK_CLOSE(inference.output, c.tensor("output"), kToleranceDouble);
    CHECK_THROWS(mha.backward(inference, c.tensor("grad_output")));  // eval keeps nothing
}

}  // namespace test_mha_golden
