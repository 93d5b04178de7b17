#pragma once
// Which trials TPE models as "below" (the best) and which as "above"
// (Optuna 3.1's _get_observation_pairs, _split_observation_pairs and, with
// several objectives, the ranks, hypervolume subset and kernel weights of
// its multi-objective TPE), with constraints ranking feasible trials first.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/tune/pareto.hpp"
#include "trainkit/tune/record.hpp"

namespace trainkit::tune::detail {

/// Where a trial ranks (Optuna's _get_observation_pairs): complete trials
/// first (step -inf), then pruned ones by their last step, later steps
/// first; within a step by signed value, lower first; trials without a
/// result last: running ones (the constant liar) and failed ones, when
/// they count as the worst there is.
struct TpeScore {
  /// -inf complete, -last step pruned, 1 pruned before reporting, +inf no result
  double step = 0;
  double value = 0;  ///< the value, negated when maximizing (+inf for a NaN report)
  /// Several objectives, a complete trial: every value, minimised (as
  /// minimized()); `value` is the first's. Empty with one objective.
  Point values{};
  bool no_result() const { return step == std::numeric_limits<double>::infinity(); }
  bool operator<(const TpeScore& o) const {
    return step < o.step || (step == o.step && value < o.value);
  }
};

/// The complete and pruned trials (and running and failed ones, counted as
/// the worst), chronological: their scores, numbers and the internal values
/// of `names` (nullopt where a trial lacks one).
struct TpeObservations {
  std::vector<TpeScore> scores;
  std::vector<int64_t> numbers;                                      ///< the trials' numbers
  std::map<std::string, std::vector<std::optional<double>>> values;  ///< name -> per trial
  /// Where some trial of the study has constraints: per trial, the sum of
  /// its positive constraint values (0: feasible; +inf without constraints
  /// or a result). Empty otherwise.
  std::vector<double> violations;
  /// The trials with a result: what the startup count and gamma see.
  int64_t finished() const {
    return std::count_if(scores.begin(), scores.end(),
                         [](const TpeScore& s) { return !s.no_result(); });
  }
};

/// Optuna's _get_observation_pairs over the view's complete and pruned
/// trials, its running ones with `constant_liar`, and its failed ones with
/// `failed_as_worst`. With several objectives pruned trials are left out
/// (Optuna's rule: nothing ranks a pruned trial's one objective against
/// complete trials' several).
inline TpeObservations tpe_observations(const StudyView& view,
                                        const std::vector<std::string>& names,
                                        bool constant_liar = false, bool failed_as_worst = false) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const auto directions = view.directions();
  const bool several = directions.size() > 1;
  const double sign = view.direction == Direction::Minimize ? 1.0 : -1.0;
  const bool constrained = std::any_of(view.trials.begin(), view.trials.end(),
                                       [](const FrozenTrial& t) { return t.has_constraints(); });
  TpeObservations out;
  for (const auto& name : names) out.values[name];
  for (const auto& t : view.trials) {
    TpeScore score;
    if (t.state == TrialState::Complete) {
      const auto values = t.objective_values();
      if (values.size() != directions.size()) continue;
      score = {-inf, sign * values[0]};
      if (several) score.values = minimized(values, directions);
    } else if (t.state == TrialState::Pruned) {
      if (several) continue;
      if (const auto step = t.last_step()) {
        const double v = t.intermediate.at(*step);
        score = {-static_cast<double>(*step), std::isnan(v) ? inf : sign * v};
      } else {
        score = {1, 0};  // pruned before any report: last
      }
    } else if ((t.state == TrialState::Running && constant_liar) ||
               (failed_as_worst && t.failed_in_objective())) {
      score = {inf, sign * inf};
    } else {
      continue;
    }
    if (constrained) out.violations.push_back(score.no_result() ? inf : violation_of(t));
    out.scores.push_back(std::move(score));
    out.numbers.push_back(t.number);
    for (auto& [name, values] : out.values) {
      const auto p = t.params.find(name);
      values.push_back(p == t.params.end() ? std::nullopt : std::optional(p->second.internal));
    }
  }
  return out;
}

/// Optuna's EPS in its multi-objective TPE.
inline constexpr double kTpeEps = 1e-12;

/// Whether the scores rank several objectives (some trial has `values`).
inline bool tpe_several(const std::vector<TpeScore>& scores) {
  return std::any_of(scores.begin(), scores.end(),
                     [](const TpeScore& s) { return !s.values.empty(); });
}

/// The reference point of Optuna's multi-objective TPE: beyond the worst of
/// `points` by a tenth of its size in each objective (EPS where that is 0).
inline Point tpe_reference_point(const std::vector<Point>& points) {
  Point worst = points.at(0);
  for (const auto& p : points) {
    for (size_t k = 0; k < p.size(); ++k) worst[k] = std::max(worst[k], p[k]);
  }
  for (auto& w : worst) {
    w = std::max(1.1 * w, 0.9 * w);
    if (w == 0) w = kTpeEps;
  }
  return worst;
}

/// Indices (into `scores`) of the best n_below and of the rest, each in
/// chronological order (Optuna's _split_observation_pairs). With
/// `violations`, feasible trials come first and infeasible ones by their
/// violation. With several objectives, whole non-dominated ranks, the last
/// one cut by hypervolume subset selection; trials without a result (no
/// values to rank) are always above.
inline std::pair<std::vector<size_t>, std::vector<size_t>> tpe_split(
    const std::vector<TpeScore>& scores, int64_t n_below, std::span<const double> violations = {}) {
  const size_t n = scores.size();
  const size_t cut = static_cast<size_t>(std::clamp<int64_t>(n_below, 0, static_cast<int64_t>(n)));
  std::vector<size_t> below, above;
  const auto sorted = [&] {
    std::sort(below.begin(), below.end());
    std::sort(above.begin(), above.end());
    return std::pair{below, above};
  };
  // the first `cut` trials in the (stable) order of `less` below, the rest above
  const auto split_by = [&](auto less) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), less);
    below.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(cut));
    above.assign(order.begin() + static_cast<std::ptrdiff_t>(cut), order.end());
    return sorted();
  };
  if (!violations.empty()) {
    trainkit::detail::require_option(violations.size() == n, "violations",
                                     int64_t(violations.size()), "one per score");
    const auto feasible_count =
        static_cast<size_t>(std::count(violations.begin(), violations.end(), 0.0));
    if (cut >= feasible_count)  // every feasible trial is below
      return split_by([&](size_t a, size_t b) { return violations[a] < violations[b]; });
    // more feasible trials than below holds: split those, the infeasible above
    std::vector<size_t> feasible;
    std::vector<TpeScore> feasible_scores;
    for (size_t i = 0; i < n; ++i) {
      if (violations[i] == 0) {
        feasible.push_back(i), feasible_scores.push_back(scores[i]);
      } else {
        above.push_back(i);
      }
    }
    const auto [b, a] = tpe_split(feasible_scores, n_below);
    for (const size_t i : b) below.push_back(feasible[i]);
    for (const size_t i : a) above.push_back(feasible[i]);
    return sorted();
  }
  if (!tpe_several(scores))
    return split_by([&](size_t a, size_t b) { return scores[a] < scores[b]; });
  std::vector<size_t> ranked;  // the trials with values
  std::vector<Point> points;
  for (size_t i = 0; i < n; ++i) {
    if (scores[i].values.empty()) {
      above.push_back(i);
    } else {
      ranked.push_back(i), points.push_back(scores[i].values);
    }
  }
  const auto ranks = nondominated_ranks(points);
  const size_t wanted = std::min(cut, ranked.size());
  for (int64_t r = 0; below.size() < wanted; ++r) {
    std::vector<size_t> members;  // into ranked
    for (size_t i = 0; i < ranked.size(); ++i) {
      if (ranks[i] == r) members.push_back(i);
    }
    if (below.size() + members.size() <= wanted) {
      for (const size_t i : members) below.push_back(ranked[i]);
      continue;
    }
    std::vector<Point> rank_points;  // the boundary rank: the subset adding most volume
    for (const size_t i : members) rank_points.push_back(points[i]);
    std::vector<bool> chosen(members.size(), false);
    for (const size_t k :
         hssp(rank_points, wanted - below.size(), tpe_reference_point(rank_points)))
      chosen[k] = true;
    for (size_t k = 0; k < members.size(); ++k) {
      if (chosen[k]) below.push_back(ranked[members[k]]);
    }
  }
  std::vector<bool> is_below(n, false);
  for (const size_t i : below) is_below[i] = true;
  for (const size_t i : ranked) {
    if (!is_below[i]) above.push_back(i);
  }
  return sorted();
}

/// The weights of the "below" kernels with several objectives (Optuna
/// 3.1's _calculate_weights_below_for_multi_objective): each feasible
/// trial's hypervolume contribution among the feasible below trials, over
/// the largest; an infeasible one weighs EPS. `below` as tpe_split gives it.
inline std::vector<double> tpe_below_weights(const std::vector<TpeScore>& scores,
                                             const std::vector<size_t>& below,
                                             std::span<const double> violations = {}) {
  std::vector<double> weights(below.size(), kTpeEps);
  std::vector<size_t> feasible;  // into below
  std::vector<Point> points;
  for (size_t k = 0; k < below.size(); ++k) {
    if (violations.empty() || violations[below[k]] == 0)
      feasible.push_back(k), points.push_back(scores[below[k]].values);
  }
  if (points.size() == 1) weights[feasible[0]] = 1;
  if (points.size() < 2) return weights;
  const auto reference = tpe_reference_point(points);
  const double volume = hypervolume(points, reference);
  std::vector<double> contribution(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    auto rest = points;
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
    contribution[i] = volume - hypervolume(rest, reference) + kTpeEps;
  }
  const double top = *std::max_element(contribution.begin(), contribution.end());
  for (size_t i = 0; i < points.size(); ++i) {
    // an infinite value makes the volumes infinite: every kernel then weighs 1
    const double w = contribution[i] / top;
    weights[feasible[i]] = std::isfinite(w) ? std::clamp(w, 0.0, 1.0) : 1.0;
  }
  return weights;
}

}  // namespace trainkit::tune::detail
