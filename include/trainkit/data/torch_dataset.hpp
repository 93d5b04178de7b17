#pragma once
// data::TorchDataset<D>: any LibTorch `torch::data` dataset (get(i) returning
// an Example with data and target, and a known size) as a per-sample dataset
// for data::Loader, which stacks its samples into batches. Workers call get()
// concurrently: the wrapped dataset must allow that.
#include <torch/data/datasets/base.h>
#include <torch/types.h>

#include <utility>

#include "trainkit/data/batch.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

template <class D>
class TorchDataset {
 public:
  explicit TorchDataset(D dataset) : dataset_(std::move(dataset)) {
    trainkit::detail::require_option(dataset_.size().has_value(), "dataset.size", "unknown",
                                     "a torch::data dataset whose size() is known");
  }
  int64_t size() const { return static_cast<int64_t>(*dataset_.size()); }
  Batch get(int64_t index) {
    auto example = dataset_.get(static_cast<size_t>(index));
    return {example.data, example.target};
  }

 private:
  D dataset_;
};

}  // namespace trainkit::data
