// SPDX-License-Identifier: MIT
// Walking a module and its children for their random streams (random_streams.hpp).
#pragma once

namespace headwise::distributed::detail {

/// Visits each counter and generator of `m` and its children in random_state() order.
template <class M, class Visit>
void visit_random_streams(M& m, Visit& visit) {
    M::visit_random_state(m, visit);
    M::visit_children(m, [&](auto& child) { visit_random_streams(child, visit); });
}

}  // namespace headwise::distributed::detail
