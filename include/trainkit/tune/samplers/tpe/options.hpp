#pragma once
// TPE's settings (sampler::TpeOptions) and Optuna's default gamma and
// weights, which the Parzen estimator and the sampler both read.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace trainkit::tune {
namespace detail {

/// Optuna's default_gamma: the size of "below" among n trials.
inline int64_t tpe_default_gamma(int64_t n) {
  // 0.1 * n as a double, as Optuna computes it (ceil(0.1 * 30) is 4).
  return std::min<int64_t>(static_cast<int64_t>(std::ceil(0.1 * static_cast<double>(n))), 25);
}

/// Optuna's default_weights: the latest 25 trials weigh 1, older ones
/// ramp up from 1/n (oldest first).
inline std::vector<double> tpe_default_weights(int64_t n) {
  std::vector<double> w(static_cast<size_t>(std::max<int64_t>(n, 0)), 1.0);
  if (n < 25) return w;
  const int64_t m = n - 25;  // np.linspace(1 / n, 1, m), written out as numpy does
  const double start = 1.0 / static_cast<double>(n);
  if (m == 1) w[0] = start;
  if (m > 1) {
    const double step = (1.0 - start) / static_cast<double>(m - 1);
    for (int64_t k = 0; k < m - 1; ++k)
      w[static_cast<size_t>(k)] = static_cast<double>(k) * step + start;
    w[static_cast<size_t>(m - 1)] = 1.0;
  }
  return w;
}

}  // namespace detail

namespace sampler {

/// TPE's settings; the defaults are Optuna 3.1's but for constant_liar and
/// failed_as_worst, which change nothing while no trial runs in parallel
/// and none fails.
struct TpeOptions {
  uint64_t seed = 0;              ///< with the trial number and name, seeds each draw
  int64_t n_startup_trials = 10;  ///< random draws until this many trials completed or pruned
  int64_t n_ei_candidates = 24;   ///< draws from l(x) among which the best l/g is taken
  bool multivariate = false;      ///< model the intersection search space jointly
  /// With multivariate: model each group of parameters that appear together
  /// (group_decomposed_search_space) jointly, so a conditional space's
  /// branch parameters are modelled too, not drawn at random (Optuna's
  /// `group`). A group is modelled from the trials that have it.
  bool group = false;
  double prior_weight = 1.0;        ///< the prior kernel's weight against an observation's
  bool consider_prior = true;       ///< a wide kernel (or uniform categorical) in each model
  bool consider_magic_clip = true;  ///< kernels no narrower than range / min(100, n + 1)
  bool consider_endpoints = false;  ///< the outermost kernels' width counts the bounds
  /// The size of "below" among n complete and pruned trials.
  std::function<int64_t(int64_t)> gamma = detail::tpe_default_gamma;
  /// Running trials count as the worst result (Optuna's constant_liar), so
  /// parallel workers do not propose the same region at once. On by default,
  /// where Optuna's is off: one worker alone sees no running trial but the
  /// one being sampled, which has drawn nothing in the snapshot taken at its
  /// start, so nothing changes for it.
  bool constant_liar = true;
  /// Trials their objective failed count as the worst result at the
  /// parameters they drew (not those failed for a lost worker), so the
  /// sampler leaves a region where the objective fails. Optuna ignores
  /// them, and then keeps proposing where nothing has succeeded: with a
  /// failing region, 50 of 60 trials failed, against 13 (docs/benchmarks.md).
  bool failed_as_worst = true;
  /// The kernels' weights for n observations, oldest first.
  std::function<std::vector<double>(int64_t)> weights = detail::tpe_default_weights;
  /// Optuna 3.1's log-density, which leaves out the continuous kernels' 1/sigma
  /// (changed in Optuna 3.5, optuna#5109); false: the true density. On by
  /// default: it found better optima on every benchmark function
  /// (docs/benchmarks.md), and it is what Optuna 3.1 users get.
  bool legacy_log_pdf = true;
};

}  // namespace sampler
}  // namespace trainkit::tune
