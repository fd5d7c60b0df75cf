// SPDX-License-Identifier: MIT
// Walking a module and its children for their random streams (random_streams.hpp).
#pragma once

#include <cstdint>  // std::uint64_t

#include "../../layers/module.hpp"
#include "../../random.hpp"

namespace headwise::distributed::detail {

/// Visits each counter and generator of `m` and its children in random_state() order: the
/// module contract's walk over their declarations (layers/module.hpp).
template <class M, class Visit>
void visit_random_streams(M& m, Visit& visit) {
    struct Streams : headwise::detail::NoWalk<typename M::value_type> {
        Visit& visit;
        explicit Streams(Visit& v) : visit(v) {}
        void random(std::uint64_t& counter) { visit(counter); }
        void random(Generator& generator) { visit(generator); }
    } walk(visit);
    m.walk_module(walk, "", false);
}

}  // namespace headwise::distributed::detail
