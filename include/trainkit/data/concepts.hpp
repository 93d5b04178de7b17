#pragma once
// What data::Loader reads: datasets and samplers (also reachable from
// trainkit/concepts.hpp, with every other contract).
#include <torch/types.h>

#include <concepts>
#include <cstdint>

#include "trainkit/data/batch.hpp"

namespace trainkit::data {

/// A dataset that gathers a whole batch at once (in-memory tensors).
template <class D>
concept BatchDataset = requires(D& d, const at::Tensor& indices) {
  { d.get_batch(indices) } -> std::convertible_to<Batch>;
  { d.size() } -> std::convertible_to<int64_t>;
};
/// A dataset of single samples, stacked into batches by the loader.
template <class D>
concept SampleDataset = requires(D& d, int64_t index) {
  { d.get(index) } -> std::convertible_to<Batch>;
  { d.size() } -> std::convertible_to<int64_t>;
};
/// The indices of one epoch, a function of the epoch alone.
template <class S>
concept Sampler = requires(const S& s, int64_t epoch) {
  { s.indices(epoch) } -> std::convertible_to<at::Tensor>;
};

}  // namespace trainkit::data
