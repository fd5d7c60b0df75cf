// SPDX-License-Identifier: MIT
// DataParallel<T>: one model per rank, parameters broadcast once, gradients averaged in buckets.
#pragma once

#include <algorithm>  // std::copy_n, std::min, std::max
#include <chrono>     // std::chrono::steady_clock
#include <cstddef>    // std::size_t
#include <cstdint>    // std::uint64_t
#include <cstring>    // std::memcpy
#include <stdexcept>  // std::invalid_argument, std::runtime_error
#include <string>     // std::string, std::to_string
#include <utility>    // std::move
#include <vector>     // std::vector

#include "../config.hpp"
#include "../layers/module.hpp"
#include "../tensor.hpp"
#include "communicator.hpp"
#include "detail/agreement.hpp"

namespace headwise::distributed {

struct DataParallelOptions {
    /// Most gradient bytes per all-reduce (torch DDP's bucket_cap_mb, 25 MiB): a parameter
    /// larger than this gets a bucket of its own. Fewer, larger messages pay the per-call latency
    /// less often; smaller ones would let a backward overlap them (not done here).
    std::size_t bucket_bytes = std::size_t{25} << 20;
    /// The rank whose parameters every rank starts from.
    int root = 0;
};

/// What the collectives of a DataParallel cost so far (for logs and scaling measurements).
struct CollectiveStats {
    std::uint64_t gradient_calls = 0;  // MPI all-reduce calls on gradient buckets
    std::uint64_t scalar_calls = 0;    // MPI all-reduce calls of average() and identical()
    std::uint64_t bytes = 0;           // gradient bytes all-reduced (each rank's contribution)
    double seconds = 0.0;              // wall time in those calls, packing and unpacking included
};

/// Synchronous data parallelism over MPI, as torch's DistributedDataParallel: every rank holds
/// the same model, computes forward and backward on its own shard of the global batch, and
/// average_gradients() replaces each gradient by its mean over the ranks, so that an optimiser
/// step on every rank gives every rank the same parameters. With equal shards whose losses are
/// means, the mean of the ranks' gradients is the gradient of the global batch: training matches
/// one process on the whole batch up to the order of the sums.
///
///   headwise::distributed::DataParallel<float> dp(world, model.parameters());  // broadcasts
///   ... forward and backward on this rank's shard ...
///   dp.average_gradients();                      // one MPI_Allreduce per bucket
///   opt.step();                                  // the same update on every rank
///   const double loss = dp.average(local_loss);  // the global batch's loss, for the log
///
/// The gradients are packed into a few contiguous buckets of at most options.bucket_bytes (in
/// the reverse of parameters()' order, the order a backward produces them), each summed in
/// place by one MPI_Allreduce, scaled by 1 / size() and copied back. A model's parameters and
/// gradients must stay where they are (the views are kept) and outlive the DataParallel.
template <class T>
class DataParallel {
    HEADWISE_STATIC_ASSERT_REAL(T);

public:
    /// Checks that every rank agrees on everything that shapes the communication, then sets
    /// every rank's parameter values to the root's (broadcast_parameters). Collective: every rank
    /// of `comm` constructs its DataParallel at the same point. The ranks first exchange a
    /// summary of the same size on every rank (options.bucket_bytes, options.root, the scalar
    /// type, the parameter count and scalar total, a hash of the names and shapes, the bucket
    /// layout, whether this rank's arguments are valid), so that no disagreement can make ranks
    /// post collectives of different sizes. Throws std::invalid_argument naming this constructor
    /// on every rank when they differ (naming the field or the first parameter that differs,
    /// this rank's value and another rank's), or when a parameter's gradient has another element
    /// count than its value, options.bucket_bytes is 0 or options.root is no rank (on that rank;
    /// the others say which rank refused its arguments); nothing is written then.
    DataParallel(const Communicator& comm, std::vector<Parameter<T>> parameters,
                 const DataParallelOptions& options = {});

    /// Copies the root's parameter values to every rank (the start of training, or after a
    /// rank-local change such as loading a checkpoint on the root only). Collective.
    void broadcast_parameters();

    /// Replaces every gradient by its mean over the ranks. Collective; call it after backward on
    /// every rank, before clipping and the optimiser step. On one rank it changes nothing and
    /// calls nothing.
    void average_gradients();

    /// The mean over ranks of a scalar (a loss, an accuracy), or of several in one call. Exact
    /// for the mean of equal shards' means up to the order of the sum. Collective.
    double average(double value);
    std::vector<double> average(std::vector<double> values);

    /// True on every rank when every rank's parameter values are bit for bit the same (a 64-bit
    /// hash of their bytes compared with one all-reduce). Collective; a check for tests and for
    /// the occasional step of a long run.
    bool identical();

    const Communicator& communicator() const noexcept { return comm_; }
    int rank() const noexcept { return comm_.rank(); }
    int size() const noexcept { return comm_.size(); }
    const std::vector<Parameter<T>>& parameters() const noexcept { return params_; }
    /// How many buckets (hence MPI_Allreduce calls per average_gradients) the gradients need.
    std::size_t bucket_count() const noexcept { return buckets_.size(); }
    /// The parameter indices (into parameters()) of bucket `b`, in packing order.
    const std::vector<std::size_t>& bucket(std::size_t b) const { return buckets_.at(b).params; }
    const CollectiveStats& stats() const noexcept { return stats_; }
    void reset_stats() noexcept { stats_ = {}; }

private:
    struct Bucket {
        std::vector<std::size_t> params;  // indices into params_
        std::vector<T> buffer;            // their gradients (or values), packed
    };
    enum class Field { value, grad };

    void pack(Bucket& b, Field f) const;
    void unpack(Bucket& b, Field f, T scale) const;
    void check_consistent(const char* fn, const std::string& local_error) const;
    void check_parameters_agree(const char* fn) const;

    Communicator comm_;
    std::vector<Parameter<T>> params_;
    DataParallelOptions options_;
    std::vector<Bucket> buckets_;
    CollectiveStats stats_;
};

// ---- definitions -----------------------------------------------------------------------------

template <class T>
DataParallel<T>::DataParallel(const Communicator& comm, std::vector<Parameter<T>> parameters,
                              const DataParallelOptions& options)
    : comm_(comm), params_(std::move(parameters)), options_(options) {
    constexpr const char* fn = "headwise::distributed::DataParallel::DataParallel";
    // This rank's own argument errors are not thrown at once: the other ranks would wait in the
    // agreement below. They go into it, and every rank throws after it.
    std::string local_error;
    if (options_.bucket_bytes == 0)
        local_error = std::string(fn) + ": options.bucket_bytes: must be positive, got 0";
    else if (options_.root < 0 || options_.root >= comm_.size())
        local_error = std::string(fn) + ": options.root: must be a rank in [0, " +
                      std::to_string(comm_.size()) + "), got " + std::to_string(options_.root);
    for (const Parameter<T>& p : params_)
        if (local_error.empty() && p.grad.numel() != p.value.numel())
            local_error = std::string(fn) + ": parameters: '" + p.name + "': gradient of shape " +
                          p.grad.shape().str() + " for a value of shape " + p.value.shape().str();

    // Reverse order: a backward produces the last parameters' gradients first, so these buckets
    // are the ones an overlapping all-reduce could start early.
    for (std::size_t i = params_.size(); local_error.empty() && i-- > 0;) {
        const std::size_t bytes = static_cast<std::size_t>(params_[i].value.numel()) * sizeof(T);
        if (buckets_.empty() ||
            (!buckets_.back().params.empty() &&
             buckets_.back().buffer.size() * sizeof(T) + bytes > options_.bucket_bytes))
            buckets_.emplace_back();
        buckets_.back().params.push_back(i);
        buckets_.back().buffer.resize(buckets_.back().buffer.size() +
                                      static_cast<std::size_t>(params_[i].value.numel()));
    }
    check_consistent(fn, local_error);
    broadcast_parameters();
}

template <class T>
void DataParallel<T>::check_consistent(const char* fn, const std::string& local_error) const {
    // Every rank's summary, one row per rank, combined by one all-reduce (MPI_MAX over rows that
    // are zero but on their own rank): its size depends on the rank count alone, so ranks that
    // disagree on anything else still post the same collective, and each learns every rank's
    // values to name them.
    enum Word : std::size_t {
        kRefused,      // 1 when this rank's own arguments are invalid (local_error)
        kBucketBytes,  // options.bucket_bytes
        kRoot,         // options.root, as a 64-bit two's complement
        kScalarBytes,  // sizeof(T)
        kCount,        // parameters
        kScalars,      // their total element count
        kLayout,       // hash of every name and shape, in order
        kBuckets,      // bucket count
        kBucketSizes,  // hash of each bucket's parameters
        kWords
    };
    std::uint64_t layout = 0xcbf29ce484222325ull, scalars = 0;
    for (const Parameter<T>& p : params_) {
        layout = detail::fnv1a_word(p.name.size(), layout);
        layout = detail::fnv1a(p.name.data(), p.name.size(), layout);
        layout = detail::fnv1a_word(static_cast<std::uint64_t>(p.value.rank()), layout);
        for (int d = 0; d < p.value.rank(); ++d)
            layout = detail::fnv1a_word(static_cast<std::uint64_t>(p.value.shape()[d]), layout);
        scalars += static_cast<std::uint64_t>(p.value.numel());
    }
    std::uint64_t bucket_sizes = 0xcbf29ce484222325ull;
    for (const Bucket& b : buckets_) {
        bucket_sizes = detail::fnv1a_word(b.params.size(), bucket_sizes);
        for (std::size_t i : b.params) bucket_sizes = detail::fnv1a_word(i, bucket_sizes);
    }
    const std::size_t ranks = static_cast<std::size_t>(comm_.size());
    const std::size_t me = static_cast<std::size_t>(comm_.rank());
    std::vector<std::uint64_t> table(ranks * kWords, 0);
    std::uint64_t* mine = table.data() + me * kWords;
    mine[kRefused] = local_error.empty() ? 0 : 1;
    mine[kBucketBytes] = options_.bucket_bytes;
    mine[kRoot] = static_cast<std::uint64_t>(static_cast<std::int64_t>(options_.root));
    mine[kScalarBytes] = sizeof(T);
    mine[kCount] = params_.size();
    mine[kScalars] = scalars;
    mine[kLayout] = layout;
    mine[kBuckets] = buckets_.size();
    mine[kBucketSizes] = bucket_sizes;
    if (ranks > 1) comm_.max(table.data(), table.size());

    if (!local_error.empty()) throw std::invalid_argument(local_error);
    const auto word = [&](std::size_t r, Word w) { return table[r * kWords + w]; };
    // The first rank whose word w differs from this rank's, or `ranks` when none does.
    const auto other_than_me = [&](Word w) {
        for (std::size_t r = 0; r < ranks; ++r)
            if (word(r, w) != mine[w]) return r;
        return ranks;
    };
    const std::string here = ": differs across ranks: rank " + std::to_string(me) + " of " +
                             std::to_string(ranks) + " has ";
    const auto differs = [&](const char* field, Word w, auto shown) {
        const std::size_t r = other_than_me(w);
        if (r == ranks) return;
        throw std::invalid_argument(std::string(fn) + ": " + field + here + shown(mine[w]) +
                                    ", rank " + std::to_string(r) + " has " + shown(word(r, w)));
    };
    const auto number = [](std::uint64_t x) { return std::to_string(x); };
    const auto scalar_type = [](std::uint64_t bytes) {
        return bytes == sizeof(float)    ? std::string("float")
               : bytes == sizeof(double) ? std::string("double")
                                         : std::to_string(bytes) + "-byte scalars";
    };
    const auto root = [](std::uint64_t x) { return std::to_string(static_cast<std::int64_t>(x)); };
    differs("options.bucket_bytes", kBucketBytes, number);
    differs("options.root", kRoot, root);
    differs("scalar type", kScalarBytes, scalar_type);
    differs("parameters: count", kCount, number);
    for (std::size_t r = 0; r < ranks; ++r)
        if (word(r, kRefused) != 0)
            throw std::invalid_argument(std::string(fn) + ": rank " + std::to_string(r) + " of " +
                                        std::to_string(ranks) +
                                        " refused its arguments (options or parameters; its "
                                        "message says which)");
    for (std::size_t r = 0; r < ranks; ++r)
        if (word(r, kLayout) != mine[kLayout]) {
            check_parameters_agree(fn);  // collective: every rank takes this branch
            break;
        }
    differs("parameters: total element count", kScalars, number);
    // Equal options, scalar type and shapes give equal buckets; checked all the same, since a
    // difference there would make ranks all-reduce buffers of different sizes.
    differs("bucket layout: buckets", kBuckets, number);
    differs("bucket layout: parameters per bucket (hash)", kBucketSizes, number);
}

template <class T>
void DataParallel<T>::check_parameters_agree(const char* fn) const {
    // The ranks agree on the count (checked before), so a hash per parameter is a collective of
    // one size everywhere; then each rank's name (a bounded prefix) and shape of the first
    // parameter that differs, one fixed-size row per rank.
    const std::size_t n = params_.size();
    std::vector<std::uint64_t> hashes(n);
    for (std::size_t i = 0; i < n; ++i) {
        const Parameter<T>& p = params_[i];
        std::uint64_t h = detail::fnv1a_word(p.name.size(), 0xcbf29ce484222325ull);
        h = detail::fnv1a(p.name.data(), p.name.size(), h);
        h = detail::fnv1a_word(static_cast<std::uint64_t>(p.value.rank()), h);
        for (int d = 0; d < p.value.rank(); ++d)
            h = detail::fnv1a_word(static_cast<std::uint64_t>(p.value.shape()[d]), h);
        hashes[i] = h;
    }
    const std::vector<detail::Spread> s = detail::spread(comm_, hashes);
    std::size_t first = 0;
    while (first < n && s[first].equal()) ++first;
    if (first == n) first = 0;  // a collision of the layout hash alone; report parameter 0

    constexpr std::size_t kNameBytes = 64, kDims = 8;
    constexpr std::size_t kRow = 2 + kDims + kNameBytes / 8;  // name length, rank, dims, name
    const std::size_t ranks = static_cast<std::size_t>(comm_.size());
    std::vector<std::uint64_t> rows(ranks * kRow, 0);
    {
        const Parameter<T>& p = params_[first];
        std::uint64_t* row = rows.data() + static_cast<std::size_t>(comm_.rank()) * kRow;
        row[0] = p.name.size();
        row[1] = static_cast<std::uint64_t>(p.value.rank());
        for (std::size_t d = 0; d < kDims && d < static_cast<std::size_t>(p.value.rank()); ++d)
            row[2 + d] = static_cast<std::uint64_t>(p.value.shape()[static_cast<int>(d)]);
        std::memcpy(row + 2 + kDims, p.name.data(), std::min(p.name.size(), kNameBytes));
    }
    comm_.max(rows.data(), rows.size());
    const auto shown = [&](std::size_t r) {
        const std::uint64_t* row = rows.data() + r * kRow;
        std::string name(reinterpret_cast<const char*>(row + 2 + kDims),
                         static_cast<std::size_t>(std::min<std::uint64_t>(row[0], kNameBytes)));
        std::string out = "'" + name + (row[0] > kNameBytes ? "...'" : "'") + " [";
        for (std::uint64_t d = 0; d < row[1] && d < kDims; ++d)
            out += (d ? ", " : "") + std::to_string(row[2 + d]);
        return out + (row[1] > kDims ? ", ...]" : "]");
    };
    const std::size_t me = static_cast<std::size_t>(comm_.rank());
    std::size_t other = 0;
    while (other < ranks && (other == me || shown(other) == shown(me))) ++other;
    if (other == ranks) other = me == 0 ? 1 : 0;  // differs beyond the prefix shown
    throw std::invalid_argument(std::string(fn) + ": parameters[" + std::to_string(first) +
                                "]: name or shape: differs across ranks: rank " +
                                std::to_string(me) + " of " + std::to_string(ranks) + " has " +
                                shown(me) + ", rank " + std::to_string(other) + " has " +
                                shown(other));
}

template <class T>
void DataParallel<T>::pack(Bucket& b, Field f) const {
    T* out = b.buffer.data();
    for (std::size_t i : b.params) {
        const TensorView<T>& v = f == Field::grad ? params_[i].grad : params_[i].value;
        std::copy_n(v.data(), v.numel(), out);
        out += v.numel();
    }
}

template <class T>
void DataParallel<T>::unpack(Bucket& b, Field f, T scale) const {
    const T* in = b.buffer.data();
    for (std::size_t i : b.params) {
        const TensorView<T>& v = f == Field::grad ? params_[i].grad : params_[i].value;
        T* dst = v.data();
        if (scale == T(1))
            std::copy_n(in, v.numel(), dst);
        else
            for (Index k = 0; k < v.numel(); ++k) dst[k] = in[k] * scale;
        in += v.numel();
    }
}

template <class T>
void DataParallel<T>::broadcast_parameters() {
    if (comm_.size() == 1) return;
    for (Bucket& b : buckets_) {
        if (comm_.rank() == options_.root) pack(b, Field::value);
        comm_.broadcast(b.buffer.data(), b.buffer.size(), options_.root);
        if (comm_.rank() != options_.root) unpack(b, Field::value, T(1));
    }
}

template <class T>
void DataParallel<T>::average_gradients() {
    if (comm_.size() == 1) return;
    const auto start = std::chrono::steady_clock::now();
    // The sum divided by the rank count: the mean of equal shards' mean gradients. A product
    // with 1 / size would round twice for sizes that are not powers of two.
    const T n = static_cast<T>(comm_.size());
    for (Bucket& b : buckets_) {
        pack(b, Field::grad);
        comm_.sum(b.buffer.data(), b.buffer.size());
        for (T& g : b.buffer) g /= n;
        unpack(b, Field::grad, T(1));
        ++stats_.gradient_calls;
        stats_.bytes += b.buffer.size() * sizeof(T);
    }
    stats_.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <class T>
double DataParallel<T>::average(double value) {
    return average(std::vector<double>{value})[0];
}

template <class T>
std::vector<double> DataParallel<T>::average(std::vector<double> values) {
    if (comm_.size() == 1) return values;
    const auto start = std::chrono::steady_clock::now();
    values = comm_.sum(std::move(values));
    for (double& v : values) v /= comm_.size();
    ++stats_.scalar_calls;
    stats_.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return values;
}

template <class T>
bool DataParallel<T>::identical() {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const Parameter<T>& p : params_)
        h = detail::fnv1a(p.value.data(), static_cast<std::size_t>(p.value.numel()) * sizeof(T), h);
    if (comm_.size() == 1) return true;
    ++stats_.scalar_calls;
    return detail::spread(comm_, {h})[0].equal();
}

}  // namespace headwise::distributed
