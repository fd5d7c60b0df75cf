// SPDX-License-Identifier: MIT
// The three projections side by side on the same parameters: largest differences of the output
// and of every gradient against fused, and their parameter counts.
#include <headwise/headwise.hpp>

#include <cstdio>  // std::printf
#include <random>  // std::mt19937_64
#include <string>  // std::string

int main() {
    using headwise::Projection;
    using headwise::Shape;
    using headwise::Tensor;

    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = 32;
    opt.num_heads = 8;
    const Projection projections[] = {Projection::fused, Projection::separate,
                                      Projection::per_head};

    std::mt19937_64 rng(1);
    const Tensor<double> x = Tensor<double>::randn(Shape{3, 12, 32}, rng);   // [B, L, E]
    const Tensor<double> dy = Tensor<double>::randn(Shape{3, 12, 32}, rng);  // upstream gradient
    headwise::AttentionMasks<double> masks;
    masks.key_padding_mask = Tensor<bool>(Shape{3, 12});
    for (int j = 8; j < 12; ++j) masks.key_padding_mask(2, j) = true;  // last 4 keys of batch 2

    // One set of parameters: every module loads the fused one's state dict.
    headwise::MultiheadAttention<double> fused(opt, 42);
    const auto state = fused.state_dict();
    const auto f0 = fused.forward(x, x, x, masks);
    const auto g0 = fused.backward(f0, dy);
    const auto grads0 = fused.grad_dict();

    std::printf("E = %lld, H = %lld, D = %lld; input [3, 12, 32], double precision\n\n",
                static_cast<long long>(fused.embed_dim()),
                static_cast<long long>(fused.num_heads()),
                static_cast<long long>(fused.head_dim()));
    std::printf("%-10s %12s  %s\n", "projection", "parameters", "largest |difference| to fused");
    bool ok = true;
    for (Projection p : projections) {
        opt.projection = p;
        headwise::MultiheadAttention<double> m(opt, 7);  // other initial values ...
        m.load_state_dict(state);                        // ... replaced by the same parameters
        const auto f = m.forward(x, x, x, masks);
        const auto g = m.backward(f, dy);
        std::printf("%-10s %12lld  output %.2e", headwise::to_string(p),
                    static_cast<long long>(m.parameter_count()),
                    headwise::max_abs_diff(f.output, f0.output).max_abs);
        double worst = headwise::max_abs_diff(f.output, f0.output).max_abs;
        const std::pair<const char*, const Tensor<double>*> inputs[] = {
            {"d query", &g.query}, {"d key", &g.key}, {"d value", &g.value}};
        const Tensor<double>* inputs0[] = {&g0.query, &g0.key, &g0.value};
        for (int i = 0; i < 3; ++i) {
            const double d = headwise::max_abs_diff(*inputs[i].second, *inputs0[i]).max_abs;
            std::printf(", %s %.2e", inputs[i].first, d);
            worst = d > worst ? d : worst;
        }
        for (const auto& [name, grad] : m.grad_dict()) {
            const double d = headwise::max_abs_diff(grad, grads0.at(name)).max_abs;
            std::printf(", d %s %.2e", name.c_str(), d);
            worst = d > worst ? d : worst;
        }
        std::printf("\n");
        ok = ok && worst < 1e-12 && m.parameter_count() == fused.parameter_count();
    }
    std::printf("\n%s\n",
                ok ? "identical to 1e-12: same function, same gradients" : "MISMATCH beyond 1e-12");
    return ok ? 0 : 1;
}
