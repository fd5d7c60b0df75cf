// SPDX-License-Identifier: MIT
// Tests of train_gpt's model (examples/gpt_model.hpp) on a tape: its gradients against central
// differences, causality, its parameter names and evaluation on a no-grad tape.
#include <headwise/autograd/functions.hpp>
#include <headwise/autograd/tape.hpp>

#include <headwise/gradcheck.hpp>

#include "../../examples/gpt_model.hpp"

#include <cstdint>  // std::int64_t
#include <string>   // std::string
#include <vector>   // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/parameter_vectors.hpp"

namespace test_tape_gpt {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;
using headwise::autograd::Tape;
using headwise::autograd::Var;
using headwise::test::identical;

namespace {

constexpr Index kB = 2, kL = 5;

/// Two blocks of width 8 (2 heads) over a context of 5: every kind of parameter, few of them.
gpt_model::Config tiny() {
    gpt_model::Config c;
    c.vocab = 7;
    c.context = kL;
    c.d_model = 8;
    c.heads = 2;
    c.layers = 2;
    return c;
}

/// Tokens [B, L] and next-token targets [B L], the first two positions ignored (as train_gpt's
/// prompt positions are).
struct Data {
    Tensor<std::int64_t> ids{Shape{kB, kL}}, targets{Shape{kB * kL}};
    headwise::CrossEntropyOptions ce;
    Data() {
        ce.ignore_index = -100;
        for (Index i = 0; i < kB * kL; ++i) {
            ids.data()[i] = (3 * i + 1) % 7;
            targets.data()[i] = i % kL < 2 ? -100 : (5 * i + 2) % 7;
        }
    }
};

template <class T>
Var<T> loss_of(gpt_model::GPT<T>& model, Tape<T>& tape, const Data& d) {
    return headwise::autograd::cross_entropy(model.forward(tape, d.ids), d.targets, d.ce);
}

}  // namespace

TEST_CASE("gpt: the tape's gradients of every parameter pass gradcheck in double") {
    headwise::Generator rng(31);
    gpt_model::GPT<double> model(tiny(), rng);
    const Data d;
    std::vector<Tensor<double>> params;
    headwise::test::append_values(model.parameters(), params);
    auto load = [&](const std::vector<Tensor<double>>& in) {
        headwise::test::load_values(model.parameters(), in, 0);
    };
    auto f = [&](const std::vector<Tensor<double>>& in) {
        load(in);
        Tape<double> tape(Tape<double>::no_grad);
        Tensor<double> out(Shape{1});
        out.data()[0] = loss_of(model, tape, d).item();
        return out;
    };
    auto backward = [&](const std::vector<Tensor<double>>& in, const Tensor<double>& g) {
        load(in);
        model.zero_grad();
        Tape<double> tape;
        tape.backward(loss_of(model, tape, d), g.reshape(Shape{}));
        std::vector<Tensor<double>> out;
        headwise::test::append_grads(model.parameters(), out);
        return out;
    };
    headwise::GradcheckOptions options;
    options.eps = 3e-5;  // as test_tape.cpp's composed models: largest relative error 1.8e-7
    const headwise::GradcheckResult r = headwise::gradcheck(f, backward, params, rng, options);
    INFO(r.where << " (largest relative error " << r.max_rel_error << ")");
    CHECK(r.ok);
    CHECK(r.checked == model.parameter_count());
}

TEMPLATE_TEST_CASE("gpt: the logits at a position do not depend on later tokens", "", float,
                   double) {
    using T = TestType;
    headwise::Generator rng(32);
    gpt_model::GPT<T> model(tiny(), rng);
    Data d;
    Tape<T> tape(Tape<T>::no_grad);
    const Tensor<T> before(model.forward(tape, d.ids).value());
    d.ids(1, 3) = (d.ids(1, 3) + 1) % 7;  // sequence 1, position 3
    const Tensor<T> after(model.forward(tape, d.ids).value());
    const Index V = tiny().vocab;
    for (Index row = 0; row < kB * kL; ++row) {
        CAPTURE(row);
        bool same = true;
        for (Index v = 0; v < V; ++v)
            same = same && before.data()[row * V + v] == after.data()[row * V + v];
        CHECK(same == (row < kL + 3));  // sequence 0 and positions 0..2 of sequence 1 unchanged
    }
}

TEST_CASE("gpt: the parameters' names and count, evaluation records nothing") {
    headwise::Generator rng(33);
    gpt_model::GPT<float> model(tiny(), rng);
    const auto sd = model.state_dict();
    for (const char* name :
         {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.in_proj_weight",
          "h.0.attn.out_proj.bias", "h.1.mlp.0.bias", "h.1.mlp.1.weight", "h.1.mlp.3.bias",
          "head.0.weight", "head.1.weight"}) {
        CAPTURE(name);
        CHECK(sd.count(name) == 1);
    }
    CHECK(sd.count("head.1.bias") == 0);  // the LM head has no bias
    const Index E = 8, V = 7;
    const Index block =
        4 * E + (3 * E * E + 3 * E) + (E * E + E) + (4 * E * E + 4 * E) + (4 * E * E + E);
    CHECK(model.parameter_count() == V * E + kL * E + 2 * block + 2 * E + E * V);

    const Data d;
    Tape<float> recording;
    const Var<float> logits = model.forward(recording, d.ids);
    CHECK(recording.size() > 0);
    model.eval();
    Tape<float> no_grad(Tape<float>::no_grad);
    const Var<float> same = model.forward(no_grad, d.ids);
    CHECK(no_grad.size() == 0);
    CHECK(!same.recorded());
    CHECK(identical(Tensor<float>(same.value()), Tensor<float>(logits.value())));
    CHECK(!model.h[1].attn.is_training());
}

}  // namespace test_tape_gpt
