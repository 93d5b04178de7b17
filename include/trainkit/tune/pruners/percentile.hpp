#pragma once
// Percentile and median pruning, with Optuna's rules (PercentilePruner,
// MedianPruner): after `n_startup_trials` complete trials and `n_warmup_steps`
// steps, at the first report of every `interval_steps`, a trial stops when
// its best value so far is worse than the given percentile of the complete
// trials' values at the same step.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/tune/record.hpp"

namespace trainkit::tune {
namespace detail {

/// numpy.nanpercentile with linear interpolation; NaN when no value is a number.
inline double nan_percentile(std::vector<double> values, double q) {
  std::erase_if(values, [](double v) { return std::isnan(v); });
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double rank = q / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const auto hi = std::min(lo + 1, values.size() - 1);
  const double t = rank - static_cast<double>(lo);
  const double a = values[lo], b = values[hi];
  return t >= 0.5 ? b - (b - a) * (1 - t) : a + (b - a) * t;  // numpy's _lerp
}

}  // namespace detail

namespace pruner {

struct PercentileOptions {
  double percentile = 50;        ///< in [0, 100]: prune below this fraction of the field
  int64_t n_startup_trials = 5;  ///< complete trials before any pruning
  int64_t n_warmup_steps = 0;    ///< a trial's steps before it can be pruned
  int64_t interval_steps = 1;    ///< check at most once per this many steps
  int64_t n_min_trials = 1;      ///< complete trials with a value at the step
};

class Percentile {
 public:
  explicit Percentile(PercentileOptions o = {}) : o_(o) {
    using trainkit::detail::require_option;
    require_option(o.percentile >= 0 && o.percentile <= 100, "percentile", o.percentile,
                   "a number in [0, 100]");
    require_option(o.n_startup_trials >= 0, "n_startup_trials", o.n_startup_trials, ">= 0");
    require_option(o.n_warmup_steps >= 0, "n_warmup_steps", o.n_warmup_steps, ">= 0");
    require_option(o.interval_steps >= 1, "interval_steps", o.interval_steps, ">= 1");
    require_option(o.n_min_trials >= 1, "n_min_trials", o.n_min_trials, ">= 1");
  }

  std::optional<std::string> prune(const StudyView& study, FrozenTrial& trial) const {
    const auto complete = study.with_state(TrialState::Complete);
    if (complete.empty() || static_cast<int64_t>(complete.size()) < o_.n_startup_trials) return {};
    const auto step = trial.last_step();
    if (!step || *step < o_.n_warmup_steps || !first_in_interval(*step, trial)) return {};

    const bool minimize = study.direction == Direction::Minimize;
    double best = std::numeric_limits<double>::quiet_NaN();
    for (const auto& [s, v] : trial.intermediate) {
      if (!std::isnan(v) && (std::isnan(best) || study.better(v, best))) best = v;
    }
    if (std::isnan(best)) return "every reported value is NaN";

    std::vector<double> field;
    for (const auto* t : complete) {
      if (const auto it = t->intermediate.find(*step); it != t->intermediate.end()) {
        field.push_back(it->second);
      }
    }
    if (static_cast<int64_t>(field.size()) < o_.n_min_trials) return {};
    const double q = minimize ? o_.percentile : 100 - o_.percentile;
    const double p = detail::nan_percentile(field, q);
    if (std::isnan(p) || !study.better(p, best)) return {};
    std::ostringstream why;
    why << "best value " << best << " by step " << *step << " is worse than the "
        << (o_.percentile == 50 ? std::string("median")
                                : "percentile-" + std::to_string(int(o_.percentile)))
        << " " << p << " of " << field.size() << " complete trials at that step";
    return why.str();
  }

 private:
  // Whether `step` is the first report in its interval (Optuna's rule).
  bool first_in_interval(int64_t step, const FrozenTrial& trial) const {
    const int64_t lower =
        (step - o_.n_warmup_steps) / o_.interval_steps * o_.interval_steps + o_.n_warmup_steps;
    int64_t second_last = -1;
    for (const auto& [s, v] : trial.intermediate) {
      if (s > second_last && s != step) second_last = s;
    }
    return second_last < lower;
  }

  PercentileOptions o_;
};

struct MedianOptions {
  int64_t n_startup_trials = 5;
  int64_t n_warmup_steps = 0;
  int64_t interval_steps = 1;
  int64_t n_min_trials = 1;
};

/// Stops a trial whose best value so far is worse than the median of the
/// complete trials at the same step.
class Median : public Percentile {
 public:
  explicit Median(MedianOptions o = {})
      : Percentile({50, o.n_startup_trials, o.n_warmup_steps, o.interval_steps, o.n_min_trials}) {}
};

}  // namespace pruner
}  // namespace trainkit::tune
