// SPDX-License-Identifier: MIT
// models/bert.hpp and the pooling of models/sentence_embedding.hpp: a small BERT saved by
// transformers against its own last_hidden_state, Hugging Face names, and the error messages.

#include <headwise/io/npy.hpp>
#include <headwise/models/bert.hpp>
#if __has_include(<utf8proc.h>)
#include <headwise/models/sentence_embedding.hpp>
#define HEADWISE_TEST_POOLING 1
#endif

#include <cmath>       // std::abs, std::sqrt
#include <cstdint>     // std::int64_t
#include <filesystem>  // std::filesystem::create_directory
#include <fstream>     // std::ofstream
#include <string>      // std::string
#include <vector>      // std::vector

#include "support/catch.hpp"
#include "support/golden.hpp"
#include "support/golden_models.hpp"
#include "support/instantiations.hpp"
#include "support/projections.hpp"

namespace test_bert {

using headwise::Index;
using headwise::Projection;
using headwise::Shape;
using headwise::Tensor;
using headwise::models::BertConfig;
using headwise::models::BertModel;
using headwise::test::kProjections;
using headwise::test::load_ids;
using headwise::test::ScratchDir;

namespace {

const std::string kTiny = headwise::test::tiny_bert_dir();

template <class T>
double max_abs_diff(const Tensor<T>& a, const Tensor<double>& b) {
    REQUIRE(a.shape() == b.shape());
    double m = 0;
    for (Index i = 0; i < a.numel(); ++i)
        m = std::max(m, std::abs(static_cast<double>(a.data()[i]) - b.data()[i]));
    return m;
}

}  // namespace

TEMPLATE_TEST_CASE("BertModel::from_pretrained reproduces transformers' last_hidden_state",
                   "[models][bert][golden]", float, double) {
    using T = TestType;
    const Tensor<std::int64_t> ids = load_ids(kTiny + "/input_ids.npy");  // [3, 6]
    const Tensor<bool> padding = headwise::load_npy<bool>(kTiny + "/padding_mask.npy");
    const Tensor<std::int64_t> types = load_ids(kTiny + "/token_type_ids.npy");  // [3, 6]
    const Tensor<double> expected =
        headwise::load_npy<double>(kTiny + "/last_hidden_state.npy");  // [3, 6, 8]
    const Projection projection = GENERATE(from_range(kProjections));
    CAPTURE(headwise::to_string(projection));
    BertModel<T> model = BertModel<T>::from_pretrained(kTiny, projection);
    CHECK(!model.is_training());
    const Tensor<T> hidden = model.forward(ids, padding, types);  // [3, 6, 8]
    const double tolerance = std::is_same_v<T, double> ? 1e-12 : 1e-5;
    const double diff = max_abs_diff(hidden, expected);
    INFO("max abs diff " << diff);
    CHECK(diff <= tolerance);

    // Unbatched: one sequence [L] gives [L, E], its batch row.
    const Tensor<std::int64_t> first(headwise::view(ids.data(), Shape{6}));
    const Tensor<std::int64_t> first_types(headwise::view(types.data(), Shape{6}));
    const Tensor<T> one = model.forward(first, {}, first_types);
    REQUIRE(one.shape() == Shape{6, 8});
    for (Index i = 0; i < one.numel(); ++i)
        CHECK(std::abs(static_cast<double>(one.data()[i]) - expected.data()[i]) <= tolerance);
}

TEST_CASE("BertModel: Hugging Face names, and query, key, value as in_proj_weight's row blocks",
          "[models][bert]") {
    BertModel<double> model = BertModel<double>::from_pretrained(kTiny);
    auto file = headwise::io::load_safetensors<double>(kTiny + "/model.safetensors");
    REQUIRE(file.count("embeddings.position_ids") == 1);  // int64, read as exact doubles
    CHECK(file.at("embeddings.position_ids").data()[5] == 5.0);
    const auto sd = model.state_dict();
    // Every file entry but the pooler and the position_ids buffer, under the same name, equal.
    std::size_t compared = 0;
    for (const auto& [name, value] : file) {
        if (name.rfind("pooler.", 0) == 0 || name == "embeddings.position_ids") continue;
        CAPTURE(name);
        REQUIRE(sd.count(name) == 1);
        REQUIRE(sd.at(name).shape() == value.shape());
        for (Index i = 0; i < value.numel(); ++i) REQUIRE(sd.at(name).data()[i] == value.data()[i]);
        ++compared;
    }
    CHECK(compared == sd.size());
    CHECK(sd.size() == 5 + 2 * 16);
    // Loaded without gradient buffers in its Linears and Embeddings; asked for, they exist, zero.
    const auto grads = model.grad_dict();
    REQUIRE(grads.size() == sd.size());
    for (const auto& [name, g] : grads) {
        CAPTURE(name);
        REQUIRE(g.shape() == sd.at(name).shape());
        for (Index i = 0; i < g.numel(); ++i) REQUIRE(g.data()[i] == 0.0);
    }
    // The attention's packed weight holds them: no second copy of the weights.
    const auto attention = model.layers()[1].attention().state_dict();
    const Tensor<double>& packed = attention.at("in_proj_weight");  // [3E, E]
    const char* parts[3] = {"query", "key", "value"};
    for (Index p = 0; p < 3; ++p) {
        const Tensor<double>& w =
            file.at(std::string("encoder.layer.1.attention.self.") + parts[p] + ".weight");
        for (Index i = 0; i < 64; ++i) CHECK(packed.data()[p * 64 + i] == w.data()[i]);
    }
    CHECK(model.layers()[1].attention().head(1).k_weight().data() ==
          model.parameters()[5 + 16 + 2].value.data() + 4 * 8);
    // load_pretrained takes the file's own state dict (pooler and position_ids ignored) and
    // strictly checks the rest.
    BertModel<double> other(model.config());
    file.erase("pooler.dense.bias");
    other.load_pretrained(file);
    CHECK(other.state_dict().at("encoder.layer.0.output.dense.weight").data()[3] ==
          sd.at("encoder.layer.0.output.dense.weight").data()[3]);
    file.erase("encoder.layer.0.output.dense.weight");
    CHECK_THROWS_WITH(other.load_pretrained(file),
                      ContainsSubstring("encoder.layer.0.output.dense.weight: missing from the "
                                        "state dict, expected shape [8, 16]"));
}

TEST_CASE("BertModel: errors name the file, the key or the argument", "[models][bert][errors]") {
    const ScratchDir dir("bert");
    const std::string config = dir.file("config.json");
    CHECK_THROWS_MATCHES(BertModel<float>::from_pretrained(dir.path().string()), std::runtime_error,
                         Message("headwise::models::BertConfig::from_json_file: " + config +
                                 ": cannot open the file"));
    auto write = [&](const std::string& text) { std::ofstream(config) << text; };
    const std::string good = R"("vocab_size": 40, "hidden_size": 8, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16)";
    write("{" + good + R"(, "hidden_act": "relu"})");
    CHECK_THROWS_MATCHES(BertConfig::from_json_file(config), std::runtime_error,
                         Message("headwise::models::BertConfig::from_json_file: " + config +
                                 ": hidden_act: expected \"gelu\", \"gelu_new\" or "
                                 "\"gelu_pytorch_tanh\", got \"relu\""));
    write(R"({"vocab_size": 40})");
    CHECK_THROWS_MATCHES(BertConfig::from_json_file(config), std::runtime_error,
                         Message("headwise::models::BertConfig::from_json_file: " + config +
                                 ": hidden_size: missing"));
    write("{" + good + R"(, "num_attention_heads": 3})");
    CHECK_THROWS_WITH(BertConfig::from_json_file(config),
                      ContainsSubstring("num_attention_heads: must divide hidden_size = 8, got 3"));
    write("{" + good + R"(, "position_embedding_type": "relative_key"})");
    CHECK_THROWS_WITH(BertConfig::from_json_file(config),
                      ContainsSubstring("position_embedding_type: expected \"absolute\""));
    write("{" + good + "}");
    const BertConfig c = BertConfig::from_json_file(config);
    CHECK(c.layer_norm_eps == 1e-12);
    CHECK(c.type_vocab_size == 2);
    CHECK_THROWS_MATCHES(BertModel<float>::from_pretrained(dir.path().string()), std::runtime_error,
                         Message("headwise::io::load_safetensors: " +
                                 dir.file("model.safetensors") + ": cannot open the file"));

    BertModel<float> model(c);
    const Tensor<std::int64_t> too_long(Shape{1, 17});
    CHECK_THROWS_MATCHES(model.forward(too_long), headwise::shape_error,
                         Message("headwise::models::BertModel::forward: input_ids: expected "
                                 "shape at most max_position_embeddings = 16 positions, got "
                                 "[1, 17]"));
    const Tensor<std::int64_t> ids(Shape{2, 3}, {1, 2, 3, 4, 5, 40});
    CHECK_THROWS_WITH(model.forward(ids), ContainsSubstring("is 40, expected an index in [0, 40)"));
    const Tensor<bool> mask(Shape{2, 2});
    const Tensor<std::int64_t> ok(Shape{2, 2});
    CHECK_THROWS_MATCHES(model.forward(ok, Tensor<bool>(Shape{2, 3})), headwise::shape_error,
                         Message("headwise::models::BertModel::forward: padding_mask: expected "
                                 "shape [2, 2], got [2, 3]"));
    static_cast<void>(mask);
}

#ifdef HEADWISE_TEST_POOLING
TEST_CASE("pool and l2_normalize_rows compute sentence-transformers' poolings",
          "[models][pooling]") {
    using headwise::models::Pooling;
    // hidden [2, 3, 2]; the second sentence's last token is padding.
    const Tensor<float> hidden(Shape{2, 3, 2}, {1, 2, 3, -4, 5, 0, 2, 2, -6, 4, 100, 100});
    const Tensor<bool> padding(Shape{2, 3}, {false, false, false, false, false, true});
    const Tensor<float> mean = headwise::models::pool<float>(hidden, padding, Pooling::mean);
    CHECK(std::vector<float>(mean.data(), mean.data() + 4) ==
          std::vector<float>{3, -2.0f / 3, -2, 3});
    const Tensor<float> max = headwise::models::pool<float>(hidden, padding, Pooling::max);
    CHECK(std::vector<float>(max.data(), max.data() + 4) == std::vector<float>{5, 2, 2, 4});
    const Tensor<float> cls = headwise::models::pool<float>(hidden, padding, Pooling::cls);
    CHECK(std::vector<float>(cls.data(), cls.data() + 4) == std::vector<float>{1, 2, 2, 2});
    Tensor<float> x(Shape{2, 2}, {3, 4, 0, 0});
    headwise::models::l2_normalize_rows<float>(x);
    CHECK(std::vector<float>(x.data(), x.data() + 4) == std::vector<float>{0.6f, 0.8f, 0, 0});
}

TEST_CASE("SentenceEmbeddingConfig reads modules.json and the pooling config",
          "[models][pooling][files]") {
    using headwise::models::Pooling;
    using headwise::models::SentenceEmbeddingConfig;
    const ScratchDir dir("sentence-config");
    // Without modules.json: all-MiniLM-L6-v2's mean pooling and normalisation.
    SentenceEmbeddingConfig c = SentenceEmbeddingConfig::from_directory(dir.path().string());
    CHECK(c.pooling == Pooling::mean);
    CHECK(c.normalize);
    std::filesystem::create_directory(dir.path() / "1_Pooling");
    const std::string modules = dir.file("modules.json");
    const std::string pooling = (dir.path() / "1_Pooling" / "config.json").string();
    const std::string two =
        R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"})";
    std::ofstream(modules) << two << "]";
    std::ofstream(pooling) << R"({"pooling_mode_cls_token": true})";
    std::ofstream(dir.file("sentence_bert_config.json")) << R"({"max_seq_length": 128})";
    c = SentenceEmbeddingConfig::from_directory(dir.path().string());
    CHECK(c.pooling == Pooling::cls);
    CHECK(!c.normalize);
    CHECK(c.max_seq_length == 128);
    std::ofstream(pooling) << R"({"pooling_mode_mean_sqrt_len_tokens": true})";
    CHECK_THROWS_MATCHES(
        SentenceEmbeddingConfig::from_directory(dir.path().string()), std::runtime_error,
        Message("headwise::models::SentenceEmbeddingConfig::from_directory: " + pooling +
                ": pooling_mode_mean_sqrt_len_tokens is not supported (mean, "
                "cls and max tokens are)"));
    std::ofstream(pooling) << R"({"pooling_mode_max_tokens": true})";
    std::ofstream(modules) << two << R"(, {"idx": 2, "name": "2", "path": "2_Dense",
                        "type": "sentence_transformers.models.Dense"}])";
    CHECK_THROWS_MATCHES(
        SentenceEmbeddingConfig::from_directory(dir.path().string()), std::runtime_error,
        Message("headwise::models::SentenceEmbeddingConfig::from_directory: " + modules +
                ": module type \"sentence_transformers.models.Dense\" is not "
                "supported (Transformer, Pooling, Normalize are)"));
}
#endif

}  // namespace test_bert
