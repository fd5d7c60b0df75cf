// SPDX-License-Identifier: MIT
// Tests of TransformerEncoderLayer: unseen torch layers loaded by their state-dict names match in
// output and every gradient under every projection; gradcheck with dropout; contract and errors.
#include <headwise/gradcheck.hpp>
#include <headwise/io/npy.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>

#include <limits>     // std::numeric_limits
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/golden_layers.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/projections.hpp"
#include "support/tolerance.hpp"
#include "support/training_golden.hpp"  // cast

namespace test_transformer_encoder_layer {

using namespace headwise;
using headwise::test::cast;
using headwise::test::kProjections;

TEMPLATE_TEST_CASE("an unseen torch encoder layer matches in output and every gradient",
                   "[encoder][golden]", float, double) {
    using T = TestType;
    const std::string name = GENERATE("post_norm_relu", "pre_norm_relu", "post_norm_gelu_masks",
                                      "pre_norm_gelu_masks", "pre_norm_gelu_unbatched");
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(name, to_string(projection));
    const test::EncoderCase c = test::load_encoder_case(name);
    TransformerEncoderLayerOptions o = c.options;
    o.projection = projection;
    TransformerEncoderLayer<T> layer(o, 99);
    StateDict<T> sd;
    for (const auto& entry : c.state) sd.emplace(entry.first, cast<T>(entry.second));
    layer.load_state_dict(sd);  // torch's names, no renaming
    AttentionMasks<T> masks;
    masks.attn_mask = c.attn_mask;
    masks.key_padding_mask = c.key_padding_mask;
    const auto f = layer.forward(cast<T>(c.x), masks);
    HEADWISE_CHECK_CLOSE(f.output, c.output, test::kGoldenTolerance<T>);
    const Tensor<T> dx = layer.backward(f, cast<T>(c.grad_output));
    HEADWISE_CHECK_CLOSE(dx, c.grad_x, test::kGoldenTolerance<T>);
    const StateDict<T> grads = layer.grad_dict();
    REQUIRE(grads.size() == c.grads.size());
    for (const auto& entry : c.grads) {
        CAPTURE(entry.first);
        HEADWISE_CHECK_CLOSE(grads.at(entry.first), entry.second, test::kGoldenTolerance<T>);
    }
}

TEST_CASE("the encoder layer passes gradcheck with dropout, for the input and every parameter",
          "[encoder][gradcheck]") {
    const bool norm_first = GENERATE(false, true);
    const Activation activation = GENERATE(Activation::relu, Activation::gelu);
    CAPTURE(norm_first, to_string(activation));
    TransformerEncoderLayerOptions o;
    o.d_model = 4;
    o.nhead = 2;
    o.dim_feedforward = 6;
    o.dropout = 0.2;
    o.activation = activation;
    o.norm_first = norm_first;
    const TransformerEncoderLayer<double> base(o, 5);
    Generator rng(17);
    const std::vector<Parameter<const double>> params = base.parameters();
    std::vector<Tensor<double>> inputs{Tensor<double>::randn(Shape{2, 3, 4}, rng)};
    for (const Parameter<const double>& p : params) {
        Tensor<double> v(p.value.shape());
        for (Index i = 0; i < v.numel(); ++i)  // away from zero: ReLU kinks stay out of reach
            v.data()[i] = p.value[i] + (p.name.find("bias") != std::string::npos ? 0.3 : 0.0);
        inputs.push_back(std::move(v));
    }
    AttentionMasks<double> masks;
    masks.is_causal = true;
    // Each evaluation runs a copy of `base`: the same dropout streams, hence the same masks.
    auto make = [&](const std::vector<Tensor<double>>& in) {
        TransformerEncoderLayer<double> layer = base;
        StateDict<double> sd;
        for (std::size_t i = 0; i < params.size(); ++i) sd.emplace(params[i].name, in[i + 1]);
        layer.load_state_dict(sd);
        return layer;
    };
    const GradcheckResult r = gradcheck(
        [&](const std::vector<Tensor<double>>& in) {
            return make(in).forward(in[0], masks).output;
        },
        [&](const std::vector<Tensor<double>>& in, const Tensor<double>& dy) {
            TransformerEncoderLayer<double> layer = make(in);
            const auto f = layer.forward(in[0], masks);
            std::vector<Tensor<double>> grads{layer.backward(f, dy)};
            const StateDict<double> g = layer.grad_dict();
            for (const Parameter<const double>& p : params) grads.push_back(g.at(p.name));
            return grads;
        },
        inputs, rng, {1e-5, 1e-6});
    INFO(r.where);
    CHECK(r.ok);
    Index entries = 0;  // the input's and every parameter's: each one has a gradient
    for (const Tensor<double>& in : inputs) entries += in.numel();
    CHECK(r.checked == entries);
}

TEST_CASE("the encoder layer follows the module contract", "[encoder]") {
    TransformerEncoderLayerOptions o;
    o.d_model = 8;
    o.nhead = 2;
    o.dim_feedforward = 16;
    TransformerEncoderLayer<float> layer(o, 1);
    std::vector<std::string> names;
    for (const Parameter<float>& p : layer.parameters()) names.push_back(p.name);
    CHECK(names == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                            "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                                            "linear1.weight", "linear1.bias", "linear2.weight",
                                            "linear2.bias", "norm1.weight", "norm1.bias",
                                            "norm2.weight", "norm2.bias"});
    CHECK(layer.parameter_count() == 3 * 64 + 24 + 64 + 8 + 128 + 16 + 128 + 8 + 32);
    // A whole-model state dict loads by prefix.
    StateDict<float> model = layer.state_dict("encoder.layers.0.");
    model.emplace("decoder.weight", Tensor<float>(Shape{3}));
    TransformerEncoderLayer<float> other(o, 2);
    other.load_state_dict(model, "encoder.layers.0.");
    CHECK(test::identical(other.state_dict().at("linear1.weight"),
                          layer.state_dict().at("linear1.weight")));
    // eval(): no dropout, deterministic, nothing saved for backward.
    layer.eval();
    Generator rng(3);
    const Tensor<float> x = Tensor<float>::randn(Shape{2, 3, 8}, rng);
    const auto a = layer.forward(x), b = layer.forward(x);
    CHECK(test::identical(a.output, b.output));
    CHECK_FALSE(a.differentiable());
    CHECK_THROWS_MATCHES(layer.backward(a, a.output), std::invalid_argument,
                         Message("headwise::TransformerEncoderLayer::backward: fwd: comes from a "
                                 "forward in eval mode, which saves nothing for backward; call "
                                 "train() before forward"));
    layer.train();
    const auto t = layer.forward(x);
    CHECK_FALSE(test::identical(t.output, a.output));  // dropout 0.1 is on
    CHECK_THROWS_MATCHES(layer.forward(Tensor<float>(Shape{2, 3, 7})), shape_error,
                         Message("headwise::TransformerEncoderLayer::forward: x: expected shape "
                                 "[B, L, 8] or [L, 8], got [2, 3, 7]"));
    CHECK_THROWS_MATCHES(layer.backward(t, Tensor<float>(Shape{2, 3})), shape_error,
                         Message("headwise::TransformerEncoderLayer::backward: grad_output: "
                                 "expected shape [2, 3, 8], got [2, 3]"));
    o.nhead = 3;
    CHECK_THROWS_MATCHES(TransformerEncoderLayer<float>(o), std::invalid_argument,
                         Message("headwise::TransformerEncoderLayer::TransformerEncoderLayer: "
                                 "options.nhead: must be positive and divide d_model = 8, got 3"));
}

TEST_CASE("the encoder layer's errors name its own options, and with_projection throws",
          "[encoder][errors]") {
    const std::string ctor = "headwise::TransformerEncoderLayer::TransformerEncoderLayer: ";
    TransformerEncoderLayerOptions o;
    o.d_model = 8;
    o.nhead = 2;
    o.dim_feedforward = 16;
    auto fails = [&](const TransformerEncoderLayerOptions& bad, const std::string& message) {
        CAPTURE(message);
        REQUIRE_THROWS_AS(TransformerEncoderLayer<float>(bad), std::invalid_argument);
        REQUIRE_THROWS_WITH(TransformerEncoderLayer<float>(bad), ctor + message);
    };
    TransformerEncoderLayerOptions bad = o;
    bad.layer_norm_eps = std::numeric_limits<double>::infinity();
    fails(bad, "options.layer_norm_eps: must be finite and non-negative, got inf");
    bad.layer_norm_eps = -1e-5;
    fails(bad, "options.layer_norm_eps: must be finite and non-negative, got -1e-05");
    bad.layer_norm_eps = std::numeric_limits<double>::quiet_NaN();
    REQUIRE_THROWS_AS(TransformerEncoderLayer<float>(bad), std::invalid_argument);
    bad = o;
    bad.projection = static_cast<Projection>(42);
    fails(bad, "options.projection: must be fused, separate or per_head, got Projection(42)");
    bad = o;
    bad.activation = static_cast<Activation>(42);
    fails(bad, "options.activation: must be relu or gelu, got Activation(42)");
    CHECK(std::string(to_string(static_cast<Activation>(42))) == "unknown");
    bad = o;
    bad.dropout = 1.0;
    fails(bad, "options.dropout: must be in [0, 1), got 1");

    // with_projection checks its argument; it used to be noexcept, so a bad value ended the
    // program instead of throwing.
    TransformerEncoderLayer<float> layer(o, 1);
    STATIC_REQUIRE_FALSE(noexcept(layer.with_projection(Projection::fused)));
    const auto bogus = static_cast<Projection>(42);
    REQUIRE_THROWS_AS(layer.with_projection(bogus), std::invalid_argument);
    REQUIRE_THROWS_WITH(layer.with_projection(bogus),
                        "headwise::TransformerEncoderLayer::with_projection: projection: must be "
                        "fused, separate or per_head, got Projection(42)");
    CHECK(layer.options().projection == Projection::fused);  // unchanged
    CHECK(layer.self_attn().projection() == Projection::fused);
    layer.with_projection(Projection::per_head);
    CHECK(layer.options().projection == Projection::per_head);
    CHECK(layer.self_attn().projection() == Projection::per_head);
}

}  // namespace test_transformer_encoder_layer
