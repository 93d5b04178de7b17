#pragma once
// data::RepeatFactorSampler: repeat-factor sampling for long-tailed data (LVIS,
// Gupta et al. 2019). A category seen in a fraction f of the samples gets
// r_c = max(1, sqrt(t / f)); a sample repeats r_i = max over its categories
// of r_c times, rounded stochastically each epoch (floor(r_i) plus one more
// with probability frac(r_i)); the repeated list is then shuffled. Epoch
// lengths vary; the loader's size() is exact for the current epoch.
#include <torch/types.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "trainkit/data/seed.hpp"
#include "trainkit/data/shard.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

/// Under several ranks it shards itself (data::Sharded).
class RepeatFactorSampler : public Sharded {
 public:
  struct Options {
    std::vector<std::vector<int64_t>> categories{};  ///< the categories in each sample
    double threshold = 1e-3;                         ///< t
    uint64_t seed = 0;
  };

  explicit RepeatFactorSampler(const Options& o) : seed_(o.seed) {
    trainkit::detail::require_option(o.threshold > 0.0 && o.threshold <= 1.0, "sampler.threshold",
                                     o.threshold, "0 < threshold <= 1");
    trainkit::detail::require_option(!o.categories.empty(), "sampler.categories", "empty",
                                     "the categories of each sample (at least one sample)");
    std::map<int64_t, int64_t> images_with;
    for (const auto& cats : o.categories) {
      for (int64_t c : std::set<int64_t>(cats.begin(), cats.end())) ++images_with[c];
    }
    const double n = double(o.categories.size());
    std::vector<double> factors;
    for (const auto& cats : o.categories) {
      double r = 1.0;
      for (int64_t c : cats) r = std::max(r, std::sqrt(o.threshold / (double(images_with[c]) / n)));
      factors.push_back(r);
    }
    factors_ = at::tensor(factors, at::kDouble);
  }

  /// r_i for every sample.
  const at::Tensor& repeat_factors() const { return factors_; }

  at::Tensor indices(int64_t epoch) const {
    auto gen = generator(seed_ + static_cast<uint64_t>(epoch));
    const auto whole = factors_.floor();
    const auto extra = at::rand(factors_.sizes(), gen, at::kDouble).lt(factors_ - whole);
    const auto repeats = (whole + extra.to(at::kDouble)).to(at::kLong);
    const auto expanded = at::repeat_interleave(repeats);  // sample i, repeats[i] times
    return shard(expanded.index_select(0, at::randperm(expanded.numel(), gen, at::kLong)));
  }

 private:
  uint64_t seed_;
  at::Tensor factors_;
};

}  // namespace trainkit::data
