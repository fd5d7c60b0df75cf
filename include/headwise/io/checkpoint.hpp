// SPDX-License-Identifier: MIT
// Checkpoint<T>: model, optimiser, scheduler, step and random state of a training run in one
// safetensors file.
#pragma once

#include <cstdint>    // std::uint64_t
#include <map>        // std::map
#include <stdexcept>  // std::invalid_argument, std::runtime_error
#include <string>     // std::string, std::to_string, std::char_traits
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../config.hpp"
#include "../layers/module.hpp"
#include "../shape.hpp"
#include "../tensor.hpp"
#include "detail/checkpoint_entries.hpp"
#include "safetensors.hpp"

namespace headwise::io {

/// What a training run needs to continue exactly where it stopped: saved, loaded again and put
/// back into the same model, optimiser and generators, the following steps give the parameters
/// bit for bit that the uninterrupted run gives.
///
///   io::Checkpoint<float> c;
///   c.model = model.state_dict();
///   c.optimiser = opt.state_dict();
///   c.scheduler = sched.state_dict();                   // an LRScheduler, if the run has one
///   c.model_random = model.random_state();              // dropout streams
///   c.step = step;
///   c.integers["data_rng"] = generator_state(data_rng);  // anything else the run draws from
///   io::save_checkpoint("run.safetensors", c);
///
///   const auto r = io::load_checkpoint<float>("run.safetensors");
///   model.load_state_dict(r.model);            // first: the optimiser holds views of it
///   opt.load_state_dict(r.optimiser);
///   sched.load_state_dict(r.scheduler);        // made on opt with the same schedule
///   model.load_random_state(r.model_random);
///   set_generator_state(data_rng, r.integers.at("data_rng"));
///   step = r.step;
template <class T>
struct Checkpoint {
    StateDict<T> model;                       // "model.<name>" in the file
    StateDict<T> optimiser;                   // "optim.<name>"
    StateDict<T> scheduler;                   // "sched.<name>": LRScheduler::state_dict()
    std::uint64_t step = 0;                   // "step"
    std::vector<std::uint64_t> model_random;  // "random.model": Module::random_state()
    std::map<std::string, std::vector<std::uint64_t>> integers;  // "int.<name>": seeds, states
};

/// Writes `c` as one safetensors file (F32 for float, F64 for double; the write is
/// save_safetensors'). Tensors go under "model.", "optim." and "sched."; each integer sequence (the
/// step, the random state, `integers`) as an [n, 4] tensor of its numbers' 16-bit pieces, least
/// significant first, exact in either scalar type. The header's __metadata__ says so, with the
/// step in decimal, for readers of the file. Throws std::invalid_argument for an empty name in
/// `integers`, and what save_safetensors throws.
template <class T>
void save_checkpoint(const std::string& path, const Checkpoint<T>& c);

/// Reads a file save_checkpoint wrote; a file without "sched." entries (a run without a
/// scheduler, or one saved before checkpoints held the scheduler) gives an empty `scheduler`.
/// Strict: an entry outside the layout above, a missing
/// "step" or "random.model", an integer tensor that is not [n, 4] of whole numbers in
/// [0, 65535] throws std::runtime_error naming the function, the file and the entry; a malformed
/// file throws what load_safetensors throws.
template <class T>
Checkpoint<T> load_checkpoint(const std::string& path);

// ---- definitions -----------------------------------------------------------------------------

template <class T>
void save_checkpoint(const std::string& path, const Checkpoint<T>& c) {
    namespace ck = detail::checkpoint;
    std::map<std::string, Tensor<T>> tensors;
    for (const auto& e : c.model) tensors.emplace(ck::kModel + e.first, e.second);
    for (const auto& e : c.optimiser) tensors.emplace(ck::kOptimiser + e.first, e.second);
    for (const auto& e : c.scheduler) tensors.emplace(ck::kScheduler + e.first, e.second);
    tensors.emplace(ck::kStep, ck::pieces<T>({c.step}));
    tensors.emplace(ck::kModelRandom, ck::pieces<T>(c.model_random));
    for (const auto& e : c.integers) {
        if (e.first.empty())
            throw std::invalid_argument(
                "headwise::io::save_checkpoint: integers: names must not be empty");
        tensors.emplace(ck::kIntegers + e.first, ck::pieces<T>(e.second));
    }
    const std::map<std::string, std::string> metadata{
        {"format", "headwise checkpoint"},
        {"step", std::to_string(c.step)},
        {"layout",
         "model.*: the model's state dict; optim.*: the optimiser's; sched.*: the learning-rate "
         "scheduler's; step, random.model, int.*: "
         "unsigned 64-bit integers as [n, 4] tensors of 16-bit pieces, least significant first"}};
    save_safetensors(path, tensors, metadata);
}

template <class T>
Checkpoint<T> load_checkpoint(const std::string& path) {
    namespace ck = detail::checkpoint;
    const std::string fn = "headwise::io::load_checkpoint";
    std::map<std::string, Tensor<T>> tensors = load_safetensors<T>(path);
    Checkpoint<T> c;
    bool has_step = false, has_random = false;
    for (auto& e : tensors) {
        const std::string& name = e.first;
        if (ck::starts_with(name, ck::kModel)) {
            c.model.emplace(name.substr(std::char_traits<char>::length(ck::kModel)),
                            std::move(e.second));
        } else if (ck::starts_with(name, ck::kOptimiser)) {
            c.optimiser.emplace(name.substr(std::char_traits<char>::length(ck::kOptimiser)),
                                std::move(e.second));
        } else if (ck::starts_with(name, ck::kScheduler)) {
            c.scheduler.emplace(name.substr(std::char_traits<char>::length(ck::kScheduler)),
                                std::move(e.second));
        } else if (name == ck::kStep) {
            const std::vector<std::uint64_t> w = ck::words(e.second, path, name);
            if (w.size() != 1)
                throw std::runtime_error(fn + ": " + path +
                                         ": entry 'step': expected shape [1, 4], got " +
                                         e.second.shape().str());
            c.step = w[0];
            has_step = true;
        } else if (name == ck::kModelRandom) {
            c.model_random = ck::words(e.second, path, name);
            has_random = true;
        } else if (ck::starts_with(name, ck::kIntegers) &&
                   name.size() > std::char_traits<char>::length(ck::kIntegers)) {
            c.integers.emplace(name.substr(std::char_traits<char>::length(ck::kIntegers)),
                               ck::words(e.second, path, name));
        } else {
            throw std::runtime_error(fn + ": " + path + ": entry '" + ck::shown(name) +
                                     "': not part of a checkpoint (expected model.*, optim.*, "
                                     "sched.*, step, random.model or int.*)");
        }
    }
    if (!has_step || !has_random)
        throw std::runtime_error(fn + ": " + path + ": entry '" +
                                 std::string(has_step ? ck::kModelRandom : ck::kStep) +
                                 "': missing (not a checkpoint?)");
    return c;
}

}  // namespace headwise::io
