#pragma once
// What the model-based samplers (TPE, the GP) share: which parameters they
// model jointly, and the scale and support each numerical one is modelled
// on, as Optuna's samplers do.
#include <cmath>
#include <map>
#include <string>
#include <variant>

#include "trainkit/tune/record.hpp"
#include "trainkit/tune/space.hpp"

namespace trainkit::tune::detail {

/// Whether a numerical distribution is modelled on the log scale.
inline bool modelled_on_log_scale(const Distribution& dist) {
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) return f->log;
  if (const auto* i = std::get_if<IntDistribution>(&dist)) return i->log;
  return false;
}

/// A numerical parameter on the model's scale: the log of its values where
/// its distribution is log, and a support that gives each grid point an
/// equal cell (half a step past each end; a log integer's half a unit
/// before the log).
struct ModelAxis {
  bool log = false;
  double q = 0;  ///< a grid's step on the model's scale; 0: continuous (log integers too)
  double low = 0, high = 0;

  ModelAxis() = default;
  explicit ModelAxis(const Distribution& numerical) : log(modelled_on_log_scale(numerical)) {
    if (const auto* f = std::get_if<FloatDistribution>(&numerical)) {
      if (f->log) {
        low = std::log(f->low), high = std::log(f->high);
      } else if (f->step) {
        q = *f->step;
        low = f->low - 0.5 * q, high = highest(numerical) + 0.5 * q;
      } else {
        low = f->low, high = f->high;
      }
      return;
    }
    const auto& i = std::get<IntDistribution>(numerical);
    if (i.log) {  // step 1 (validate)
      low = std::log(static_cast<double>(i.low) - 0.5), high = std::log(highest(numerical) + 0.5);
    } else {
      q = static_cast<double>(i.step);
      low = static_cast<double>(i.low) - 0.5 * q, high = highest(numerical) + 0.5 * q;
    }
  }
  /// An internal value on the model's scale.
  double to_model(double internal) const { return log ? std::log(internal) : internal; }
};

/// A relative sample: `sample_jointly(space)` over the intersection search
/// space, or with `group` over each group of parameters that appear
/// together (group_decomposed_search_space), merged; parameters of a single
/// value are left out of each space (nothing to model).
template <class SampleJointly>
std::map<std::string, double> sample_over_search_spaces(const StudyView& view, bool group,
                                                        bool include_pruned,
                                                        const SampleJointly& sample_jointly) {
  if (!group) return sample_jointly(varying(intersection_search_space(view, include_pruned)));
  std::map<std::string, double> out;
  for (const auto& space : group_decomposed_search_space(view, include_pruned))
    out.merge(sample_jointly(varying(space)));
  return out;
}

}  // namespace trainkit::tune::detail
