#pragma once
// A study history planted for the samplers' tests of running and failed
// trials (tpe_test.cpp, gp_test.cpp).
#include <cstdint>
#include <optional>
#include <vector>

#include <trainkit/tune/record.hpp>

namespace tk_tune_test {

using namespace trainkit::tune;

/// (x - 1)^2 at n complete trials over [-5, 5], the k-th at
/// -5 + 10 ((k * stride) mod n) / (n - 1); then three trials at x = 0.9, 1.0,
/// 1.1 (next to the optimum) in state `others`; then the trial being
/// sampled, running with nothing drawn.
inline std::vector<FrozenTrial> history_with_three_at_the_optimum(int64_t n, int64_t stride,
                                                                  TrialState others) {
  const FloatDistribution dist{-5, 5, false, std::nullopt};
  std::vector<FrozenTrial> trials;
  for (int64_t k = 0; k < n; ++k) {
    FrozenTrial t;
    t.id = t.number = k;
    t.state = TrialState::Complete;
    const double x = -5 + 10.0 * double((k * stride) % n) / double(n - 1);
    t.params["x"] = Param{dist, x};
    t.value = (x - 1) * (x - 1);
    trials.push_back(t);
  }
  for (int64_t k = 0; k < 3; ++k) {
    FrozenTrial t;
    t.id = t.number = n + k;
    t.state = others;
    t.params["x"] = Param{dist, 1.0 + 0.1 * double(k - 1)};
    trials.push_back(t);
  }
  FrozenTrial me;
  me.id = me.number = n + 3;
  me.state = TrialState::Running;
  trials.push_back(me);
  return trials;
}

}  // namespace tk_tune_test
