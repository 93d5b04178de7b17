#pragma once
// Several objectives at once: Pareto domination (with constraints, as
// NSGA-II's constrained domination), non-dominated ranks, NSGA-II's crowding
// distance and the exact hypervolume. Pure functions over points whose
// objectives are all minimised: minimized() turns a trial's values and the
// study's directions into that form. Each follows Optuna's rules where
// Optuna has one (tests/tune/pareto_test.cpp holds them to Optuna 3.1).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/tune/record.hpp"

namespace trainkit::tune {

using Point = std::vector<double>;

/// `values` with every objective minimised: maximised ones negated.
inline Point minimized(std::span<const double> values, std::span<const Direction> directions) {
  trainkit::detail::require_option(values.size() == directions.size(), "values",
                                   int64_t(values.size()), "one value per objective of the study");
  Point out(values.begin(), values.end());
  for (size_t k = 0; k < out.size(); ++k) {
    if (directions[k] == Direction::Maximize) out[k] = -out[k];
  }
  return out;
}

/// Whether `a` dominates `b`: no worse in any objective and better in one.
inline bool dominates(std::span<const double> a, std::span<const double> b) {
  bool better = false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k] > b[k]) return false;
    better = better || a[k] < b[k];
  }
  return better;
}

/// How far a trial is from feasible: the sum of its positive constraint
/// values (Optuna's convention: a constraint holds when its value is <= 0).
inline double violation(std::span<const double> constraints) {
  double sum = 0;
  for (const double c : constraints) {
    if (std::isnan(c))
      throw Error("trainkit: a constraint value is NaN; accepted: numbers (<= 0 when it holds)");
    if (c > 0) sum += c;
  }
  return sum;
}

/// A trial's violation in a study where some trials have constraints
/// (Optuna's rule): that of its constraint values, +inf when it has none,
/// so it ranks behind every trial that has them.
inline double violation_of(const FrozenTrial& t) {
  const auto c = t.constraints();
  return c ? violation(*c) : std::numeric_limits<double>::infinity();
}

/// NSGA-II's constrained domination (Deb): a feasible point dominates an
/// infeasible one, of two infeasible ones the smaller violation dominates,
/// and two feasible ones compare by dominates().
inline bool constrained_dominates(std::span<const double> a, double violation_a,
                                  std::span<const double> b, double violation_b) {
  if (violation_a == 0 && violation_b == 0) return dominates(a, b);
  if (violation_a == 0 || violation_b == 0) return violation_a == 0;
  return violation_a < violation_b;
}

/// Each point's non-dominated rank: 0 for the Pareto front, 1 for the front
/// of the rest, and so on (NSGA-II's fast non-dominated sort). With
/// `violations` (one per point), by constrained domination.
inline std::vector<int64_t> nondominated_ranks(const std::vector<Point>& points,
                                               std::span<const double> violations = {}) {
  const size_t n = points.size();
  trainkit::detail::require_option(violations.empty() || violations.size() == n, "violations",
                                   int64_t(violations.size()), "none, or one per point");
  const auto beats = [&](size_t i, size_t j) {
    return violations.empty()
               ? dominates(points[i], points[j])
               : constrained_dominates(points[i], violations[i], points[j], violations[j]);
  };
  std::vector<std::vector<size_t>> beaten(n);  // the points each one dominates
  std::vector<int64_t> above(n, 0);            // how many dominate it
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (beats(i, j)) {
        beaten[i].push_back(j), ++above[j];
      } else if (beats(j, i)) {
        beaten[j].push_back(i), ++above[i];
      }
    }
  }
  std::vector<int64_t> rank(n, -1);
  std::vector<size_t> front;
  for (size_t i = 0; i < n; ++i) {
    if (above[i] == 0) front.push_back(i);
  }
  for (int64_t r = 0; !front.empty(); ++r) {
    std::vector<size_t> next;
    for (const size_t i : front) {
      rank[i] = r;
      for (const size_t j : beaten[i]) {
        if (--above[j] == 0) next.push_back(j);
      }
    }
    front = std::move(next);
  }
  return rank;
}

/// The indices of the points no other point dominates, in index order
/// (equal points are all on the front, as in Optuna).
inline std::vector<size_t> pareto_front(const std::vector<Point>& points) {
  std::vector<size_t> front;
  for (size_t i = 0; i < points.size(); ++i) {
    const bool dominated = std::any_of(points.begin(), points.end(), [&](const Point& other) {
      return dominates(other, points[i]);
    });
    if (!dominated) front.push_back(i);
  }
  return front;
}

/// NSGA-II's crowding distance of each point within its front: per
/// objective, the gap between its two neighbours over the objective's finite
/// range, summed. An objective all points share adds nothing; the ends'
/// missing neighbours are -inf and +inf (an infinite distance), and
/// inf - inf counts as 0 (Optuna's rules). Where values tie, the points are
/// taken in index order (Optuna's order there is its sort's).
inline std::vector<double> crowding_distance(const std::vector<Point>& points) {
  const size_t n = points.size();
  std::vector<double> distance(n, 0.0);
  if (n == 0) return distance;
  constexpr double inf = std::numeric_limits<double>::infinity();
  std::vector<size_t> order(n);
  for (size_t k = 0; k < points[0].size(); ++k) {
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return points[a][k] < points[b][k]; });
    const auto value = [&](size_t i) { return points[order[i]][k]; };
    if (value(0) == value(n - 1)) continue;
    std::vector<double> vs{-inf};  // the sorted values between -inf and +inf
    for (size_t i = 0; i < n; ++i) vs.push_back(value(i));
    vs.push_back(inf);
    const double low = *std::find_if(vs.begin(), vs.end(), [](double v) { return v != -inf; });
    const double high = *std::find_if(vs.rbegin(), vs.rend(), [](double v) { return v != inf; });
    double width = high - low;
    if (!(width > 0)) width = 1.0;  // 0, or -inf when every value is infinite
    for (size_t i = 0; i < n; ++i) {
      const double gap = vs[i] == vs[i + 2] ? 0.0 : vs[i + 2] - vs[i];
      distance[order[i]] += gap / width;
    }
  }
  return distance;
}

namespace detail {

inline double box_volume(const Point& p, const Point& reference) {
  double v = 1;
  for (size_t k = 0; k < p.size(); ++k) v *= reference[k] - p[k];
  return v;
}

/// Exact hypervolume of points that all lie inside the reference box
/// (While, Bradstreet and Barone's WFG; a sweep in two dimensions).
inline double hypervolume_inside(std::vector<Point> points, const Point& reference) {
  if (points.empty()) return 0;
  std::sort(points.begin(), points.end());  // by the first objective, then the next
  if (reference.size() == 2) {
    double volume = 0, ceiling = reference[1];
    for (const auto& p : points) {
      if (p[1] >= ceiling) continue;  // covered by a point before it
      volume += (reference[0] - p[0]) * (ceiling - p[1]);
      ceiling = p[1];
    }
    return volume;
  }
  double volume = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    // what point i adds beyond the points after it: its box, less the
    // volume of their parts inside its box
    std::vector<Point> limited;
    for (size_t j = i + 1; j < points.size(); ++j) {
      Point q(points[j].size());
      for (size_t k = 0; k < q.size(); ++k) q[k] = std::max(points[j][k], points[i][k]);
      limited.push_back(std::move(q));
    }
    std::vector<Point> front;
    for (const size_t j : pareto_front(limited)) front.push_back(std::move(limited[j]));
    volume += box_volume(points[i], reference) - hypervolume_inside(std::move(front), reference);
  }
  return volume;
}

}  // namespace detail

/// The volume that the points dominate inside the box up to `reference`
/// (all objectives minimised). Points not better than the reference in
/// every objective add nothing.
inline double hypervolume(const std::vector<Point>& points, const Point& reference) {
  std::vector<Point> inside;
  for (const auto& p : points) {
    trainkit::detail::require_option(p.size() == reference.size(), "hypervolume point",
                                     int64_t(p.size()),
                                     "as many objectives as the reference point has");
    bool below = true;
    for (size_t k = 0; k < p.size(); ++k) below = below && p[k] < reference[k];
    if (below) inside.push_back(p);
  }
  std::vector<Point> front;
  for (const size_t i : pareto_front(inside)) front.push_back(inside[i]);
  return detail::hypervolume_inside(std::move(front), reference);
}

namespace detail {

/// Greedy hypervolume subset selection (Optuna 3.1's _solve_hssp): `size`
/// of `points` (their indices, in the order taken), each adding the most
/// hypervolume to those taken before it; within 1 - 1/e of the best subset.
inline std::vector<size_t> hssp(const std::vector<Point>& points, size_t size,
                                const Point& reference) {
  std::vector<double> gain(points.size());
  for (size_t i = 0; i < points.size(); ++i) gain[i] = hypervolume({points[i]}, reference);
  std::vector<Point> taken;
  std::vector<size_t> out;
  double volume = 0;
  while (out.size() < std::min(size, points.size())) {
    const size_t best =
        static_cast<size_t>(std::max_element(gain.begin(), gain.end()) - gain.begin());
    gain[best] = -1;  // taken
    for (size_t j = 0; j < points.size(); ++j) {
      if (gain[j] == -1) continue;
      // what j shares with the new point and no point taken before
      Point shared(points[j].size());
      for (size_t k = 0; k < shared.size(); ++k)
        shared[k] = std::max(points[best][k], points[j][k]);
      auto with = taken;
      with.push_back(std::move(shared));
      gain[j] -= hypervolume(with, reference) - volume;
    }
    taken.push_back(points[best]);
    out.push_back(best);
    volume = hypervolume(taken, reference);
  }
  return out;
}

}  // namespace detail

/// The best trials of a study of several objectives: the complete ones
/// whose constraints hold that no other such trial dominates (the Pareto
/// front), in number order. Equal values are all kept, as in Optuna.
inline std::vector<const FrozenTrial*> best_trials(const StudyView& view) {
  std::vector<const FrozenTrial*> candidates;
  std::vector<Point> points;
  const auto directions = view.directions();
  for (const auto& t : view.trials) {
    const auto values = t.objective_values();
    if (t.state != TrialState::Complete || values.size() != directions.size() || !t.feasible())
      continue;
    candidates.push_back(&t);
    points.push_back(minimized(values, directions));
  }
  std::vector<const FrozenTrial*> out;
  for (const size_t i : pareto_front(points)) out.push_back(candidates[i]);
  return out;
}

}  // namespace trainkit::tune
