// SPDX-License-Identifier: MIT
// Exact resume: the optimisers' state dicts, modules' random state, generator states and the
// checkpoint file that holds them all (with a learning-rate scheduler's); training continued from
// a checkpoint is bit-identical.
#include <headwise/io/checkpoint.hpp>
#include <headwise/io/safetensors.hpp>
#include <headwise/layers/linear.hpp>
#include <headwise/layers/module.hpp>
#include <headwise/layers/transformer_encoder_layer.hpp>
#include <headwise/optim/adam.hpp>
#include <headwise/optim/lr_scheduler.hpp>
#include <headwise/optim/schedules.hpp>
#include <headwise/optim/sgd.hpp>
#include <headwise/random.hpp>

#include <cstdint>      // std::uint64_t
#include <cstring>      // std::memcmp
#include <functional>   // std::function
#include <map>          // std::map
#include <stdexcept>    // std::invalid_argument, std::overflow_error, std::runtime_error
#include <string>       // std::string, std::to_string
#include <type_traits>  // std::is_same_v
#include <vector>       // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/instantiations.hpp"

namespace test_optim_state {

using namespace headwise;

namespace {

/// A small model with dropout everywhere an encoder layer has it (p = 0.2), so that resuming
/// needs the random streams as well as the weights.
template <class T>
struct Net : Module<Net<T>, T> {
    static constexpr const char* kName = "test::Net";

    static TransformerEncoderLayerOptions options() {
        TransformerEncoderLayerOptions o;
        o.d_model = 8;
        o.nhead = 2;
        o.dim_feedforward = 16;
        o.dropout = 0.2;
        return o;
    }

    Generator rng;
    TransformerEncoderLayer<T> layer;
    Linear<T> head;

    explicit Net(std::uint64_t seed) : rng(seed), layer(options(), seed), head(8, 3, true, rng) {}

    template <class Self, class Visit>
    static void visit_parameters(Self& self, Visit&& visit) {
        Net::visit_child(self.layer, "layer.", visit);
        Net::visit_child(self.head, "head.", visit);
    }
    template <class Self, class Visit>
    static void visit_children(Self& self, Visit&& visit) {
        visit(self.layer);
        visit(self.head);
    }

    /// Gradients of 0.5 |head(layer(x))|² for a batch x [2, 5, 8] drawn from `data`.
    void forward_backward(Generator& data) {
        const Tensor<T> x = Tensor<T>::randn(Shape{2, 5, 8}, data);  // [B, L, E]
        const TransformerEncoderLayerForward<T> f = layer.forward(x);
        const Tensor<T> y = head.forward(f.output);  // [B, L, 3]: dloss/dy = y
        layer.backward(f, head.backward(f.output, y));
    }
};

template <class T, class Opt>
void train(Net<T>& net, Opt& opt, Generator& data, int steps) {
    for (int s = 0; s < steps; ++s) {
        opt.zero_grad();
        net.forward_backward(data);
        opt.step();
    }
}

/// The first entry whose shape or bytes differ, or "" when the dicts are bit-identical.
template <class T>
std::string first_difference(const StateDict<T>& a, const StateDict<T>& b) {
    if (a.size() != b.size())
        return "sizes " + std::to_string(a.size()) + ", " + std::to_string(b.size());
    for (const auto& e : a) {
        const auto it = b.find(e.first);
        if (it == b.end()) return e.first + " missing";
        if (it->second.shape() != e.second.shape()) return e.first + " shape";
        if (std::memcmp(it->second.data(), e.second.data(),
                        sizeof(T) * static_cast<std::size_t>(e.second.numel())) != 0)
            return e.first + " bytes";
    }
    return "";
}

template <class T>
using MakeOpt = std::function<void(std::vector<Parameter<T>>)>;

/// Trains `before` steps, checkpoints to a file, trains `after` more; then a fresh model built
/// from another seed, with an optimiser that has stepped on other data, loads the checkpoint and
/// trains `after` steps: parameters and optimiser state must match the first run's bit for bit.
template <class T, class Opt, class Options>
void check_resume(const Options& options, int before, int after, const std::string& file) {
    Net<T> a(1);
    Opt opt_a(a.parameters(), options);
    Generator data_a(7);
    train(a, opt_a, data_a, before);

    io::Checkpoint<T> c;
    c.model = a.state_dict();
    c.optimiser = opt_a.state_dict();
    c.model_random = a.random_state();
    c.step = static_cast<std::uint64_t>(before);
    c.integers["data"] = generator_state(data_a);
    io::save_checkpoint(file, c);
    train(a, opt_a, data_a, after);

    Net<T> b(2);
    Opt opt_b(b.parameters(), options);
    Generator data_b(8);
    train(b, opt_b, data_b, 2);  // state to be overwritten: buffers, moments, steps, streams
    const io::Checkpoint<T> r = io::load_checkpoint<T>(file);
    REQUIRE(r.step == static_cast<std::uint64_t>(before));
    b.load_state_dict(r.model);
    opt_b.load_state_dict(r.optimiser);
    b.load_random_state(r.model_random);
    set_generator_state(data_b, r.integers.at("data"));
    train(b, opt_b, data_b, after);

    CHECK(first_difference(a.state_dict(), b.state_dict()) == "");
    CHECK(first_difference(opt_a.state_dict(), opt_b.state_dict()) == "");
    CHECK(a.random_state() == b.random_state());
}

}  // namespace

TEMPLATE_TEST_CASE("training resumed from a checkpoint file continues bit for bit",
                   "[optim][checkpoint]", float, double) {
    using T = TestType;
    const test::ScratchDir dir("optim-state");
    const std::string file = dir.file("checkpoint.safetensors");
    const int before = GENERATE(0, 3);
    CAPTURE(before);
    SECTION("SGD with momentum, dampening and weight decay") {
        SGDOptions o;
        o.lr = 0.05;
        o.momentum = 0.9;
        o.dampening = 0.1;
        o.weight_decay = 0.01;
        check_resume<T, SGD<T>>(o, before, 3, file);
    }
    SECTION("SGD Nesterov") {
        SGDOptions o;
        o.lr = 0.05;
        o.momentum = 0.9;
        o.nesterov = true;
        check_resume<T, SGD<T>>(o, before, 3, file);
    }
    SECTION("SGD without momentum") {
        SGDOptions o;
        o.lr = 0.05;
        check_resume<T, SGD<T>>(o, before, 3, file);
    }
    SECTION("Adam") {
        AdamOptions o;
        o.lr = 1e-2;
        o.weight_decay = 0.01;
        check_resume<T, Adam<T>>(o, before, 3, file);
    }
    SECTION("Adam with AMSGrad") {
        AdamOptions o;
        o.lr = 1e-2;
        o.amsgrad = true;
        check_resume<T, Adam<T>>(o, before, 3, file);
    }
    SECTION("AdamW") {
        AdamOptions o;
        o.lr = 1e-2;
        check_resume<T, AdamW<T>>(o, before, 3, file);
    }
    SECTION("AdamW with AMSGrad") {
        AdamOptions o;
        o.lr = 1e-2;
        o.amsgrad = true;
        check_resume<T, AdamW<T>>(o, before, 3, file);
    }
}

TEMPLATE_TEST_CASE("training with a schedule resumed from a checkpoint continues bit for bit",
                   "[optim][checkpoint][lr_scheduler]", float, double) {
    using T = TestType;
    const test::ScratchDir dir("optim-schedule");
    const std::string file = dir.file("checkpoint.safetensors");
    // Saved in the warm-up, at the switch, and in the cosine part.
    const int before = GENERATE(2, 4, 6);
    constexpr int kAfter = 5;
    CAPTURE(before);
    const auto schedule = [] {
        return SequentialLR({LinearLR(0.1, 1.0, 4), CosineAnnealingLR(8, 1e-4)}, {4});
    };
    AdamOptions o;
    o.lr = 1e-2;
    o.weight_decay = 0.01;
    const auto train_scheduled = [](Net<T>& net, AdamW<T>& opt, LRScheduler<AdamW<T>>& sched,
                                    Generator& data, int steps) {
        for (int s = 0; s < steps; ++s) {
            opt.zero_grad();
            net.forward_backward(data);
            opt.step();
            sched.step();
        }
    };

    Net<T> a(1);
    AdamW<T> opt_a(a.parameters(), o);
    LRScheduler<AdamW<T>> sched_a(opt_a, schedule());
    Generator data_a(7);
    train_scheduled(a, opt_a, sched_a, data_a, before);
    io::Checkpoint<T> c;
    c.model = a.state_dict();
    c.optimiser = opt_a.state_dict();
    c.scheduler = sched_a.state_dict();
    c.model_random = a.random_state();
    c.step = static_cast<std::uint64_t>(before);
    c.integers["data"] = generator_state(data_a);
    io::save_checkpoint(file, c);
    train_scheduled(a, opt_a, sched_a, data_a, kAfter);  // uninterrupted

    // A fresh run: another seed, a scheduler that has stepped elsewhere. The state holds T: a
    // float dict gives back the base rate exactly when the fresh optimiser starts from the same
    // rate (as a resumed program does); a double dict gives it back from any.
    Net<T> b(2);
    AdamOptions other = o;
    if (std::is_same_v<T, double>) other.lr = 0.5;
    AdamW<T> opt_b(b.parameters(), other);
    LRScheduler<AdamW<T>> sched_b(opt_b, schedule());
    Generator data_b(8);
    train_scheduled(b, opt_b, sched_b, data_b, 3);
    const io::Checkpoint<T> r = io::load_checkpoint<T>(file);
    REQUIRE(first_difference(r.scheduler, c.scheduler) == "");
    b.load_state_dict(r.model);
    opt_b.load_state_dict(r.optimiser);
    sched_b.load_state_dict(r.scheduler);
    b.load_random_state(r.model_random);
    set_generator_state(data_b, r.integers.at("data"));
    REQUIRE(sched_b.last_epoch() == before);
    train_scheduled(b, opt_b, sched_b, data_b, kAfter);

    CHECK(first_difference(a.state_dict(), b.state_dict()) == "");
    CHECK(first_difference(opt_a.state_dict(), opt_b.state_dict()) == "");
    CHECK(first_difference(sched_a.state_dict(), sched_b.state_dict()) == "");
    CHECK(sched_a.get_last_lr() == sched_b.get_last_lr());
    CHECK(sched_a.base_lr() == sched_b.base_lr());
    CHECK(a.random_state() == b.random_state());

    // A checkpoint without a scheduler (as every file saved before sched.* existed) loads with
    // an empty one.
    io::Checkpoint<T> plain = c;
    plain.scheduler.clear();
    io::save_checkpoint(file, plain);
    CHECK(io::load_checkpoint<T>(file).scheduler.empty());
    CHECK(first_difference(io::load_checkpoint<T>(file).optimiser, c.optimiser) == "");
}

TEST_CASE("a resumed run differs without the random state: dropout matters here",
          "[optim][checkpoint]") {
    // The check that the bit-identical test above can fail for want of the random streams.
    Net<float> a(1), b(1);
    AdamOptions o;
    Adam<float> opt_a(a.parameters(), o), opt_b(b.parameters(), o);
    Generator data_a(7), data_b(7);
    train(a, opt_a, data_a, 2);
    b.load_state_dict(a.state_dict());
    opt_b.load_state_dict(opt_a.state_dict());
    set_generator_state(data_b, generator_state(data_a));
    train(a, opt_a, data_a, 1);
    train(b, opt_b, data_b, 1);  // b's dropout streams are at the start, a's two steps on
    CHECK(first_difference(a.state_dict(), b.state_dict()) != "");
}

TEST_CASE("state dict names and layout follow torch's", "[optim][state_dict]") {
    Net<float> net(1);
    const std::vector<Parameter<float>> params = net.parameters();
    const std::string n = std::to_string(params.size());
    SECTION("Adam: every state entry from construction on; step rank 0") {
        AdamOptions o;
        o.amsgrad = true;
        Adam<float> opt(net.parameters(), o);
        const StateDict<float> sd = opt.state_dict();
        CHECK(sd.size() == 4 * params.size() + 6);
        CHECK(sd.at("state.0.step").shape() == Shape{});
        CHECK(sd.at("state.0.step").data()[0] == 0.0f);
        CHECK(sd.at("state.0.exp_avg").shape() == params[0].value.shape());
        CHECK(sd.at("state.0.max_exp_avg_sq").shape() == params[0].value.shape());
        CHECK(sd.at("param_groups.0.betas").shape() == Shape{2});
        CHECK(sd.at("param_groups.0.betas").data()[1] == 0.999f);
        CHECK(sd.at("param_groups.0.amsgrad").data()[0] == 1.0f);
        CHECK(sd.at("param_groups.0.params").shape() == Shape{static_cast<Index>(params.size())});
        Generator data(3);
        train(net, opt, data, 2);
        CHECK(
            opt.state_dict().at("state." + std::to_string(params.size() - 1) + ".step").data()[0] ==
            2.0f);
    }
    SECTION("SGD: momentum buffers from the first step on") {
        SGDOptions o;
        o.momentum = 0.5;
        SGD<float> opt(net.parameters(), o);
        CHECK(opt.state_dict().size() == 6);
        CHECK(opt.state_dict().count("state.0.momentum_buffer") == 0);
        Generator data(3);
        train(net, opt, data, 1);
        CHECK(opt.state_dict().size() == 6 + params.size());
        CHECK(opt.state_dict().at("state.0.momentum_buffer").shape() == params[0].value.shape());
        CHECK(opt.state_dict().at("param_groups.0.nesterov").data()[0] == 0.0f);
    }
}

TEST_CASE("optimiser load_state_dict is strict and changes nothing on an error",
          "[optim][state_dict][errors]") {
    Net<float> net(1);
    AdamOptions o;
    o.amsgrad = true;
    AdamW<float> opt(net.parameters(), o);
    Generator data(3);
    train(net, opt, data, 2);
    const StateDict<float> good = opt.state_dict();
    const std::string shape0 = net.parameters()[0].value.shape().str();
    StateDict<float> bad = good;
    SECTION("missing entry") {
        bad.erase("state.1.exp_avg_sq");
        CHECK_THROWS_MATCHES(
            opt.load_state_dict(bad), std::invalid_argument,
            Message("headwise::AdamW::load_state_dict: state.1.exp_avg_sq: missing from the "
                    "state dict, expected shape " +
                    net.parameters()[1].value.shape().str()));
    }
    SECTION("unexpected entry") {
        bad.emplace("state.0.momentum_buffer", Tensor<float>(Shape{3}));
        CHECK_THROWS_MATCHES(
            opt.load_state_dict(bad), std::invalid_argument,
            Message("headwise::AdamW::load_state_dict: state.0.momentum_buffer: unexpected key "
                    "in the state dict (shape [3]); expected state.<i>.{step, exp_avg, "
                    "exp_avg_sq, max_exp_avg_sq} for i < " +
                    std::to_string(net.parameters().size()) +
                    ", param_groups.0.{lr, betas, eps, weight_decay, amsgrad, params}"));
    }
    SECTION("mis-shaped entry") {
        bad["state.0.exp_avg"] = Tensor<float>(Shape{3});
        CHECK_THROWS_MATCHES(opt.load_state_dict(bad), shape_error,
                             Message("headwise::AdamW::load_state_dict: state.0.exp_avg: "
                                     "expected shape " +
                                     shape0 + ", got [3]"));
    }
    SECTION("a step that is no count") {
        bad["state.2.step"].data()[0] = 2.5f;
        CHECK_THROWS_MATCHES(opt.load_state_dict(bad), std::invalid_argument,
                             Message("headwise::AdamW::load_state_dict: state.2.step: must be an "
                                     "integer in [0, 16777216], got 2.5"));
    }
    SECTION("a hyper-parameter that differs") {
        bad["param_groups.0.betas"].data()[1] = 0.99f;
        CHECK_THROWS_MATCHES(opt.load_state_dict(bad), std::invalid_argument,
                             Message("headwise::AdamW::load_state_dict: param_groups.0.betas[1]: "
                                     "must equal this optimiser's option 0.999, got 0.99"));
    }
    SECTION("another number of parameters") {
        AdamW<float> fewer({net.parameters().front()}, o);
        CHECK_THROWS_MATCHES(fewer.load_state_dict(good), std::invalid_argument,
                             Message("headwise::AdamW::load_state_dict: param_groups.0.params: "
                                     "expected shape [1], got [" +
                                     std::to_string(net.parameters().size()) + "]"));
    }
    // Nothing changed: the optimiser's state is still `good`.
    CHECK(first_difference(opt.state_dict(), good) == "");
}

TEST_CASE("SGD load_state_dict: buffers for all parameters or none",
          "[optim][state_dict][errors]") {
    Net<double> net(1);
    SGDOptions o;
    o.momentum = 0.9;
    SGD<double> opt(net.parameters(), o);
    Generator data(3);
    train(net, opt, data, 1);
    StateDict<double> sd = opt.state_dict();
    sd.erase("state.3.momentum_buffer");
    CHECK_THROWS_MATCHES(opt.load_state_dict(sd), std::invalid_argument,
                         Message("headwise::SGD::load_state_dict: state.3.momentum_buffer: "
                                 "missing from the state dict, expected shape " +
                                 net.parameters()[3].value.shape().str()));
    SGD<double> plain(net.parameters(), SGDOptions{});
    CHECK_THROWS_MATCHES(plain.load_state_dict(opt.state_dict()), std::invalid_argument,
                         Message("headwise::SGD::load_state_dict: state.<i>.momentum_buffer: "
                                 "unexpected without momentum (this optimiser's momentum is 0)"));
    o.nesterov = true;
    SGD<double> nesterov(net.parameters(), o);
    CHECK_THROWS_MATCHES(nesterov.load_state_dict(opt.state_dict()), std::invalid_argument,
                         Message("headwise::SGD::load_state_dict: param_groups.0.nesterov: must "
                                 "equal this optimiser's option 1, got 0"));
}

TEST_CASE("load_state_dict restores the learning rate, exactly when it rounds the same",
          "[optim][state_dict]") {
    Net<float> net(1);
    AdamOptions o;
    o.lr = 1e-3;  // not a float: stored rounded
    Adam<float> source(net.parameters(), o), same(net.parameters(), o);
    same.load_state_dict(source.state_dict());
    CHECK(same.options().lr == 1e-3);  // its own double, not the float's
    source.set_lr(2.5e-4);
    same.load_state_dict(source.state_dict());
    CHECK(same.options().lr == static_cast<double>(2.5e-4f));  // a schedule's rate comes back
    StateDict<float> sd = source.state_dict();
    sd["param_groups.0.lr"].data()[0] = -1.0f;
    CHECK_THROWS_MATCHES(same.load_state_dict(sd), std::invalid_argument,
                         Message("headwise::Adam::load_state_dict: param_groups.0.lr: must be "
                                 "finite and non-negative, got -1"));
}

TEST_CASE("a float step count past 2^24 is refused, not rounded", "[optim][state_dict][errors]") {
    Net<float> net(1);
    Adam<float> opt(net.parameters(), AdamOptions{});
    StateDict<float> sd = opt.state_dict();
    for (auto& e : sd)
        if (e.first.size() > 5 && e.first.compare(e.first.size() - 5, 5, ".step") == 0)
            e.second.data()[0] = 16777216.0f;
    opt.load_state_dict(sd);
    CHECK(opt.state(0).step == 16777216);
    Generator data(3);
    train(net, opt, data, 1);
    CHECK_THROWS_MATCHES(opt.state_dict(), std::overflow_error,
                         Message("headwise::Adam::state_dict: state.0.step: 16777217 is past the "
                                 "largest step count float holds exactly, 16777216"));
}

TEST_CASE("module random state: round trip and strict load", "[module][random_state]") {
    Net<float> a(1);
    // The attention's Generator (Net's own draws only at construction) and the three Dropouts'
    // seeds and counters.
    const std::size_t generator_words = generator_state(Generator{}).size();
    const std::vector<std::uint64_t> fresh = a.random_state();
    CHECK(fresh.size() == generator_words + 6);
    Generator data(3);
    AdamW<float> opt(a.parameters(), AdamOptions{});
    train(a, opt, data, 2);
    const std::vector<std::uint64_t> trained = a.random_state();
    CHECK(trained != fresh);
    CHECK(trained.back() == 2);  // dropout2: one mask per training forward

    Net<float> b(5);
    b.load_random_state(trained);
    CHECK(b.random_state() == trained);

    std::vector<std::uint64_t> shorter(trained.begin(), trained.end() - 1);
    CHECK_THROWS_MATCHES(
        b.load_random_state(shorter), std::invalid_argument,
        Message("test::Net::load_random_state: words: expected " + std::to_string(trained.size()) +
                " words (this module's random streams), got " + std::to_string(shorter.size())));
    if (generator_words == 313) {  // libstdc++: the state's 312 words and the position
        std::vector<std::uint64_t> past = fresh;
        past[312] = 313;
        CHECK_THROWS_MATCHES(b.load_random_state(past), std::invalid_argument,
                             Message("test::Net::load_random_state: words[0, 313): position 313 "
                                     "past the state's 312 words"));
    }
    CHECK(b.random_state() == trained);  // unchanged by the failed loads
}

TEST_CASE("generator state round trip", "[random]") {
    Generator g(11);
    for (int i = 0; i < 5; ++i) g();
    const std::vector<std::uint64_t> s = generator_state(g);
    Generator h(12);
    set_generator_state(h, s);
    for (int i = 0; i < 1000; ++i) REQUIRE(g() == h());
    CHECK_THROWS_MATCHES(
        set_generator_state(h, {1, 2, 3}), std::invalid_argument,
        Message("headwise::set_generator_state: words: expected " + std::to_string(s.size()) +
                " words (the generator's state), got 3"));
}

TEST_CASE("checkpoint files: integers exact, strict reading", "[checkpoint][errors]") {
    const test::ScratchDir dir("checkpoint");
    const std::string file = dir.file("c.safetensors");
    io::Checkpoint<float> c;
    c.model.emplace("w", Tensor<float>(Shape{2}, {1.5f, -2.0f}));
    c.optimiser.emplace("param_groups.0.lr", Tensor<float>(Shape{}, {0.125f}));
    c.step = 0xFFFFFFFFFFFFFFFFull;
    c.model_random = {0, 1, 0x123456789ABCDEF0ull};
    c.integers["seeds"] = {42, 1ull << 63};
    c.integers["empty"] = {};
    io::save_checkpoint(file, c);
    const io::Checkpoint<float> r = io::load_checkpoint<float>(file);
    CHECK(r.step == c.step);
    CHECK(r.model_random == c.model_random);
    CHECK(r.integers == c.integers);
    CHECK(first_difference(r.model, c.model) == "");
    CHECK(first_difference(r.optimiser, c.optimiser) == "");
    // Read as double as well (the file is F32).
    CHECK(io::load_checkpoint<double>(file).model_random == c.model_random);

    std::map<std::string, Tensor<float>> raw = io::load_safetensors<float>(file);
    SECTION("an entry outside the layout") {
        raw.emplace("weights", Tensor<float>(Shape{1}));
        io::save_safetensors(file, raw);
        CHECK_THROWS_MATCHES(io::load_checkpoint<float>(file), std::runtime_error,
                             Message("headwise::io::load_checkpoint: " + file +
                                     ": entry 'weights': not part of a checkpoint (expected "
                                     "model.*, optim.*, sched.*, step, random.model or "
                                     "int.*)"));
    }
    SECTION("a piece that is no 16-bit number") {
        raw["int.seeds"].data()[5] = 65536.0f;
        io::save_safetensors(file, raw);
        CHECK_THROWS_MATCHES(io::load_checkpoint<float>(file), std::runtime_error,
                             Message("headwise::io::load_checkpoint: " + file +
                                     ": entry 'int.seeds': element (1, 1) is not a 16-bit piece "
                                     "(a whole number in [0, 65535])"));
    }
    SECTION("integers of the wrong shape") {
        raw["random.model"] = Tensor<float>(Shape{3, 2});
        io::save_safetensors(file, raw);
        CHECK_THROWS_MATCHES(io::load_checkpoint<float>(file), std::runtime_error,
                             Message("headwise::io::load_checkpoint: " + file +
                                     ": entry 'random.model': expected shape [n, 4] (16-bit "
                                     "pieces), got [3, 2]"));
    }
    SECTION("no step") {
        raw.erase("step");
        io::save_safetensors(file, raw);
        CHECK_THROWS_MATCHES(io::load_checkpoint<float>(file), std::runtime_error,
                             Message("headwise::io::load_checkpoint: " + file +
                                     ": entry 'step': missing (not a checkpoint?)"));
    }
}

}  // namespace test_optim_state
