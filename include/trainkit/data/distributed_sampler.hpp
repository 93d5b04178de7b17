#pragma once
// data::DistributedSampler: this rank's shard of the data, as
// torch.utils.data.DistributedSampler draws it: the same permutation on every
// rank (seed + epoch), split by data::shard_of. Every library sampler takes
// its shard the same way; this one also takes the rank in its options, and
// drop_last, as PyTorch's.
#include <torch/types.h>

#include "trainkit/data/seed.hpp"
#include "trainkit/data/shard.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

class DistributedSampler {
 public:
  struct Options {
    int64_t size = 0;
    int64_t rank = 0;
    int64_t world_size = 1;
    bool shuffle = true;
    uint64_t seed = 0;
    bool drop_last = false;
  };
  explicit DistributedSampler(const Options& o) : options_(o) {
    trainkit::detail::require_option(o.size >= 0, "sampler.size", o.size,
                                     "a number of samples >= 0");
    set_shard(o.rank, o.world_size);
  }

  /// Takes the shard of `rank` among `world_size` processes (data::Loader
  /// forwards the trainer's process group here).
  void set_shard(int64_t rank, int64_t world_size) {
    using trainkit::detail::require_option;
    require_option(world_size >= 1, "sampler.world_size", world_size, "a number >= 1");
    require_option(rank >= 0 && rank < world_size, "sampler.rank", rank, "0 <= rank < world_size");
    options_.rank = rank;
    options_.world_size = world_size;
  }

  /// Samples this rank sees per epoch.
  int64_t shard_size() const {
    const int64_t n = options_.size, w = options_.world_size;
    if (options_.drop_last && n % w != 0) return (n - w + w - 1) / w;  // ceil((n - w) / w)
    return (n + w - 1) / w;
  }

  at::Tensor indices(int64_t epoch) const {
    const int64_t n = options_.size;
    const auto order =
        options_.shuffle
            ? at::randperm(n, generator(options_.seed + static_cast<uint64_t>(epoch)), at::kLong)
            : at::arange(n, at::kLong);
    return shard_of(order, options_.rank, options_.world_size, options_.drop_last, skip_);
  }
  /// The orders drawn from now on skip their first `samples` (Sharded::set_skip).
  void set_skip(int64_t samples) {
    trainkit::detail::require_option(samples >= 0, "sampler.skip", samples, "a count >= 0");
    skip_ = samples;
  }

 private:
  Options options_;
  int64_t skip_ = 0;
};

}  // namespace trainkit::data
