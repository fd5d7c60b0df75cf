// SPDX-License-Identifier: MIT
// InstanceId: a number naming one module object, so that backward can tell its own forward's
// record from another module's.
#pragma once

#include <atomic>   // std::atomic
#include <cstdint>  // std::uint64_t

namespace headwise::detail {

/// A process-wide unique number per object. A copy is another object and draws a new number (a
/// record of the original's forward is not the copy's); a move carries the number along, since
/// the moved-to object continues the moved-from one (as when a std::vector of layers grows).
class InstanceId {
public:
    InstanceId() noexcept : id_(next()) {}
    InstanceId(const InstanceId&) noexcept : id_(next()) {}
    InstanceId(InstanceId&& other) noexcept : id_(other.id_) {}
    InstanceId& operator=(const InstanceId& other) noexcept {
        if (this != &other) id_ = next();
        return *this;
    }
    InstanceId& operator=(InstanceId&& other) noexcept {
        id_ = other.id_;
        return *this;
    }
    ~InstanceId() = default;

    std::uint64_t value() const noexcept { return id_; }

private:
    static std::uint64_t next() noexcept {
        static std::atomic<std::uint64_t> counter{0};
        return ++counter;  // starts at 1: 0 names no object
    }
    std::uint64_t id_;
};

}  // namespace headwise::detail
