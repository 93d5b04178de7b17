#pragma once
// data::CurriculumSampler: curriculum learning (Bengio et al. 2009), easy
// samples first, with competence-based pacing (Platanios et al. 2019). The
// samples are ranked by a difficulty score the user gives (a loss from a
// reference model, a length, a label); at epoch e the sampler draws from the
// easiest fraction c(e) of them, c growing from `start` to 1 over
// `epochs_to_full` epochs:
//   square-root pacing  c(e) = min(1, sqrt(e (1 - start^2) / T + start^2))
//   linear pacing       c(e) = min(1, e (1 - start) / T + start)
// Epoch lengths grow; the loader's size() is exact for the current epoch.
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "trainkit/data/seed.hpp"
#include "trainkit/data/shard.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

/// Under several ranks it shards itself (data::Sharded).
class CurriculumSampler : public Sharded {
 public:
  struct Options {
    std::vector<double> difficulty{};  ///< one score per sample; lower is easier
    double start = 0.2;                ///< the fraction of the data of epoch 0
    int64_t epochs_to_full = 5;        ///< T: from this epoch on, all the data
    bool sqrt_pacing = true;           ///< false: linear pacing
    bool shuffle = true;               ///< false: easiest first within each epoch
    uint64_t seed = 0;
  };

  explicit CurriculumSampler(const Options& o) : options_(o) {
    using trainkit::detail::require_option;
    require_option(!o.difficulty.empty(), "sampler.difficulty", "empty",
                   "a difficulty score for each sample (at least one)");
    for (const double d : o.difficulty) {
      require_option(std::isfinite(d), "sampler.difficulty", d, "finite scores");
    }
    require_option(o.start > 0 && o.start <= 1, "sampler.start", o.start, "0 < start <= 1");
    require_option(o.epochs_to_full >= 1, "sampler.epochs_to_full", o.epochs_to_full,
                   "a number >= 1");
    // easiest first; ties keep the samples' order, so the ranking is reproducible
    order_ = std::get<1>(at::tensor(o.difficulty, at::kDouble).sort(/*stable=*/true, 0, false));
  }

  /// The fraction of the data epoch `epoch` draws from.
  double competence(int64_t epoch) const {
    const double t = double(epoch) / double(options_.epochs_to_full), c0 = options_.start;
    const double c =
        options_.sqrt_pacing ? std::sqrt(t * (1 - c0 * c0) + c0 * c0) : t * (1 - c0) + c0;
    return std::min(1.0, c);
  }

  /// The samples of `epoch`: the easiest ceil(c(epoch) n), shuffled by (seed, epoch).
  at::Tensor indices(int64_t epoch) const {
    const int64_t n = order_.numel();
    const auto count =
        std::clamp<int64_t>(int64_t(std::ceil(competence(epoch) * double(n) - 1e-9)), 1, n);
    const auto easiest = order_.slice(0, 0, count);
    if (!options_.shuffle) return shard(easiest.clone());
    auto gen = generator(options_.seed + static_cast<uint64_t>(epoch));
    return shard(easiest.index_select(0, at::randperm(count, gen, at::kLong)));
  }

  /// Every sample's index, easiest first.
  const at::Tensor& ranking() const { return order_; }

 private:
  Options options_;
  at::Tensor order_;
};

}  // namespace trainkit::data
