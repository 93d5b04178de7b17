#pragma once
// TPE (tree-structured Parzen estimator), as Optuna 3.1's TPESampler: the
// finished trials are split into the best gamma(n) ("below") and the rest
// ("above"), each set is modelled by a Parzen estimator (a mixture of
// truncated normals, or of categorical distributions, one kernel per trial
// plus a wide prior), and of n_ei_candidates draws from the "below" model
// the one with the highest l(x) / g(x) is taken. With several objectives
// (Optuna's multi-objective TPE) "below" is whole non-dominated ranks, the
// last cut by greedy hypervolume subset selection, and its kernels weigh by
// hypervolume contribution. Everything is recomputed from the StudyView on
// each call: the sampler keeps no state. Its parts, after Optuna's
// _tpe: tpe/options.hpp (the settings), tpe/truncnorm.hpp, tpe/parzen_estimator.hpp
// (the model) and tpe/split.hpp (below and above).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/tune/detail/rng.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/samplers/detail/model_space.hpp"
#include "trainkit/tune/samplers/random.hpp"
#include "trainkit/tune/samplers/tpe/options.hpp"
#include "trainkit/tune/samplers/tpe/parzen_estimator.hpp"
#include "trainkit/tune/samplers/tpe/split.hpp"

namespace trainkit::tune::sampler {

/// Tree-structured Parzen estimator (Optuna 3.1's TPESampler), for one
/// objective or several, with constraints (Trial::set_constraints) where
/// trials have them: feasible trials rank first.
class Tpe {
 public:
  static constexpr bool multi_objective = true;

  explicit Tpe(TpeOptions o = {}) : options_(std::move(o)) {
    using trainkit::detail::require_option;
    require_option(options_.n_startup_trials >= 0, "TpeOptions.n_startup_trials",
                   options_.n_startup_trials, ">= 0");
    require_option(options_.n_ei_candidates >= 1, "TpeOptions.n_ei_candidates",
                   options_.n_ei_candidates, ">= 1");
    require_option(options_.prior_weight > 0 && std::isfinite(options_.prior_weight),
                   "TpeOptions.prior_weight", options_.prior_weight, "a positive number");
    require_option(static_cast<bool>(options_.gamma), "TpeOptions.gamma", std::string("empty"),
                   "a function");
    require_option(static_cast<bool>(options_.weights), "TpeOptions.weights", std::string("empty"),
                   "a function");
    require_option(!options_.group || options_.multivariate, "TpeOptions.group", true,
                   "false unless multivariate is true (groups are modelled jointly)");
  }

  /// One parameter: random during startup, then from the univariate models
  /// of this parameter's values in the below and above trials.
  double sample(const StudyView& view, const FrozenTrial& trial, const std::string& name,
                const Distribution& dist) const {
    if (const auto v = single_value(dist)) return *v;
    detail::Rng rng(options_.seed, trial.number, name);
    const auto obs =
        detail::tpe_observations(view, {name}, options_.constant_liar, options_.failed_as_worst);
    const auto n = obs.finished();
    if (n < options_.n_startup_trials) return detail::from_unit(dist, rng.uniform());
    const auto [below, above] = detail::tpe_split(obs.scores, options_.gamma(n), obs.violations);
    const auto& values = obs.values.at(name);
    // A parameter whose range changed may have values a log scale cannot take.
    const bool log = detail::modelled_on_log_scale(dist);
    const auto usable = [&](size_t k) {
      // a running or failed trial's value counts only in the current range
      return values[k] && (!log || *values[k] > 0) &&
             (!obs.scores[k].no_result() || contains(dist, *values[k]));
    };
    auto pick = [&](const std::vector<size_t>& idx) {
      detail::ParzenEstimator::Values out{{name, {}}};
      for (auto k : idx) {
        if (usable(k)) out[name].push_back(*values[k]);
      }
      return out;
    };
    return choose(rng, pick(below), pick(above), {{name, dist}}, below_weights(obs, below, usable))
        .at(name);
  }

  /// The intersection search space (or with `group`, each group of it),
  /// jointly (multivariate mode after startup); empty otherwise, so every
  /// parameter goes to `sample`.
  std::map<std::string, double> sample_relative(const StudyView& view,
                                                const FrozenTrial& trial) const {
    if (!options_.multivariate) return {};
    return detail::sample_over_search_spaces(
        view, options_.group, /*include_pruned=*/true,
        [&](const SearchSpace& space) { return sample_jointly(view, trial, space); });
  }

  /// The settings this sampler was made with.
  const TpeOptions& options() const { return options_; }

 private:
  // The parameters of `space` from one joint model of the trials that have
  // them all (Optuna's _sample_relative: the below/above split ranks every
  // trial, then keeps those).
  std::map<std::string, double> sample_jointly(const StudyView& view, const FrozenTrial& trial,
                                               const SearchSpace& space) const {
    if (space.empty()) return {};
    std::vector<std::string> names;
    for (const auto& [name, dist] : space) names.push_back(name);
    const auto obs =
        detail::tpe_observations(view, names, options_.constant_liar, options_.failed_as_worst);
    const auto n = obs.finished();
    if (n < options_.n_startup_trials) return {};
    const auto [below, above] = detail::tpe_split(obs.scores, options_.gamma(n), obs.violations);
    // Every complete and pruned trial has every parameter of `space`, in
    // range; a running or failed one counts once it has them all, in range.
    const auto usable = [&](size_t k) {
      return std::all_of(names.begin(), names.end(), [&](const std::string& name) {
        const auto& v = obs.values.at(name)[k];
        return v && contains(space.at(name), *v);  // drawn under another range: left out
      });
    };
    auto pick = [&](const std::vector<size_t>& idx) {
      detail::ParzenEstimator::Values out;
      for (const auto& name : names) out[name];
      for (auto k : idx) {
        if (!usable(k)) continue;
        for (const auto& name : names) out[name].push_back(*obs.values.at(name)[k]);
      }
      return out;
    };
    // One stream per group (named by its first parameter); the intersection
    // keeps the stream it always had.
    detail::Rng rng(options_.seed, trial.number,
                    options_.group ? "\x1ftpe.relative:" + names.front() : "\x1ftpe.relative");
    return choose(rng, pick(below), pick(above), space, below_weights(obs, below, usable));
  }

  // With several objectives: the below kernels' weights (hypervolume
  // contributions), for the trials `usable` keeps; none with one objective
  // (the `weights` option's).
  template <class Usable>
  static std::optional<std::vector<double>> below_weights(const detail::TpeObservations& obs,
                                                          const std::vector<size_t>& below,
                                                          const Usable& usable) {
    if (!detail::tpe_several(obs.scores)) return std::nullopt;
    const auto all = detail::tpe_below_weights(obs.scores, below, obs.violations);
    std::vector<double> out;
    for (size_t k = 0; k < below.size(); ++k) {
      if (usable(below[k])) out.push_back(all[k]);
    }
    return out;
  }

  // Of n_ei_candidates draws from l (below), the one with the highest l/g;
  // `below_weights`, if given, weigh l's kernels instead of the option's.
  std::map<std::string, double> choose(detail::Rng& rng,
                                       const detail::ParzenEstimator::Values& below,
                                       const detail::ParzenEstimator::Values& above,
                                       const SearchSpace& space,
                                       std::optional<std::vector<double>> below_weights) const {
    const detail::ParzenEstimator l(below, space, options_, std::move(below_weights)),
        g(above, space, options_);
    const auto candidates = l.sample(rng, static_cast<size_t>(options_.n_ei_candidates));
    const auto log_l = l.log_pdf(candidates), log_g = g.log_pdf(candidates);
    size_t best = 0;
    for (size_t k = 1; k < log_l.size(); ++k) {
      if (log_l[k] - log_g[k] > log_l[best] - log_g[best]) best = k;
    }
    std::map<std::string, double> out;
    for (const auto& [name, xs] : candidates) out[name] = xs[best];
    return out;
  }

  TpeOptions options_;
};

}  // namespace trainkit::tune::sampler
