#pragma once
// data::SequentialSampler: 0, 1, ..., n-1 every epoch.
#include <torch/types.h>

#include "trainkit/data/shard.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

class SequentialSampler {
 public:
  explicit SequentialSampler(int64_t size) : size_(size) {
    trainkit::detail::require_option(size >= 0, "sampler.size", size, "a number of samples >= 0");
  }
  /// Takes `rank`'s share of each epoch among `world_size` ranks
  /// (data/shard.hpp); the Trainer sets it through the loader.
  void set_shard(int64_t rank, int64_t world_size) { shard_.set(rank, world_size); }
  at::Tensor indices(int64_t /*epoch*/) const { return shard_.of(at::arange(size_, at::kLong)); }

 private:
  Shard shard_;
  int64_t size_;
};

}  // namespace trainkit::data
