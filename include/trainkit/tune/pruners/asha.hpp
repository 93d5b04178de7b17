#pragma once
// Asynchronous successive halving (Li et al. 2018), with Optuna's rules
// (SuccessiveHalvingPruner): rung k sits at step min_resource * rf^(s + k);
// a trial reaching a rung records its value there and goes on only if that
// value is in the best 1/rf of every value recorded at the rung so far. No
// trial waits for another, so it suits parallel workers.
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
#include "trainkit/tune/system_attrs.hpp"

namespace trainkit::tune::pruner {

struct AshaOptions {
  /// Steps before the first rung; nullopt: estimated, as Optuna's "auto",
  /// as max(1, last step of the longest complete trial / 100).
  std::optional<int64_t> min_resource{};
  int64_t reduction_factor = 4;         ///< keep the best 1/rf at each rung
  int64_t min_early_stopping_rate = 0;  ///< skip this many rungs
  int64_t bootstrap_count = 0;          ///< prune until a rung has more values than this
};

class Asha {
 public:
  explicit Asha(AshaOptions o = {}) : o_(o) {
    using trainkit::detail::require_option;
    require_option(!o.min_resource || *o.min_resource >= 1, "min_resource",
                   o.min_resource.value_or(0), ">= 1, or nullopt (estimated)");
    require_option(o.reduction_factor >= 2, "reduction_factor", o.reduction_factor, ">= 2");
    require_option(o.min_early_stopping_rate >= 0, "min_early_stopping_rate",
                   o.min_early_stopping_rate, ">= 0");
    require_option(o.bootstrap_count >= 0, "bootstrap_count", o.bootstrap_count, ">= 0");
    require_option(o.bootstrap_count == 0 || o.min_resource, "bootstrap_count", o.bootstrap_count,
                   "0 when min_resource is estimated (nullopt)");
  }

  /// The system attribute holding a trial's value at rung k.
  static std::string rung_key(int64_t k) { return system_attr::completed_rung(k); }

  std::optional<std::string> prune(const StudyView& study, FrozenTrial& trial) {
    const auto step = trial.last_step();
    if (!step) return {};
    int64_t rung = 0;
    while (trial.system_attrs.contains(rung_key(rung))) ++rung;
    const double value = trial.intermediate.at(*step);
    if (!min_resource_) min_resource_ = o_.min_resource ? o_.min_resource : estimate(study);
    if (!min_resource_) return {};
    for (;; ++rung) {
      const int64_t rung_step =
          scaled(*min_resource_, o_.reduction_factor, o_.min_early_stopping_rate + rung);
      if (*step < rung_step) return {};
      if (std::isnan(value)) return "the value at step " + std::to_string(*step) + " is NaN";
      const auto key = rung_key(rung);
      std::vector<double> competing;
      for (const auto& t : study.trials) {
        if (t.id == trial.id) continue;  // its own value is added below
        if (const auto it = t.system_attrs.find(key); it != t.system_attrs.end())
          competing.push_back(it->get<double>());
      }
      trial.system_attrs[key] = value;
      competing.push_back(value);
      if (static_cast<int64_t>(competing.size()) <= o_.bootstrap_count) {
        return "rung " + std::to_string(rung) + " has only " + std::to_string(competing.size()) +
               " values (bootstrap_count " + std::to_string(o_.bootstrap_count) + ")";
      }
      std::sort(competing.begin(), competing.end());
      auto idx = static_cast<int64_t>(competing.size()) / o_.reduction_factor - 1;
      idx = std::max<int64_t>(idx, 0);
      const bool minimize = study.direction == Direction::Minimize;
      const double bar = minimize ? competing[static_cast<size_t>(idx)]
                                  : competing[competing.size() - 1 - static_cast<size_t>(idx)];
      if (minimize ? value > bar : value < bar) {
        std::ostringstream why;
        why << "value " << value << " at step " << *step << " is not in the best 1/"
            << o_.reduction_factor << " of the " << competing.size() << " values at rung " << rung
            << " (step " << rung_step << "; the bar is " << bar << ")";
        return why.str();
      }
    }
  }

 private:
  // m * b^e, saturated at the largest step (a rung no trial reaches).
  static int64_t scaled(int64_t m, int64_t b, int64_t e) {
    for (; e > 0; --e) {
      if (m > std::numeric_limits<int64_t>::max() / b) return std::numeric_limits<int64_t>::max();
      m *= b;
    }
    return m;
  }
  static std::optional<int64_t> estimate(const StudyView& study) {
    std::optional<int64_t> last;
    for (const auto* t : study.with_state(TrialState::Complete)) {
      if (const auto s = t->last_step()) last = std::max(last.value_or(0), *s);
    }
    if (!last) return std::nullopt;
    return std::max<int64_t>(*last / 100, 1);
  }

  AshaOptions o_;
  std::optional<int64_t> min_resource_;  // estimated once, as Optuna does
};

}  // namespace trainkit::tune::pruner
