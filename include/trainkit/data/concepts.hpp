#pragma once
// What data::Loader reads: datasets and samplers (also reachable from
// trainkit/concepts.hpp, with every other contract).
#include <torch/types.h>

#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "trainkit/data/batch.hpp"
#include "trainkit/data/batch_traits.hpp"

namespace trainkit::data {

/// A dataset that gathers a whole batch at once (in-memory tensors); the
/// batch is any type trainkit can see tensors in (data::Batch, a struct...).
template <class D>
concept BatchDataset = requires(D& d, const at::Tensor& indices) {
  d.get_batch(indices);
  { d.size() } -> std::convertible_to<int64_t>;
}
&&has_tensors<std::remove_cvref_t<decltype(std::declval<D&>().get_batch(at::Tensor()))>>;
/// A dataset of single samples, combined into batches by the loader's collate.
template <class D>
concept SampleDataset = requires(D& d, int64_t index) {
  d.get(index);
  { d.size() } -> std::convertible_to<int64_t>;
}
&&has_tensors<std::remove_cvref_t<decltype(std::declval<D&>().get(int64_t{}))>>;
/// The indices of one epoch, a function of the epoch alone.
template <class S>
concept Sampler = requires(const S& s, int64_t epoch) {
  { s.indices(epoch) } -> std::convertible_to<at::Tensor>;
};

}  // namespace trainkit::data
