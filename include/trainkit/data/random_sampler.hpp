#pragma once
// data::RandomSampler: a permutation of 0..n-1 drawn from seed + epoch (the
// seeding of torch.utils.data.DistributedSampler), the same on every run.
#include <torch/types.h>

#include "trainkit/data/seed.hpp"
#include "trainkit/data/shard.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

/// Under several ranks it shards itself (data::Sharded).
class RandomSampler : public Sharded {
 public:
  struct Options {
    int64_t size = 0;
    uint64_t seed = 0;
  };
  explicit RandomSampler(const Options& o) : options_(o) {
    trainkit::detail::require_option(o.size >= 0, "sampler.size", o.size,
                                     "a number of samples >= 0");
  }
  at::Tensor indices(int64_t epoch) const {
    auto gen = generator(options_.seed + static_cast<uint64_t>(epoch));
    return shard(at::randperm(options_.size, gen, at::kLong));
  }

 private:
  Options options_;
};

}  // namespace trainkit::data
