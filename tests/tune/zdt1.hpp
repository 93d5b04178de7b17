#pragma once
// ZDT1 (Zitzler, Deb and Thiele, 2000) as a study: two minimised objectives
// over variables in [0, 1], its front f2 = 1 - sqrt(f1) where the other
// variables are 0. The multi-objective samplers' tests search it.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <trainkit/tune/pareto.hpp>
#include <trainkit/tune/study.hpp>

namespace zdt1 {

using namespace trainkit::tune;

inline const std::vector<Direction> directions{Direction::Minimize, Direction::Minimize};

/// ZDT1's two values at the trial's `n` variables.
inline std::vector<double> objective(Trial& t, int n) {
  std::vector<double> x;
  for (int i = 0; i < n; ++i)
    x.push_back(t.suggest_float(std::string("x").append(std::to_string(i)), 0, 1));
  double g = 0;
  for (int i = 1; i < n; ++i) g += x[size_t(i)];
  g = 1 + 9 * g / (n - 1);
  return {x[0], g * (1 - std::sqrt(x[0] / g))};
}

/// `trials` trials of ZDT1 over 6 variables; with `constrained`, a trial is
/// feasible where its first objective is at most 0.3.
template <class S>
std::vector<FrozenTrial> search(S sampler, int trials, bool constrained = false) {
  Study study(std::make_shared<InMemoryStorage>(), {.directions = directions}, std::move(sampler));
  study.optimize(
      [&](Trial& t) {
        auto values = objective(t, 6);
        if (constrained) t.set_constraints({values[0] - 0.3});
        return values;
      },
      {.n_trials = trials, .log = nullptr});
  return study.trials();
}

/// The hypervolume the trials cover, up to the reference point (1.1, 11).
inline double hypervolume_of(const std::vector<FrozenTrial>& trials) {
  std::vector<Point> points;
  for (const auto& t : trials) points.push_back(t.values);
  return hypervolume(points, {1.1, 11});
}

}  // namespace zdt1
