#pragma once
// data::SequentialSampler: 0, 1, ..., n-1 every epoch.
#include <torch/types.h>

#include "trainkit/data/shard.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

/// Under several ranks it shards itself (data::Sharded).
class SequentialSampler : public Sharded {
 public:
  explicit SequentialSampler(int64_t size) : size_(size) {
    trainkit::detail::require_option(size >= 0, "sampler.size", size, "a number of samples >= 0");
  }
  at::Tensor indices(int64_t /*epoch*/) const { return shard(at::arange(size_, at::kLong)); }

 private:
  int64_t size_;
};

}  // namespace trainkit::data
