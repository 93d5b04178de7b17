#pragma once
// Quasi-random search: trial n takes the n-th point of a Halton sequence
// (one prime base per parameter), randomly shifted per dimension by the
// seed (Cranley-Patterson rotation). Points fill the space more evenly than
// independent draws, which is what a small budget needs. Like Optuna's
// QMCSampler, the first trial is drawn at random and the lowest-numbered
// finished trial fixes the space (with parallel workers it can change once,
// when trial 0 finishes after trial 1); parameters outside it are drawn at
// random too.
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include "trainkit/tune/detail/rng.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/samplers/random.hpp"

namespace trainkit::tune {
namespace detail {

/// The radical inverse of `index` in base `base`: the Halton coordinate.
inline double radical_inverse(uint64_t index, uint64_t base) {
  double inv = 1.0 / static_cast<double>(base), f = inv, x = 0;
  for (; index > 0; index /= base, f *= inv) x += f * static_cast<double>(index % base);
  return x;
}

}  // namespace detail

namespace sampler {

struct HaltonOptions {
  uint64_t seed = 0;
  bool scramble = true;  ///< shift each dimension by a seeded offset
};

class Halton {
 public:
  static constexpr bool multi_objective = true;  ///< it never reads the trials' values
  explicit Halton(HaltonOptions o = {}) : options_(o) {}

  std::map<std::string, double> sample_relative(const StudyView& view,
                                                const FrozenTrial& trial) const {
    static constexpr std::array<uint64_t, 32> primes = {
        2,  3,  5,  7,  11, 13, 17, 19, 23, 29,  31,  37,  41,  43,  47,  53,
        59, 61, 67, 71, 73, 79, 83, 89, 97, 101, 103, 107, 109, 113, 127, 131};
    std::map<std::string, double> out;
    size_t dim = 0;
    for (const auto& [name, dist] : first_trial_space(view)) {
      if (dim == primes.size()) break;  // the rest: independent draws
      double u = detail::radical_inverse(static_cast<uint64_t>(trial.number) + 1, primes[dim++]);
      if (options_.scramble) u = std::fmod(u + detail::Rng(options_.seed, -1, name).uniform(), 1.0);
      out[name] = detail::from_unit(dist, u);
    }
    return out;
  }
  double sample(const StudyView&, const FrozenTrial& trial, const std::string& name,
                const Distribution& dist) const {
    return detail::from_unit(dist, detail::Rng(options_.seed, trial.number, name).uniform());
  }

 private:
  // The parameters of the study's first trial, as Optuna's QMCSampler takes them.
  static SearchSpace first_trial_space(const StudyView& view) {
    for (const auto& t : view.trials) {
      if (t.state != TrialState::Complete && t.state != TrialState::Pruned) continue;
      SearchSpace space;
      for (const auto& [name, p] : t.params) space.emplace(name, p.distribution);
      return space;
    }
    return {};
  }
  HaltonOptions options_;
};

}  // namespace sampler
}  // namespace trainkit::tune
