#pragma once
// data::WeightedSampler: `num_samples` indices drawn with probability
// proportional to `weights`, with or without replacement
// (torch.utils.data.WeightedRandomSampler), from seed + epoch.
#include <torch/types.h>

#include "trainkit/data/seed.hpp"
#include "trainkit/data/shard.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

/// Under several ranks it shards itself (data::Sharded).
class WeightedSampler : public Sharded {
 public:
  struct Options {
    at::Tensor weights{};     ///< one non-negative weight per sample
    int64_t num_samples = 0;  ///< draws per epoch; 0: as many as weights
    bool replacement = true;
    uint64_t seed = 0;
  };
  explicit WeightedSampler(Options o) : options_(std::move(o)) {
    using trainkit::detail::require_option;
    const auto& w = options_.weights;
    require_option(w.defined() && w.dim() == 1 && w.numel() > 0, "sampler.weights",
                   w.defined() ? w.dim() : -1, "a 1-d tensor with one weight per sample");
    weights_ = w.to(at::kDouble).contiguous();
    require_option(weights_.ge(0).all().item<bool>() && weights_.sum().item<double>() > 0,
                   "sampler.weights", "negative or all zero", "non-negative weights, not all zero");
    if (options_.num_samples == 0) options_.num_samples = w.numel();
    require_option(options_.num_samples > 0, "sampler.num_samples", options_.num_samples,
                   "a number of draws > 0");
    require_option(
        options_.replacement || options_.num_samples <= weights_.gt(0).sum().item<int64_t>(),
        "sampler.num_samples", options_.num_samples,
        "at most the number of non-zero weights when drawing without replacement");
  }
  at::Tensor indices(int64_t epoch) const {
    auto gen = generator(options_.seed + static_cast<uint64_t>(epoch));
    return shard(at::multinomial(weights_, options_.num_samples, options_.replacement, gen));
  }

 private:
  Options options_;
  at::Tensor weights_;
};

}  // namespace trainkit::data
