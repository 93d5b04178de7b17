#pragma once
// Independent uniform draws (uniform in log space for log parameters): the
// baseline every other sampler must beat.
#include <cmath>
#include <cstdint>
#include <string>

#include "trainkit/tune/detail/rng.hpp"
#include "trainkit/tune/record.hpp"

namespace trainkit::tune {

namespace detail {

/// Maps u in [0, 1) to a value of `dist` (the inverse of a uniform CDF on
/// the distribution's scale, then snapped to its grid).
inline double from_unit(const Distribution& dist, double u) {
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) {
    if (f->log) {
      return std::clamp(std::exp(std::log(f->low) + u * (std::log(f->high) - std::log(f->low))),
                        f->low, f->high);
    }
    if (f->step) {  // each grid point equally likely
      const double n = static_cast<double>(*cardinality(dist));
      return snap(dist, f->low + std::floor(u * n) * *f->step);
    }
    return f->low + u * (f->high - f->low);
  }
  if (const auto* i = std::get_if<IntDistribution>(&dist)) {
    if (i->log) {  // uniform in log over [low - 0.5, high + 0.5], as Optuna does
      const double lo = std::log(static_cast<double>(i->low) - 0.5);
      const double hi = std::log(static_cast<double>(i->high) + 0.5);
      return snap(dist, std::exp(lo + u * (hi - lo)));
    }
    const double n = static_cast<double>(*cardinality(dist));
    return snap(dist,
                static_cast<double>(i->low) + std::floor(u * n) * static_cast<double>(i->step));
  }
  const double n = static_cast<double>(*cardinality(dist));
  return snap(dist, std::floor(u * n));
}

}  // namespace detail

namespace sampler {

struct RandomOptions {
  uint64_t seed = 0;
};

class Random {
 public:
  static constexpr bool multi_objective = true;  ///< it never reads the trials' values
  explicit Random(RandomOptions o = {}) : options_(o) {}
  double sample(const StudyView&, const FrozenTrial& trial, const std::string& name,
                const Distribution& dist) const {
    detail::Rng rng(options_.seed, trial.number, name);
    return detail::from_unit(dist, rng.uniform());
  }

 private:
  RandomOptions options_;
};

}  // namespace sampler
}  // namespace trainkit::tune
