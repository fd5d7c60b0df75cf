// SPDX-License-Identifier: MIT
// BertModel's inference path (models/bert.hpp): one set of attention scratch passed along the
// layers gives the same bits as layers with scratch of their own.

#include <headwise/models/bert.hpp>

#include <cstdint>  // std::int64_t
#include <string>   // std::string

#include "support/catch.hpp"
#include "support/instantiations.hpp"

namespace test_bert_inference {

using headwise::Index;
using headwise::Projection;
using headwise::Shape;
using headwise::Tensor;
using headwise::models::BertModel;

namespace {

const std::string kTiny = std::string(HEADWISE_SOURCE_DIR) + "/tests/golden/minilm/tiny_bert";

Tensor<std::int64_t> ids_of(Shape shape, std::int64_t first) {
    Tensor<std::int64_t> ids(shape);
    for (Index i = 0; i < ids.numel(); ++i) ids.data()[i] = (first + 7 * i) % 40;  // vocab 40
    return ids;
}

template <class T>
bool same_bits(const Tensor<T>& a, const Tensor<T>& b) {
    if (a.shape() != b.shape()) return false;
    for (Index i = 0; i < a.numel(); ++i)
        if (a.data()[i] != b.data()[i]) return false;
    return true;
}

}  // namespace

TEST_CASE("BertModel: layers passing one set of attention scratch compute what fresh ones do",
          "[models][bert]") {
    BertModel<float> model = BertModel<float>::from_pretrained(kTiny);
    // Layers that plan their projections differently share the scratch all the same.
    model.layers()[0].with_projection(Projection::separate);
    model.layers()[1].with_projection(Projection::per_head);
    const BertModel<float> untouched = model;  // a copy starts with scratch of its own
    const Tensor<std::int64_t> a = ids_of(Shape{3, 6}, 1), b = ids_of(Shape{2, 9}, 5);
    const Tensor<float> first_a = model.forward(a);
    const Tensor<float> then_b = model.forward(b);
    const Tensor<float> again_a = model.forward(a);
    CHECK(same_bits(first_a, again_a));
    BertModel<float> fresh_b = untouched;
    CHECK(same_bits(then_b, fresh_b.forward(b)));
    BertModel<float> fresh_a = untouched;
    CHECK(same_bits(first_a, fresh_a.forward(a)));
}

}  // namespace test_bert_inference
