// SPDX-License-Identifier: MIT
// Tests of headwise/tensor.hpp: ownership, layout, views, Eigen maps, printing and factories.
#include <headwise/tensor.hpp>
#include <headwise/tensor_ops/factories.hpp>

#include <cmath>        // std::sqrt, std::abs
#include <cstddef>      // std::size_t
#include <cstdint>      // std::uintptr_t
#include <random>       // std::mt19937_64
#include <sstream>      // std::ostringstream
#include <stdexcept>    // std::out_of_range, std::length_error
#include <string>       // std::string
#include <tuple>        // std::tuple
#include <type_traits>  // std::is_same_v
#include <utility>      // std::move, std::pair
#include <vector>       // std::vector

#if !defined(NDEBUG) && defined(__unix__)
#include <sys/resource.h>  // setrlimit
#include <sys/types.h>     // pid_t
#include <sys/wait.h>      // waitpid
#include <unistd.h>        // fork, pipe, dup2, read, _exit

#include <csignal>  // std::signal, SIGABRT, SIG_DFL
#endif

#include "support/catch.hpp"

namespace test_tensor {

using headwise::Index;
using headwise::Shape;
using headwise::Tensor;
using headwise::TensorView;

namespace {

bool is_aligned(const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % headwise::kTensorAlignment == 0;
}

template <class T>
std::vector<T> iota_values(Index n) {
    std::vector<T> v(static_cast<std::size_t>(n));
    for (Index i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<T>(i);
    return v;
}

}  // namespace

TEMPLATE_TEST_CASE("a new tensor is zero-filled, contiguous and 64-byte aligned", "[tensor]", float,
                   double) {
    const Index n = GENERATE(1, 3, 17, 1000);
    CAPTURE(n);
    Tensor<TestType> t(Shape{n, 3});
    CHECK(t.shape() == Shape{n, 3});
    CHECK(t.rank() == 2);
    CHECK(t.numel() == 3 * n);
    CHECK_FALSE(t.empty());
    REQUIRE(t.data() != nullptr);
    CHECK(is_aligned(t.data()));
    for (Index i = 0; i < t.numel(); ++i) REQUIRE(t.data()[i] == TestType(0));
    CHECK(t.end() - t.begin() == t.numel());
}

TEST_CASE("a default tensor is empty, of rank 1 and extent 0", "[tensor]") {
    const Tensor<float> t;
    CHECK(t.shape() == Shape{0});
    CHECK(t.numel() == 0);
    CHECK(t.empty());
    CHECK(t.begin() == t.end());
}

TEMPLATE_TEST_CASE("values fill a tensor row-major", "[tensor]", float, double) {
    const Tensor<TestType> t(Shape{2, 3, 4}, iota_values<TestType>(24));
    for (Index i = 0; i < 2; ++i)
        for (Index j = 0; j < 3; ++j)
            for (Index k = 0; k < 4; ++k) {
                CAPTURE(i, j, k);
                REQUIRE(t(i, j, k) == static_cast<TestType>((i * 3 + j) * 4 + k));
            }
    CHECK(t.size(0) == 2);
    CHECK(t.size(-1) == 4);
    CHECK(t.size(-2) == 3);

    Tensor<TestType> u(Shape{2, 2});
    u(1, 0) = TestType(7);
    CHECK(u.data()[2] == TestType(7));
}

TEST_CASE("a value count that does not match the shape throws", "[tensor]") {
    REQUIRE_THROWS_AS(Tensor<float>(Shape{2, 2}, {1, 2, 3}), headwise::shape_error);
    REQUIRE_THROWS_WITH(Tensor<float>(Shape{2, 2}, {1, 2, 3}),
                        "headwise::Tensor::Tensor: values: expected shape 4 values for shape "
                        "[2, 2], got [3]");
    REQUIRE_THROWS_WITH(Tensor<double>(Shape{1}, std::vector<double>(5)),
                        "headwise::Tensor::Tensor: values: expected shape 1 values for shape [1], "
                        "got [5]");
}

TEMPLATE_TEST_CASE("copies are deep, moves transfer the buffer", "[tensor]", float, double) {
    Tensor<TestType> a(Shape{2, 3}, iota_values<TestType>(6));

    Tensor<TestType> copy(a);
    CHECK(copy.shape() == a.shape());
    CHECK(copy.data() != a.data());
    CHECK(is_aligned(copy.data()));
    copy(0, 0) = TestType(42);
    CHECK(a(0, 0) == TestType(0));  // the original is untouched
    CHECK(copy(1, 2) == TestType(5));

    Tensor<TestType> assigned(Shape{7});
    assigned = a;
    CHECK(assigned.shape() == Shape{2, 3});
    CHECK(assigned.data() != a.data());
    CHECK(assigned(1, 1) == TestType(4));

    const TestType* buffer = a.data();
    Tensor<TestType> moved(std::move(a));
    CHECK(moved.data() == buffer);
    CHECK(moved.shape() == Shape{2, 3});
    CHECK(a.numel() == 0);  // NOLINT(bugprone-use-after-move): moved-from is documented empty
    CHECK(a.shape() == Shape{0});

    Tensor<TestType> target(Shape{1});
    target = std::move(moved);
    CHECK(target.data() == buffer);
    CHECK(target(1, 2) == TestType(5));

    // Self-assignment keeps the contents.
    Tensor<TestType>& alias = target;
    target = alias;
    CHECK(target(1, 2) == TestType(5));
}

TEMPLATE_TEST_CASE("reshape shares the data, and a wrong element count throws", "[tensor]", float,
                   double) {
    Tensor<TestType> t(Shape{2, 3, 4}, iota_values<TestType>(24));
    const TensorView<TestType> r = t.reshape({6, 4});
    CHECK(r.data() == t.data());
    CHECK(r.shape() == Shape{6, 4});
    r(5, 3) = TestType(-1);
    CHECK(t(1, 2, 3) == TestType(-1));  // a view: writes go through

    const Tensor<TestType>& ct = t;
    const TensorView<const TestType> cr = ct.reshape({24});
    CHECK(cr.data() == t.data());

    // On an rvalue the buffer moves into the result: still no copy.
    const TestType* buffer = t.data();
    const Tensor<TestType> moved = std::move(t).reshape({4, 6});
    CHECK(moved.data() == buffer);
    CHECK(moved.shape() == Shape{4, 6});

    REQUIRE_THROWS_AS(moved.reshape({5, 5}), headwise::shape_error);
    REQUIRE_THROWS_WITH(moved.reshape({5, 5}),
                        "headwise::TensorView::reshape: shape: expected shape with 24 elements, "
                        "got [5, 5]");
    Tensor<TestType> other(Shape{2, 3});
    REQUIRE_THROWS_WITH(std::move(other).reshape({7}),
                        "headwise::TensorView::reshape: shape: expected shape with 6 elements, "
                        "got [7]");
}

TEMPLATE_TEST_CASE("views wrap user memory without copying", "[tensor]", float, double) {
    std::vector<TestType> buffer = iota_values<TestType>(12);
    const TensorView<TestType> v = headwise::view(buffer.data(), Shape{3, 4});
    CHECK(v.data() == buffer.data());
    CHECK(v.shape() == Shape{3, 4});
    CHECK(v(2, 1) == TestType(9));
    v(0, 3) = TestType(100);
    CHECK(buffer[3] == TestType(100));
    CHECK(v[3] == TestType(100));

    // Mutable views convert to read-only ones; tensors convert to views of themselves.
    const TensorView<const TestType> cv = v;
    CHECK(cv.data() == buffer.data());
    const Tensor<TestType> t(Shape{2});
    const TensorView<const TestType> tv = t;
    CHECK(tv.data() == t.data());

    // Tensor(view) is a deep copy.
    const Tensor<TestType> owned(cv);
    CHECK(owned.data() != buffer.data());
    CHECK(owned(2, 3) == TestType(11));
    CHECK(is_aligned(owned.data()));
}

TEMPLATE_TEST_CASE("slice and narrow select along the leading axis", "[tensor]", float, double) {
    Tensor<TestType> t(Shape{4, 2, 3}, iota_values<TestType>(24));

    const TensorView<TestType> s = t.slice(2);
    CHECK(s.shape() == Shape{2, 3});
    CHECK(s.data() == t.data() + 12);
    CHECK(s(1, 2) == TestType(17));
    s(0, 0) = TestType(-5);
    CHECK(t(2, 0, 0) == TestType(-5));

    const TensorView<TestType> n = t.narrow(1, 2);
    CHECK(n.shape() == Shape{2, 2, 3});
    CHECK(n.data() == t.data() + 6);
    CHECK(n(1, 1, 1) == t(2, 1, 1));
    CHECK(t.narrow(4, 0).numel() == 0);  // an empty range at the end is valid
    CHECK(t.narrow(0, 4).data() == t.data());

    // Slices of slices, and slices of a const tensor.
    const Tensor<TestType>& ct = t;
    CHECK(ct.slice(3).slice(1)(2) == TestType(23));
    CHECK(headwise::view(t.data(), Shape{24}).slice(7)[0] == TestType(7));  // rank 0

    REQUIRE_THROWS_AS(t.slice(4), std::out_of_range);
    REQUIRE_THROWS_WITH(t.slice(4),
                        "headwise::TensorView::slice: index 4 out of range for shape [4, 2, 3]");
    REQUIRE_THROWS_WITH(t.slice(-1),
                        "headwise::TensorView::slice: index -1 out of range for shape [4, 2, 3]");
    REQUIRE_THROWS_AS(t.narrow(3, 2), std::out_of_range);
    REQUIRE_THROWS_WITH(t.narrow(3, 2),
                        "headwise::TensorView::narrow: range [3, 5) out of range "
                        "for shape [4, 2, 3]");
}

TEMPLATE_TEST_CASE("at() is operator() with every index checked", "[tensor][at]", float, double) {
    Tensor<TestType> t(Shape{2, 3, 4}, iota_values<TestType>(24));
    const Tensor<TestType>& ct = t;
    const TensorView<TestType> v = t;
    const TensorView<const TestType> cv = t;
    for (Index i = 0; i < 2; ++i)
        for (Index j = 0; j < 3; ++j)
            for (Index k = 0; k < 4; ++k) {
                CAPTURE(i, j, k);
                CHECK(&t.at(i, j, k) == &t(i, j, k));
                CHECK(&ct.at(i, j, k) == &ct(i, j, k));
                CHECK(&v.at(i, j, k) == &v(i, j, k));
                CHECK(&cv.at(i, j, k) == &cv(i, j, k));
            }
    t.at(1, 2, 3) = TestType(-1);
    v.at(0, 0, 1) = TestType(-2);
    CHECK(t.data()[23] == TestType(-1));
    CHECK(ct.at(0, 0, 1) == TestType(-2));
    // Any integral index type; rank 0 takes no index.
    CHECK(t.at(std::size_t{1}, 0u, short{2}) == TestType(14));
    CHECK(headwise::view(t.data(), Shape{24}).slice(7).at() == TestType(7));
}

TEMPLATE_TEST_CASE("at() out of range throws std::out_of_range naming the index and the shape",
                   "[tensor][at][errors]", float, double) {
    Tensor<TestType> t(Shape{2, 3, 4});
    const Tensor<TestType>& ct = t;
    const TensorView<TestType> v = t;
    const TensorView<const TestType> cv = t;
    const std::string shape = " is out of range for shape [2, 3, 4]";

    // Past the end of each dimension, and negative.
    REQUIRE_THROWS_AS(t.at(2, 0, 0), std::out_of_range);
    REQUIRE_THROWS_WITH(t.at(2, 0, 0), "headwise::Tensor::at: index 2 of dimension 0" + shape);
    REQUIRE_THROWS_WITH(t.at(0, 3, 0), "headwise::Tensor::at: index 3 of dimension 1" + shape);
    REQUIRE_THROWS_WITH(t.at(1, 2, 4), "headwise::Tensor::at: index 4 of dimension 2" + shape);
    REQUIRE_THROWS_WITH(t.at(-1, 0, 0), "headwise::Tensor::at: index -1 of dimension 0" + shape);
    REQUIRE_THROWS_WITH(t.at(0, 0, -5), "headwise::Tensor::at: index -5 of dimension 2" + shape);
    REQUIRE_THROWS_WITH(t.at(1, 100, 100),  // the first index out of range is named
                        "headwise::Tensor::at: index 100 of dimension 1" + shape);
    REQUIRE_THROWS_WITH(ct.at(0, 5, 0), "headwise::Tensor::at: index 5 of dimension 1" + shape);
    REQUIRE_THROWS_AS(v.at(0, 0, 4), std::out_of_range);
    REQUIRE_THROWS_WITH(v.at(0, 0, 4), "headwise::TensorView::at: index 4 of dimension 2" + shape);
    REQUIRE_THROWS_WITH(cv.at(2, 0, 0), "headwise::TensorView::at: index 2 of dimension 0" + shape);

    // A wrong number of indices, too few or too many.
    REQUIRE_THROWS_AS(t.at(0, 0), std::out_of_range);
    REQUIRE_THROWS_WITH(t.at(0, 0),
                        "headwise::Tensor::at: 2 indices for a tensor of rank 3 (shape [2, 3, 4])");
    REQUIRE_THROWS_WITH(ct.at(0),
                        "headwise::Tensor::at: 1 index for a tensor of rank 3 (shape [2, 3, 4])");
    REQUIRE_THROWS_WITH(
        cv.at(0, 0, 0, 0),
        "headwise::TensorView::at: 4 indices for a tensor of rank 3 (shape [2, 3, 4])");
    REQUIRE_THROWS_WITH(v.at(),
                        "headwise::TensorView::at: 0 indices for a tensor of rank 3 "
                        "(shape [2, 3, 4])");

    // An empty extent has no valid index.
    const Tensor<TestType> empty(Shape{2, 0});
    REQUIRE_THROWS_WITH(empty.at(0, 0),
                        "headwise::Tensor::at: index 0 of dimension 1 is out of range for shape "
                        "[2, 0]");
}

#if !defined(NDEBUG) && defined(__unix__)
namespace {
/// Runs `f` in a child process and returns whether it ended by SIGABRT and what it wrote to
/// standard output and error: a debug assertion cannot be caught in the test's own process.
template <class F>
std::pair<bool, std::string> run_in_child(F f) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        // The abort is expected: no core file, and not Catch's signal handler (inherited from
        // the test process), which would report a failure from the child.
        const rlimit no_core{0, 0};
        ::setrlimit(RLIMIT_CORE, &no_core);
        std::signal(SIGABRT, SIG_DFL);
        ::close(fds[0]);
        ::dup2(fds[1], 1);
        ::dup2(fds[1], 2);
        f();
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string err;
    char buffer[512];
    for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;)
        err.append(buffer, static_cast<std::size_t>(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return {WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, err};
}
}  // namespace

TEST_CASE("operator() out of range stops a debug build naming the index and the shape",
          "[tensor][at]") {
    Tensor<float> t(Shape{2, 3});
    const auto [aborted, err] = run_in_child([&] {
        volatile float x = t(1, 3);
        static_cast<void>(x);
    });
    CHECK(aborted);
    CHECK_THAT(err, ContainsSubstring("headwise::Tensor::operator(): index 3 of dimension 1 is "
                                      "out of range for shape [2, 3]"));
    const TensorView<const float> v = t;
    const auto [aborted2, err2] = run_in_child([&] {
        volatile float x = v(0);
        static_cast<void>(x);
    });
    CHECK(aborted2);
    CHECK_THAT(err2, ContainsSubstring("headwise::TensorView::operator(): 1 index for a tensor "
                                       "of rank 2 (shape [2, 3])"));
}
#endif

TEMPLATE_TEST_CASE("matrix() and column_block() map the memory and write through", "[tensor]",
                   float, double) {
    Tensor<TestType> t(Shape{2, 3, 4}, iota_values<TestType>(24));
    auto M = t.matrix();  // a Map object (no expression), [6, 4]
    CHECK(M.rows() == 6);
    CHECK(M.cols() == 4);
    CHECK(M.data() == t.data());
    CHECK(M(4, 1) == t(1, 1, 1));
    M(5, 3) = TestType(-2);
    CHECK(t(1, 2, 3) == TestType(-2));
    M.row(0).setConstant(TestType(9));
    CHECK(t(0, 0, 2) == TestType(9));

    // Head 1 of width 2 in a [rows, 4] matrix: columns 2 and 3, rows 4 apart.
    auto block = t.column_block(2, 2);
    CHECK(block.rows() == 6);
    CHECK(block.cols() == 2);
    CHECK(block.outerStride() == 4);
    CHECK(block(3, 0) == t(1, 0, 2));
    block(3, 1) = TestType(55);
    CHECK(t(1, 0, 3) == TestType(55));
    block.setZero();
    CHECK(t(0, 1, 2) == TestType(0));
    CHECK(t(0, 1, 1) == TestType(5));  // outside the block: unchanged

    const Tensor<TestType>& ct = t;
    CHECK(ct.matrix()(1, 1) == TestType(5));
    CHECK(ct.column_block(1, 1)(2, 0) == TestType(9));
}

TEST_CASE("tensors print their shape and nested rows", "[tensor]") {
    std::ostringstream os;
    os << Tensor<float>(Shape{2, 3}, {1, 2, 3, 4, 5.5f, 6});
    CHECK(os.str() == "tensor[2, 3] [[1, 2, 3],\n[4, 5.5, 6]]");

    std::ostringstream scalar;
    scalar << Tensor<double>(Shape{}, {3.25});
    CHECK(scalar.str() == "tensor[] 3.25");

    std::ostringstream empty;
    empty << Tensor<float>();
    CHECK(empty.str() == "tensor[0] []");

    std::ostringstream view;
    const Tensor<double> t(Shape{2, 1, 2}, {1, 2, 3, 4});
    view << t.view();
    CHECK(view.str() == "tensor[2, 1, 2] [[[1, 2]],\n[[3, 4]]]");
}

TEST_CASE("bool tensors hold masks", "[tensor]") {
    Tensor<bool> zero(Shape{2, 3});
    for (const bool b : zero) CHECK_FALSE(b);

    Tensor<bool> mask(Shape{2, 2}, {true, false, false, true});
    CHECK(mask(0, 0));
    CHECK_FALSE(mask(0, 1));
    CHECK(mask(1, 1));
    mask(0, 1) = true;
    CHECK(mask.data()[1]);

    const Tensor<bool> copy = mask;
    CHECK(copy.data() != mask.data());
    CHECK(copy(0, 1));
    const TensorView<const bool> v = mask;
    CHECK(v.slice(1)(1));

    std::ostringstream os;
    os << Tensor<bool>(Shape{2, 2}, {true, false, false, true});
    CHECK(os.str() == "tensor[2, 2] [[1, 0],\n[0, 1]]");
    CHECK(Tensor<bool>::full(Shape{3}, true)(2));
}

TEMPLATE_TEST_CASE("zeros, ones, full and arange", "[tensor][factories]", float, double) {
    const Shape s{2, 3};
    const Tensor<TestType> z = Tensor<TestType>::zeros(s);
    const Tensor<TestType> o = Tensor<TestType>::ones(s);
    const Tensor<TestType> f = Tensor<TestType>::full(s, TestType(2.5));
    for (Index i = 0; i < 6; ++i) {
        CHECK(z.data()[i] == TestType(0));
        CHECK(o.data()[i] == TestType(1));
        CHECK(f.data()[i] == TestType(2.5));
    }
    const Tensor<TestType> r = Tensor<TestType>::arange(5);
    CHECK(r.shape() == Shape{5});
    for (Index i = 0; i < 5; ++i) CHECK(r.data()[i] == static_cast<TestType>(i));
    CHECK(Tensor<TestType>::arange(0).numel() == 0);

    Tensor<TestType> filled(s);
    filled.fill(TestType(-3));
    CHECK(filled(1, 2) == TestType(-3));

    // The free-function spellings give the same tensors.
    CHECK(headwise::zeros<TestType>(s).shape() == s);
    CHECK(headwise::ones<TestType>(s)(1, 1) == TestType(1));
    CHECK(headwise::full<TestType>(s, TestType(4))(0, 2) == TestType(4));
    CHECK(headwise::arange<TestType>(3)(2) == TestType(2));
}

TEMPLATE_TEST_CASE("randn and uniform are deterministic per seed and well distributed",
                   "[tensor][factories]", float, double) {
    const Shape s{200, 100};
    const double n = static_cast<double>(s.numel());

    std::mt19937_64 rng(42), same(42), other(43);
    const Tensor<TestType> a = Tensor<TestType>::randn(s, rng);
    const Tensor<TestType> b = Tensor<TestType>::randn(s, same);
    const Tensor<TestType> c = Tensor<TestType>::randn(s, other);
    Index equal_to_b = 0, equal_to_c = 0;
    for (Index i = 0; i < a.numel(); ++i) {
        equal_to_b += a.data()[i] == b.data()[i];
        equal_to_c += a.data()[i] == c.data()[i];
    }
    CHECK(equal_to_b == a.numel());
    CHECK(equal_to_c < 10);

    // One headwise::normal draw per element, in row-major order.
    std::mt19937_64 replay(42);
    const Tensor<TestType> small = Tensor<TestType>::randn(Shape{5}, replay);
    std::mt19937_64 replay2(42);
    for (Index i = 0; i < 5; ++i)
        CHECK(small.data()[i] == static_cast<TestType>(headwise::normal(replay2)));

    // Moments: the mean within 5 standard errors of 0, the variance within 5% of 1.
    double sum = 0.0, sum_sq = 0.0;
    for (const TestType v : a) {
        sum += static_cast<double>(v);
        sum_sq += static_cast<double>(v) * static_cast<double>(v);
    }
    const double mean = sum / n, var = sum_sq / n - mean * mean;
    CHECK(std::abs(mean) < 5.0 / std::sqrt(n));
    CHECK(std::abs(var - 1.0) < 0.05);

    std::mt19937_64 urng(7), usame(7);
    const Tensor<TestType> u = Tensor<TestType>::uniform(s, -2.0, 3.0, urng);
    const Tensor<TestType> u2 = headwise::uniform<TestType>(s, -2.0, 3.0, usame);
    double usum = 0.0, umin = 10.0, umax = -10.0;
    for (Index i = 0; i < u.numel(); ++i) {
        const double v = static_cast<double>(u.data()[i]);
        REQUIRE(u.data()[i] == u2.data()[i]);
        REQUIRE(v >= -2.0);
        REQUIRE(v <= 3.0);
        usum += v;
        umin = v < umin ? v : umin;
        umax = v > umax ? v : umax;
    }
    // U(-2, 3): mean 0.5, standard deviation 5 / sqrt(12).
    CHECK(std::abs(usum / n - 0.5) < 5.0 * (5.0 / std::sqrt(12.0)) / std::sqrt(n));
    CHECK(umin < -1.99);
    CHECK(umax > 2.99);

    std::mt19937_64 r1(5), r2(5);
    const Tensor<TestType> d1 = headwise::randn<TestType>(Shape{3, 3}, r1);
    const Tensor<TestType> d2 = Tensor<TestType>::randn(Shape{3, 3}, r2);
    for (Index i = 0; i < 9; ++i) CHECK(d1.data()[i] == d2.data()[i]);
}

TEST_CASE("a tensor whose byte size overflows throws before allocating", "[tensor][overflow]") {
    const Index big = Index(1) << 62;
    // 2^62 floats are 2^64 bytes: the byte count wraps to 0 unless checked.
    REQUIRE_THROWS_AS(Tensor<float>(Shape{big}), std::length_error);
    REQUIRE_THROWS_WITH(Tensor<float>(Shape{big}),
                        "headwise::Tensor::Tensor: shape [4611686018427387904]: "
                        "4611686018427387904 elements of 4 bytes overflow the address space");
    REQUIRE_THROWS_AS(Tensor<double>(Shape{Index(1) << 61}), std::length_error);
    REQUIRE_THROWS_AS(Tensor<float>::uninitialized(Shape{big, 1}), std::length_error);
    REQUIRE_THROWS_AS(Tensor<double>::zeros(Shape{Index(1) << 60, 2}), std::length_error);
    // A shape changed extent by extent is checked when a view or tensor is made of it.
    Shape s{1, 1};
    s[0] = big;
    s[1] = 4;
    float x = 0;
    REQUIRE_THROWS_AS(TensorView<float>(&x, s), std::length_error);
    REQUIRE_THROWS_AS(Tensor<float>(s), std::length_error);
}

}  // namespace test_tensor
