// SPDX-License-Identifier: MIT
// A small MLP (Linear, GELU, Linear) trained on a tape with AdamW: the one-file training program
// that CI compiles against headwise::compiled, whose compile time docs/building.md quotes.
#include <headwise/autograd/functions.hpp>  // apply, mse_loss
#include <headwise/autograd/tape.hpp>
#include <headwise/layers/gelu.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/optim/adam.hpp>

#include <cstdint>  // std::int64_t
#include <cstdio>   // std::printf
#include <random>   // std::mt19937_64
#include <vector>   // std::vector

int main() {
    using headwise::Index;
    using headwise::Shape;
    using headwise::Tensor;
    namespace ag = headwise::autograd;

    // A regression target the MLP can fit: y = sin-like mix of the inputs, 16 -> 32 -> 4.
    std::mt19937_64 rng(1);
    headwise::Linear<float> fc1(16, 32, /*bias=*/true, rng);
    headwise::GELU<float> gelu;
    headwise::Linear<float> fc2(32, 4, /*bias=*/true, rng);
    const Tensor<float> x = Tensor<float>::randn(Shape{64, 16}, rng);  // [N, 16]
    Tensor<float> target(Shape{64, 4});                                // [N, 4]
    for (Index n = 0; n < 64; ++n)
        for (Index j = 0; j < 4; ++j)
            target(n, j) = 0.5f * x(n, j) - 0.25f * x(n, j + 4) * x(n, j + 8);

    std::vector<headwise::Parameter<float>> params = fc1.parameters();
    for (headwise::Parameter<float>& p : fc2.parameters()) params.push_back(p);
    headwise::AdamOptions options;
    options.lr = 1e-2;
    headwise::AdamW<float> optimizer(params, options);

    double first = 0.0, last = 0.0;
    for (int step = 0; step < 50; ++step) {
        ag::Tape<float> tape;
        const ag::Var<float> h = ag::apply(gelu, ag::apply(fc1, tape.input(x)));  // [N, 32]
        const ag::Var<float> y = ag::apply(fc2, h);                               // [N, 4]
        const ag::Var<float> loss = ag::mse_loss(y, headwise::TensorView<const float>(target));
        optimizer.zero_grad();
        tape.backward(loss);
        optimizer.step();
        if (step == 0) first = loss.item();
        last = loss.item();
    }
    std::printf("mse: %.5f at step 0, %.5f at step 49\n", first, last);
    return last < 0.5 * first ? 0 : 1;
}
