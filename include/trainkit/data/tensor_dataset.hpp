#pragma once
// In-memory datasets and their batches. A batch of a shuffled epoch is one
// index_select of a slice of the epoch's permutation (no per-sample stacking);
// the permutation depends on (seed, epoch) only, never on the batch size, so
// runs at batch 64 and at 4 x 16 see the same samples in the same order.
// Under several ranks each takes its share of that order (data/shard.hpp).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <cstdint>
#include <iterator>

#include "trainkit/data/batch.hpp"
#include "trainkit/data/shard.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

struct TensorDataset {
  at::Tensor inputs;   ///< [N, ...]
  at::Tensor targets;  ///< [N, ...]
  int64_t size() const { return inputs.size(0); }
  /// A whole batch in one index_select per tensor.
  Batch get_batch(const at::Tensor& indices) const {
    return {inputs.index_select(0, indices), targets.index_select(0, indices)};
  }
  Batch get(int64_t index) const { return {inputs[index], targets[index]}; }
};

class TensorBatches : public Sharded {
 public:
  struct Options {
    int64_t batch_size = 32;
    bool shuffle = true;
    uint64_t seed = 0;
    bool drop_last = false;
  };

  TensorBatches(TensorDataset dataset, const Options& o) : data_(std::move(dataset)), options_(o) {
    trainkit::detail::require_option(o.batch_size >= 1, "data.batch_size", o.batch_size,
                                     "a number >= 1");
    trainkit::detail::require_option(data_.inputs.defined() && data_.targets.defined() &&
                                         data_.inputs.size(0) == data_.targets.size(0),
                                     "data.targets",
                                     data_.targets.defined() ? data_.targets.size(0) : -1,
                                     "as many targets as inputs");
    set_epoch(0);
  }

  /// Selects the epoch whose permutation the next iteration uses.
  void set_epoch(int64_t epoch) {
    epoch_ = epoch;
    order_ = at::Tensor();
    if (!options_.shuffle && world_size() == 1 && skip() == 0) return;  // contiguous slices
    at::Tensor order = at::arange(data_.size(), at::kLong);
    if (options_.shuffle) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(options_.seed * 0x9E3779B97F4A7C15ULL +
                                                          static_cast<uint64_t>(epoch));
      order = at::randperm(data_.size(), gen, at::kLong);
    }
    order_ = shard(order).to(data_.inputs.device());
  }

  /// Takes `rank`'s share of each epoch among `world_size` ranks
  /// (data/shard.hpp); the Trainer sets it. Rewinds to the first batch.
  void set_shard(int64_t rank, int64_t world_size) {
    Sharded::set_shard(rank, world_size);
    order_ = at::Tensor();
    set_epoch(epoch_);
  }

  /// The next iteration starts at batch `index` (exact resume); once.
  void set_start(int64_t index) {
    trainkit::detail::require_option(index >= 0 && index <= size(), "data.start", index,
                                     "a batch index between 0 and size()");
    start_ = index;
  }

  /// The epoch goes on after the first `samples` of its order (taken by
  /// an interrupted run's ranks): this rank's share of the rest.
  void set_start_sample(int64_t samples) {
    set_skip(samples);
    set_epoch(epoch_);
    set_skip(0);
    start_ = 0;
  }

  /// Number of batches per epoch.
  int64_t size() const {
    const int64_t n = order_.defined() ? order_.numel() : data_.size(), b = options_.batch_size;
    return options_.drop_last ? n / b : (n + b - 1) / b;
  }
  int64_t epoch() const { return epoch_; }
  const TensorDataset& dataset() const { return data_; }

  Batch batch(int64_t index) const {
    const int64_t start = index * options_.batch_size;
    const int64_t n = order_.defined() ? order_.numel() : data_.size();
    const int64_t len = std::min(options_.batch_size, n - start);
    if (!order_.defined()) {
      return {data_.inputs.narrow(0, start, len), data_.targets.narrow(0, start, len)};
    }
    const auto idx = order_.narrow(0, start, len);
    return {data_.inputs.index_select(0, idx), data_.targets.index_select(0, idx)};
  }

  class iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(const TensorBatches* owner, int64_t index) : owner_(owner), index_(index) {}
    Batch operator*() const { return owner_->batch(index_); }
    iterator& operator++() {
      ++index_;
      return *this;
    }
    iterator operator++(int) {
      auto copy = *this;
      ++index_;
      return copy;
    }
    bool operator==(const iterator& other) const { return index_ == other.index_; }

   private:
    const TensorBatches* owner_ = nullptr;
    int64_t index_ = 0;
  };

  iterator begin() {
    const int64_t first = start_;
    start_ = 0;
    return {this, first};
  }
  iterator begin() const { return {this, start_}; }
  iterator end() const { return {this, size()}; }

 private:
  TensorDataset data_;
  Options options_;
  int64_t epoch_ = 0;
  int64_t start_ = 0;
  at::Tensor order_;  ///< the epoch's order (undefined: 0..n-1, read as slices)
};

}  // namespace trainkit::data
