// SPDX-License-Identifier: MIT
// The module contract: Linear, MultiheadAttention and a layer made of both, with name prefixes.
#include <stdexcept>  // std::invalid_argument
#include <string>     // std::string
#include <vector>     // std::vector

#include <headwise/layers/attention/multihead_attention.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/layers/module.hpp>
#include <headwise/random.hpp>

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"

namespace test_module {

using namespace headwise;
using Catch::Matchers::Message;

namespace {

MultiheadAttentionOptions small_options() {
    MultiheadAttentionOptions o;
    o.embed_dim = 4;
    o.num_heads = 2;
    return o;
}

/// A layer made of layers, as an encoder layer is: attention, then a Linear.
template <class T>
class Block : public Module<Block<T>, T> {
public:
    static constexpr const char* kName = "test::Block";

    explicit Block(std::uint64_t seed) : attn(small_options(), seed), fc(4, 3, true, rng_) {}

    template <class Self, class Visit>
    static void visit_parameters(Self& self, Visit&& visit) {
        Block::visit_child(self.attn, "self_attn.", visit);
        Block::visit_child(self.fc, "linear1.", visit);
    }
    template <class Self, class Visit>
    static void visit_children(Self& self, Visit&& visit) {
        visit(self.attn);
        visit(self.fc);
    }

    Generator rng_{11};
    MultiheadAttention<T> attn;
    Linear<T> fc;
};

std::vector<std::string> names_of(const std::vector<Parameter<double>>& ps) {
    std::vector<std::string> names;
    for (const Parameter<double>& p : ps) names.push_back(p.name);
    return names;
}

}  // namespace

TEST_CASE("Linear follows the module contract", "[module]") {
    Generator rng(1);
    Linear<double> fc(3, 2, true, rng);
    std::vector<Parameter<double>> ps = fc.parameters();
    REQUIRE(names_of(ps) == std::vector<std::string>{"weight", "bias"});
    CHECK(ps[0].value.data() == fc.weight().data());
    CHECK(ps[1].grad.data() == fc.grad_bias().data());
    ps[1].value(0) = 2.5;  // the views write into the layer
    CHECK(fc.bias()(0) == 2.5);
    CHECK(fc.parameter_count() == 8);
    CHECK(fc.is_training());
    fc.eval();
    CHECK_FALSE(fc.is_training());
    const StateDict<double> sd = fc.state_dict("fc.");
    REQUIRE(sd.size() == 2);
    CHECK(sd.count("fc.weight") == 1);
    CHECK(sd.count("fc.bias") == 1);
}

TEST_CASE("a layer made of layers prefixes its children's names", "[module]") {
    Block<double> a(1), b(2);
    REQUIRE(names_of(a.parameters()) ==
            std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                     "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                                     "linear1.weight", "linear1.bias"});
    CHECK(a.parameter_count() == a.attn.parameter_count() + a.fc.parameter_count());

    // state_dict -> load_state_dict copies every child's parameters, under a further prefix.
    const StateDict<double> sd = a.state_dict("layers.0.");
    CHECK(sd.count("layers.0.self_attn.in_proj_weight") == 1);
    b.load_state_dict(sd, "layers.0.");
    CHECK(test::identical(b.attn.state_dict().at("in_proj_weight"),
                          a.attn.state_dict().at("in_proj_weight")));
    CHECK(test::identical(b.fc.state_dict().at("weight"), a.fc.state_dict().at("weight")));

    // train/eval reach the children; zero_grad clears theirs.
    a.eval();
    CHECK_FALSE(a.attn.is_training());
    CHECK_FALSE(a.fc.is_training());
    a.train();
    CHECK(a.attn.is_training());
    a.fc.grad_weight()(0, 0) = 1.0;
    a.attn.parameters()[0].grad(0, 0) = 1.0;
    a.zero_grad();
    CHECK(a.fc.grad_weight()(0, 0) == 0.0);
    CHECK(a.attn.parameters()[0].grad(0, 0) == 0.0);
}

TEST_CASE("load_state_dict with a prefix reads only its keys and names every problem", "[module]") {
    MultiheadAttention<double> m(small_options(), 1);
    StateDict<double> sd = m.state_dict("encoder.attn.");
    sd.emplace("encoder.norm.weight", Tensor<double>(Shape{4}));  // another module's: ignored
    sd.at("encoder.attn.out_proj.bias").fill(0.25);
    m.load_state_dict(sd, "encoder.attn.");
    CHECK(m.state_dict().at("out_proj.bias")(1) == 0.25);

    StateDict<double> bad = sd;
    bad.erase("encoder.attn.in_proj_bias");
    bad.emplace("encoder.attn.in_proj_biass", Tensor<double>(Shape{12}));
    CHECK_THROWS_MATCHES(
        m.load_state_dict(bad, "encoder.attn."), std::invalid_argument,
        Message("headwise::MultiheadAttention::load_state_dict: encoder.attn.in_proj_bias: "
                "missing from the state dict, expected shape [12] (unexpected keys: "
                "encoder.attn.in_proj_biass)"));
    bad.erase("encoder.attn.in_proj_biass");
    bad.emplace("encoder.attn.in_proj_bias", Tensor<double>(Shape{12}));
    bad.emplace("encoder.attn.bias_k", Tensor<double>(Shape{1, 1, 4}));
    CHECK_THROWS_MATCHES(
        m.load_state_dict(bad, "encoder.attn."), std::invalid_argument,
        Message("headwise::MultiheadAttention::load_state_dict: encoder.attn.bias_k: unexpected "
                "key in the state dict (shape [1, 1, 4]); expected keys: "
                "encoder.attn.in_proj_weight, encoder.attn.in_proj_bias, "
                "encoder.attn.out_proj.weight, encoder.attn.out_proj.bias"));
    CHECK(m.state_dict().at("out_proj.bias")(1) == 0.25);  // unchanged by the failed loads
}

}  // namespace test_module
