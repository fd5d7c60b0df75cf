// SPDX-License-Identifier: MIT
// MultiheadAttention dropout and returned weights against independent references: the mask
// regenerated from the seed and applied in plain loops, gradients by central differences of
// those loops, and eval-mode weights against training-mode weights without dropout.
#include <headwise/headwise.hpp>

#include <algorithm>  // std::max
#include <cmath>      // std::abs, std::sqrt
#include <map>        // std::map
#include <string>     // std::string
#include <vector>     // std::vector

#include "support/catch.hpp"
#include "support/instantiations.hpp"
#include "support/match.hpp"
#include "support/mha_case.hpp"
#include "support/mha_random.hpp"
#include "support/projections.hpp"
#include "support/tolerance.hpp"

namespace test_mha_dropout_reference {

using namespace headwise;
using headwise::test::Inputs;
using headwise::test::MaskKind;
using headwise::test::MhaConfig;
using headwise::test::Tol;
using headwise::test::with;

namespace {

using headwise::test::kProjections;

std::vector<MhaConfig> dropout_grid() {
    using C = MhaConfig&;
    return {
        with([](C c) { c.dropout = 0.3, c.L = 4; }),
        with([](C c) { c.dropout = 0.5, c.average = false, c.bias_kv = true; }),
        with([](C c) {
            c.dropout = 0.3, c.inputs = Inputs::distinct, c.S = 4, c.kdim = 5, c.vdim = 3;
            c.masks = MaskKind::all;
        }),
        with([](C c) {
            c.dropout = 0.2, c.inputs = Inputs::kv_same, c.S = 5, c.zero_attn = true;
            c.masks = MaskKind::key_padding, c.H = 4, c.average = false;
        }),
        with([](C c) { c.dropout = 0.4, c.batched = false, c.L = 4, c.masks = MaskKind::causal; }),
    };
}

template <class T>
Tensor<T> cast(const Tensor<double>& t) {
    Tensor<T> out(t.shape());
    for (Index i = 0; i < t.numel(); ++i) out.data()[i] = static_cast<T>(t.data()[i]);
    return out;
}

template <class T>
test::MhaData<T> cast(const test::MhaData<double>& d) {
    test::MhaData<T> out;
    out.q = cast<T>(d.q);
    if (!d.k.empty()) out.k = cast<T>(d.k);
    if (!d.v.empty()) out.v = cast<T>(d.v);
    out.masks.attn_mask = d.masks.attn_mask;
    if (!d.masks.attn_bias.empty()) out.masks.attn_bias = cast<T>(d.masks.attn_bias);
    out.masks.key_padding_mask = d.masks.key_padding_mask;
    out.masks.is_causal = d.masks.is_causal;
    out.masks.need_weights = d.masks.need_weights;
    out.masks.average_attn_weights = d.masks.average_attn_weights;
    return out;
}

/// Gradients of sum(reference output ⊙ dy) by central differences of the plain loops, with the
/// dropout factors held fixed: for query, key and value as separate arguments (what backward
/// returns per argument, also when one tensor is passed several times) and every parameter.
struct ReferenceGradients {
    Tensor<double> query, key, value;
    std::map<std::string, Tensor<double>> params;
};

ReferenceGradients reference_gradients(const MhaConfig& c, MultiheadAttention<double>& m,
                                       test::MhaData<double> d, const std::vector<double>& dropout,
                                       const Tensor<double>& dy) {
    d.k = Tensor<double>(d.key());  // separate arguments, perturbed one at a time
    d.v = Tensor<double>(d.value());
    const auto loss = [&]() {
        const test::ReferenceAttention r = test::run_reference(c, m, d, &dropout);
        double l = 0.0;
        for (std::size_t i = 0; i < r.output.size(); ++i) l += r.output[i] * dy.data()[i];
        return l;
    };
    constexpr double h = 1e-6;
    const auto differentiate = [&](double* x, Index n, const auto& after_change) {
        Tensor<double> g(Shape{n});
        for (Index i = 0; i < n; ++i) {
            const double x0 = x[i];
            x[i] = x0 + h;
            after_change();
            const double plus = loss();
            x[i] = x0 - h;
            after_change();
            const double minus = loss();
            x[i] = x0;
            after_change();
            g.data()[i] = (plus - minus) / (2 * h);
        }
        return g;
    };
    const auto nothing = [] {};
    ReferenceGradients r;
    r.query = std::move(differentiate(d.q.data(), d.q.numel(), nothing)).reshape(d.q.shape());
    r.key = std::move(differentiate(d.k.data(), d.k.numel(), nothing)).reshape(d.k.shape());
    r.value = std::move(differentiate(d.v.data(), d.v.numel(), nothing)).reshape(d.v.shape());
    auto sd = m.state_dict();
    for (auto& [name, t] : sd) {
        const auto reload = [&] { m.load_state_dict(sd); };
        r.params[name] = std::move(differentiate(t.data(), t.numel(), reload)).reshape(t.shape());
    }
    return r;
}

}  // namespace

TEMPLATE_TEST_CASE(
    "dropout: weights, output and gradients match a reference with the mask "
    "regenerated from the seed",
    "[mha][dropout]", float, double) {
    using T = TestType;
    // Central differences of the double loops err by about 1e-9 relative; the rest is T's.
    const double tol = std::max(Tol<T>::rel, 1e-8);
    for (const MhaConfig& c : dropout_grid()) {
        for (const bool average : {true, false}) {
            MhaConfig cfg = c;
            cfg.average = average;
            CAPTURE(cfg.str());
            const test::MhaData<double> d64 = test::make_data<double>(cfg);
            const test::MhaData<T> d = cast<T>(d64);
            for (Projection p : kProjections) {
                CAPTURE(to_string(p));
                MultiheadAttention<double> m64(cfg.options(p), 8);
                test::randomize_parameters(m64, 9);
                MultiheadAttention<T> m(cfg.options(p), 8);
                std::map<std::string, Tensor<T>> sd;
                for (const auto& [name, t] : m64.state_dict()) sd.emplace(name, cast<T>(t));
                m.load_state_dict(sd);

                const AttentionForward<T> f = m.forward(d.q, d.key(), d.value(), d.masks);
                // The mask of the configuration's p (dropout_factors_of), in the forward's stream.
                const std::vector<double> dropout = test::dropout_factors_of(f, cfg);
                // It drops about a fraction p: within 4 standard deviations of the binomial.
                const auto n = static_cast<double>(dropout.size());
                double dropped = 0.0;
                for (double x : dropout) dropped += x == 0.0;
                CAPTURE(dropped, n);
                CHECK(dropped > 0.0);
                CHECK(std::abs(dropped / n - cfg.dropout) <=
                      4.0 * std::sqrt(cfg.dropout * (1.0 - cfg.dropout) / n));
                const test::ReferenceAttention r = test::run_reference(cfg, m64, d64, &dropout);
                HEADWISE_CHECK_CLOSE(f.output, Tensor<double>(f.output.shape(), r.output),
                                     Tol<T>::rel);
                // And the dropout shows: the output is far from the reference without it.
                const test::ReferenceAttention r0 = test::run_reference(cfg, m64, d64);
                CHECK(test::scaled_difference(f.output, Tensor<double>(f.output.shape(), r0.output))
                          .rel > 1e-2);
                HEADWISE_CHECK_CLOSE(f.attn_weights, test::reference_weights(cfg, r), Tol<T>::rel);

                std::mt19937_64 rng(10);
                const Tensor<double> dy64 = Tensor<double>::randn(f.output.shape(), rng);
                const AttentionGradients<T> g = m.backward(f, cast<T>(dy64));
                const ReferenceGradients ref = reference_gradients(cfg, m64, d64, dropout, dy64);
                HEADWISE_CHECK_CLOSE(g.query, ref.query, tol);
                HEADWISE_CHECK_CLOSE(g.key, ref.key, tol);
                HEADWISE_CHECK_CLOSE(g.value, ref.value, tol);
                for (const auto& [name, grad] : m.grad_dict()) {
                    CAPTURE(name);
                    HEADWISE_CHECK_CLOSE(grad, ref.params.at(name), tol);
                }
            }
        }
    }
}

TEMPLATE_TEST_CASE("eval-mode weights equal training-mode weights without dropout",
                   "[mha][dropout]", float, double) {
    // In eval mode the weights come from buffers that training mode does not use; each call
    // must return its own, not another call's or another thread's.
    using T = TestType;
    for (MhaConfig c : dropout_grid()) {
        for (const bool average : {true, false}) {
            c.average = average;
            CAPTURE(c.str());
            const test::MhaData<T> d1 = test::make_data<T>(c, 1), d2 = test::make_data<T>(c, 2);
            for (Projection p : kProjections) {
                CAPTURE(to_string(p));
                MhaConfig plain = c;
                plain.dropout = 0.0;
                MultiheadAttention<T> trained(plain.options(p), 3), evaluated(c.options(p), 3);
                test::randomize_parameters(trained, 4);
                test::randomize_parameters(evaluated, 4);
                evaluated.eval();
                for (const test::MhaData<T>* d : {&d1, &d2, &d1}) {
                    const auto ft = trained.forward(d->q, d->key(), d->value(), d->masks);
                    const auto fe = evaluated.forward(d->q, d->key(), d->value(), d->masks);
                    REQUIRE(fe.attn_weights.shape() == ft.attn_weights.shape());
                    HEADWISE_CHECK_CLOSE(fe.attn_weights, ft.attn_weights, Tol<T>::rel);
                    HEADWISE_CHECK_CLOSE(fe.output, ft.output, Tol<T>::rel);
                }
                // The same module at dropout 0, switched between modes.
                trained.eval();
                const auto fe = trained.forward(d2.q, d2.key(), d2.value(), d2.masks);
                trained.train();
                const auto ft = trained.forward(d2.q, d2.key(), d2.value(), d2.masks);
                HEADWISE_CHECK_CLOSE(fe.attn_weights, ft.attn_weights, Tol<T>::rel);
            }
        }
    }
}

}  // namespace test_mha_dropout_reference
