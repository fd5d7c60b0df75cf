// SPDX-License-Identifier: MIT
// Quick start: one self-attention layer, forward, backward, and one SGD step that lowers the loss.
#include <headwise/headwise.hpp>

#include <cstdio>  // std::printf
#include <random>  // std::mt19937_64

int main() {
    using headwise::Index;
    using headwise::Shape;
    using headwise::Tensor;

    // A layer with E = 64 features and H = 4 heads, in training mode (the default).
    headwise::MultiheadAttentionOptions opt;
    opt.embed_dim = 64;
    opt.num_heads = 4;
    opt.projection = headwise::Projection::fused;
    headwise::MultiheadAttention<float> mha(opt, /*seed=*/42);

    // A batch of B = 2 sequences of L = 10 tokens, and a target for a squared-error loss.
    std::mt19937_64 rng(7);
    const Tensor<float> x = Tensor<float>::randn(Shape{2, 10, 64}, rng);       // [B, L, E]
    const Tensor<float> target = Tensor<float>::randn(Shape{2, 10, 64}, rng);  // [B, L, E]

    headwise::AttentionMasks<float> masks;
    masks.is_causal = true;  // token i attends to tokens 0..i

    auto loss_and_grad = [&](headwise::MultiheadAttention<float>& m, Tensor<float>* grad) {
        auto fwd = m.forward(x, x, x, masks);
        // loss = 1/2 mean (y - t)^2, dloss/dy = (y - t) / n
        double loss = 0.0;
        Tensor<float> dy(fwd.output.shape());
        const auto n = static_cast<float>(dy.numel());
        for (Index i = 0; i < dy.numel(); ++i) {
            const float r = fwd.output.data()[i] - target.data()[i];
            loss += 0.5 * static_cast<double>(r) * static_cast<double>(r) / static_cast<double>(n);
            dy.data()[i] = r / n;
        }
        if (grad) *grad = m.backward(fwd, dy).query;  // parameter gradients accumulate in m
        return loss;
    };

    mha.zero_grad();
    const double before = loss_and_grad(mha, nullptr);
    Tensor<float> dx;
    loss_and_grad(mha, &dx);

    // One step of plain SGD on every parameter, through the module's views.
    const float lr = 0.5f;
    for (headwise::Parameter<float>& p : mha.parameters())
        for (Index i = 0; i < p.value.numel(); ++i) p.value[i] -= lr * p.grad[i];
    const double after = loss_and_grad(mha, nullptr);

    std::printf("parameters: %lld\n", static_cast<long long>(mha.parameter_count()));
    std::printf("dL/dquery shape: %s\n", dx.shape().str().c_str());
    std::printf("loss before the step: %.6f\nloss after the step:  %.6f\n", before, after);
    return after < before ? 0 : 1;
}
