// SPDX-License-Identifier: MIT
// Grouped-query attention, a chosen scale and bottom-right causal masks against PyTorch 1.13:
// every case in tests/golden/gqa (written by tests/golden/make_gqa_golden.py through a
// repeated-weights, rescaled-query nn.MultiheadAttention), every projection.
#include <headwise/layers/attention/multihead_attention.hpp>

#include <map>     // std::map
#include <string>  // std::string, std::stod
#include <vector>  // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/golden_attention.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/projections.hpp"
#include "support/tolerance.hpp"

namespace test_gqa_golden {

using headwise::Index;
using headwise::Projection;
using headwise::Tensor;
using headwise::TensorView;
using headwise::test::golden_attention_options;
using headwise::test::GoldenCase;
using headwise::test::kGoldenTolerance;
using headwise::test::kProjections;

namespace {

template <class T>
Tensor<T> cast(const Tensor<double>& t) {
    Tensor<T> out(t.shape());
    for (Index i = 0; i < t.numel(); ++i) out.data()[i] = static_cast<T>(t.data()[i]);
    return out;
}

template <class T>
void check_case(const GoldenCase& c, Projection projection, double tolerance) {
    headwise::MultiheadAttention<T> mha(golden_attention_options(c, projection), /*seed=*/1);
    std::map<std::string, Tensor<T>> sd;
    for (const auto& [key, tensor] : c.state_dict()) sd.emplace(key, cast<T>(tensor));
    mha.load_state_dict(sd);

    headwise::AttentionMasks<T> m;
    if (c.masks.count("attn_mask")) m.attn_mask = c.mask("attn_mask");
    if (c.masks.count("key_padding_mask")) m.key_padding_mask = c.mask("key_padding_mask");
    m.is_causal = c.flag("is_causal");
    m.causal_alignment = c.flag("causal_alignment") ? headwise::CausalAlignment::bottom_right
                                                    : headwise::CausalAlignment::top_left;
    m.need_weights = c.flag("need_weights");
    m.average_attn_weights = c.flag("average_attn_weights");

    const Tensor<T> query = cast<T>(c.tensor("query"));
    const Tensor<T> key = cast<T>(c.tensor("key"));
    const Tensor<T> value = cast<T>(c.tensor("value"));
    const Tensor<T>& k = c.flag("self_attention") ? query : key;
    const Tensor<T>& v = c.flag("self_attention") ? query : c.flag("kv_same") ? key : value;

    const auto fwd = mha.forward(query, k, v, m);
    HEADWISE_CHECK_CLOSE(fwd.output, c.tensor("output"), tolerance);
    if (m.need_weights) HEADWISE_CHECK_CLOSE(fwd.attn_weights, c.tensor("attn_weights"), tolerance);

    const auto g = mha.backward(fwd, cast<T>(c.tensor("grad_output")));
    HEADWISE_CHECK_CLOSE(g.query, c.tensor("grad_query"), tolerance);
    HEADWISE_CHECK_CLOSE(g.key, c.tensor("grad_key"), tolerance);
    HEADWISE_CHECK_CLOSE(g.value, c.tensor("grad_value"), tolerance);
    const auto grads = mha.grad_dict();
    REQUIRE(grads.size() == c.grads.size());
    for (const auto& [name, expected] : c.grads) {
        INFO("gradient of " << name);
        REQUIRE(grads.count(name) == 1);
        HEADWISE_CHECK_CLOSE(grads.at(name), expected, tolerance);
    }
}

}  // namespace

TEST_CASE("grouped-query golden cases exist", "[gqa][golden]") {
    const std::vector<std::string> names = headwise::test::golden_case_names("gqa");
    CHECK(names.size() >= 10);
    int grouped = 0, scaled = 0, bottom_right = 0;
    for (const std::string& name : names) {
        const GoldenCase c = headwise::test::load_golden_case(name, "gqa");
        grouped += c.meta_int("num_kv_heads") < c.meta_int("num_heads");
        scaled += c.meta.count("scale") > 0;
        bottom_right += c.flag("causal_alignment");
    }
    CHECK(grouped >= 6);
    CHECK(scaled >= 3);
    CHECK(bottom_right >= 3);
}

TEST_CASE("grouped-query, scaled and bottom-right attention reproduce PyTorch 1.13 in double",
          "[gqa][golden]") {
    const std::string name = GENERATE(from_range(headwise::test::golden_case_names("gqa")));
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(name, headwise::to_string(projection));
    check_case<double>(headwise::test::load_golden_case(name, "gqa"), projection,
                       kGoldenTolerance<double>);
}

TEST_CASE("grouped-query attention reproduces PyTorch 1.13 in float", "[gqa][golden]") {
    const std::string name = GENERATE(from_range(headwise::test::golden_case_names("gqa")));
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(name, headwise::to_string(projection));
    check_case<float>(headwise::test::load_golden_case(name, "gqa"), projection,
                      kGoldenTolerance<float>);
}

}  // namespace test_gqa_golden
