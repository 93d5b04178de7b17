#pragma once
// Collate functions: how data::Loader builds one batch from a dataset's
// samples. A collate is called as `collate(std::vector<Sample> samples,
// const std::vector<int64_t>& indices)` (the samples' dataset indices, for
// messages) or `collate(std::vector<Sample> samples)`, and returns the
// batch. Each sees the samples' tensors through data/batch_traits.hpp, so
// one collate serves data::Batch, structs, tuples and maps alike.
#include <torch/types.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "trainkit/data/batch.hpp"
#include "trainkit/data/batch_traits.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

namespace detail {
/// What a message calls tensor `k` of a sample.
template <class S>
std::string tensor_name(size_t k) {
  if constexpr (std::is_same_v<S, Batch>) return k == 0 ? "input" : "target";
  return "tensor " + std::to_string(k);
}

/// The samples' tensors by position: columns[k][i] is tensor k of sample i.
/// Every sample must have as many tensors as the first, each of its dtype
/// and, beyond dimension 0 when `ragged_dim0`, of its shape.
template <class S>
std::vector<std::vector<at::Tensor>> tensor_columns(const std::vector<S>& samples,
                                                    const std::vector<int64_t>& indices,
                                                    bool ragged_dim0) {
  if (samples.empty()) throw Error("trainkit: collate: a batch of no samples");
  std::vector<std::vector<at::Tensor>> columns;
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto tensors = tensors_of(samples[i]);
    if (i == 0) columns.resize(tensors.size());
    if (tensors.size() != columns.size()) {
      throw Error("trainkit: dataset sample " + std::to_string(indices[i]) + " has " +
                  std::to_string(tensors.size()) + " tensors, but sample " +
                  std::to_string(indices[0]) + " in the same batch has " +
                  std::to_string(columns.size()));
    }
    for (size_t k = 0; k < tensors.size(); ++k) {
      const auto& first = i == 0 ? tensors[k] : columns[k][0];
      const auto& t = tensors[k];
      const bool same_rank = t.dim() == first.dim();
      const bool shape_ok = ragged_dim0 && same_rank && t.dim() > 0
                                ? t.sizes().slice(1) == first.sizes().slice(1)
                                : t.sizes() == first.sizes();
      if (!shape_ok || t.scalar_type() != first.scalar_type()) {
        std::ostringstream msg;
        msg << "trainkit: dataset sample " << indices[i] << " has " << tensor_name<S>(k)
            << " of shape " << t.sizes() << " and dtype " << t.scalar_type() << ", but sample "
            << indices[0] << " in the same batch has shape " << first.sizes() << " and dtype "
            << first.scalar_type();
        if (ragged_dim0) msg << " (only dimension 0 may differ)";
        throw Error(msg.str());
      }
      columns[k].push_back(t);
    }
  }
  return columns;
}
}  // namespace detail

/// The default collate: each tensor of the samples stacked along a new
/// dimension 0, into a batch of the samples' own type. Every sample's
/// tensor must have the first sample's shape and dtype.
struct Stack {
  template <class S>
  S operator()(std::vector<S> samples, const std::vector<int64_t>& indices) const {
    static_assert(!carries_values<S>,
                  "data::Stack cannot combine samples' values other than tensors (lengths, ids): "
                  "give the loader a collate that does");
    const auto columns = detail::tensor_columns(samples, indices, /*ragged_dim0=*/false);
    S batch = std::move(samples[0]);
    size_t k = 0;
    for_each_tensor(batch, [&](at::Tensor& t) { t = at::stack(columns[k++]); });
    return batch;
  }
};

/// A batch of variable-length samples, padded: `batch` holds each tensor
/// padded along dimension 0 to the batch's longest and stacked; `mask` is
/// (B, T) bool, true at the real positions of the first tensor; `lengths`
/// (B) int64 its lengths.
template <class S>
struct Padded {
  S batch;
  at::Tensor mask;
  at::Tensor lengths;
};

/// The padding collate for sequences: pads each tensor of the samples
/// along dimension 0 to the batch's longest (other dimensions must agree),
/// with `padding_values[k]` for the k-th tensor in visiting order where
/// given (e.g. {0, -100}: token 0 for the inputs, the loss's ignore_index
/// for the targets), else `padding_value`. Lengths and mask follow the
/// first tensor. With `length` > 0 every batch is padded to that length
/// instead: the same shapes each step, which captured steps (CUDA graphs)
/// need; a longer sample is an error naming its index.
struct PadSequences {
  double padding_value = 0;
  std::vector<double> padding_values{};
  int64_t length = 0;

  template <class S>
  Padded<S> operator()(std::vector<S> samples, const std::vector<int64_t>& indices) const {
    static_assert(!carries_values<S>,
                  "data::PadSequences cannot combine samples' values other than tensors: the "
                  "lengths come in Padded::lengths");
    trainkit::detail::require_option(length >= 0, "PadSequences.length", length,
                                     "a length >= 0 (0: the batch's longest)");
    const auto columns = detail::tensor_columns(samples, indices, /*ragged_dim0=*/true);
    Padded<S> out{std::move(samples[0]), {}, {}};
    const auto n = static_cast<int64_t>(columns[0].size());
    std::vector<int64_t> lengths(n);
    for (int64_t i = 0; i < n; ++i) {
      trainkit::detail::require_option(columns[0][i].dim() > 0, "PadSequences (first tensor)",
                                       columns[0][i].dim(), "a tensor with a dimension 0");
      lengths[i] = columns[0][i].size(0);
      if (length > 0 && lengths[i] > length) {
        throw Error("trainkit: PadSequences.length is " + std::to_string(length) + ": sample " +
                    std::to_string(indices[i]) + " has " + std::to_string(lengths[i]) +
                    " positions; accepted: samples no longer than the length (or length 0, the "
                    "batch's longest)");
      }
    }
    size_t k = 0;
    for_each_tensor(out.batch, [&](at::Tensor& t) {
      const auto& column = columns[k];
      const double pad = k < padding_values.size() ? padding_values[k] : padding_value;
      ++k;
      if (column[0].dim() == 0) {
        t = at::stack(column);
        return;
      }
      int64_t longest = length;
      for (const auto& x : column) longest = std::max(longest, x.size(0));
      std::vector<int64_t> shape{n, longest};
      for (int64_t d = 1; d < column[0].dim(); ++d) shape.push_back(column[0].size(d));
      t = at::full(shape, pad, column[0].options());
      for (int64_t i = 0; i < n; ++i) t[i].narrow(0, 0, column[i].size(0)).copy_(column[i]);
    });
    out.lengths = at::tensor(lengths, at::kLong);
    const int64_t longest = std::max(length, *std::max_element(lengths.begin(), lengths.end()));
    out.mask = at::arange(longest, at::kLong).unsqueeze(0).lt(out.lengths.unsqueeze(1));
    return out;
  }
};

}  // namespace trainkit::data
