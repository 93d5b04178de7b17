#pragma once
// NSGA-II (Deb et al., 2002), as Optuna's NSGAIISampler runs it: the first
// `population_size` complete trials are drawn at random; after that each
// trial is a child of the elite of the generations so far, its two parents
// picked by binary tournaments on (constrained) domination, its parameters
// taken from either parent (uniform crossover) with probability
// `crossover_prob`, else copied from one parent, then each parameter redrawn
// at random with probability `mutation_prob` (1 / parameters by default).
// The elite is the best `population_size` of a generation and the elite
// before it: whole non-dominated ranks, the last one cut by crowding
// distance.
//
// Generations are the complete trials in number order, `population_size` at
// a time, recomputed from the study at each trial (Optuna writes each
// trial's generation as it starts; the two agree for one worker), so the
// sampler keeps no state and any number of workers share a study.
#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/tune/detail/rng.hpp"
#include "trainkit/tune/pareto.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/samplers/random.hpp"

namespace trainkit::tune::sampler {

struct NsgaIIOptions {
  int64_t population_size = 50;
  /// Each parameter redrawn at random with this probability (unset: 1 / the
  /// number of parameters).
  std::optional<double> mutation_prob{};
  double crossover_prob = 0.9;  ///< a child of two parents, else a copy of one
  /// Per parameter, the chance of the first parent's value (else the
  /// second's), as Optuna's swapping_prob.
  double swapping_prob = 0.5;
  uint64_t seed = 0;
};

class NsgaII {
 public:
  static constexpr bool multi_objective = true;

  explicit NsgaII(NsgaIIOptions o = {}) : options_(o), random_({.seed = o.seed}) {
    using trainkit::detail::require_option;
    require_option(o.population_size >= 2, "NsgaIIOptions.population_size", o.population_size,
                   "at least 2 (two parents)");
    const auto probability = [](std::optional<double> p) { return !p || (*p >= 0 && *p <= 1); };
    require_option(probability(o.mutation_prob), "NsgaIIOptions.mutation_prob",
                   o.mutation_prob.value_or(0), "a probability in [0, 1]");
    require_option(probability(o.crossover_prob), "NsgaIIOptions.crossover_prob", o.crossover_prob,
                   "a probability in [0, 1]");
    require_option(probability(o.swapping_prob), "NsgaIIOptions.swapping_prob", o.swapping_prob,
                   "a probability in [0, 1]");
  }

  /// The child's parameters that are not mutated (name -> internal value);
  /// the rest, and the whole first generation, go to sample().
  std::map<std::string, double> sample_relative(const StudyView& view,
                                                const FrozenTrial& trial) const {
    const auto parents = parent_population(view);
    if (parents.empty()) return {};
    const auto space = varying(intersection_search_space(view));
    detail::Rng rng(options_.seed, trial.number, "nsga2");
    std::map<std::string, double> child;
    if (rng.uniform() < options_.crossover_prob) {
      const auto* first = tournament(parents, nullptr, rng);
      const auto* second = tournament(parents, first, rng);
      for (const auto& [name, dist] : space) {  // Optuna's mask: the second parent at u >= p
        const auto* from = rng.uniform() >= options_.swapping_prob ? second : first;
        child[name] = from->params.at(name).internal;
      }
    } else {
      const auto* parent = parents[size_t(rng.index(int64_t(parents.size())))].trial;
      for (const auto& [name, dist] : space) child[name] = parent->params.at(name).internal;
    }
    const double mutation =
        options_.mutation_prob.value_or(1.0 / std::max<double>(1.0, double(child.size())));
    std::erase_if(child, [&](const auto&) { return rng.uniform() < mutation; });
    return child;
  }

  /// At random: the first generation, mutated parameters and parameters
  /// outside the space every trial shares.
  double sample(const StudyView& view, const FrozenTrial& trial, const std::string& name,
                const Distribution& dist) const {
    return random_.sample(view, trial, name, dist);
  }

 private:
  struct Member {
    const FrozenTrial* trial;
    Point point;       ///< every objective minimised
    double violation;  ///< 0: feasible
  };

  /// The elite after the last whole generation; empty during the first.
  std::vector<Member> parent_population(const StudyView& view) const {
    const auto directions = view.directions();
    std::vector<Member> complete;
    bool constrained = false;
    for (const auto& t : view.trials) {
      const auto values = t.objective_values();
      if (t.state != TrialState::Complete || values.size() != directions.size()) continue;
      constrained = constrained || t.has_constraints();
      complete.push_back({&t, minimized(values, directions), violation_of(t)});
    }
    if (!constrained) {
      for (auto& m : complete) m.violation = 0;
    }
    const size_t n = size_t(options_.population_size);
    std::vector<Member> elite;
    for (size_t start = 0; start + n <= complete.size(); start += n) {
      std::vector<Member> pool(complete.begin() + long(start), complete.begin() + long(start + n));
      pool.insert(pool.end(), elite.begin(), elite.end());
      elite = select_elite(std::move(pool));
    }
    return elite;
  }

  /// The best population_size members: whole non-dominated ranks in order,
  /// the rank that does not fit cut by crowding distance (largest first).
  std::vector<Member> select_elite(std::vector<Member> pool) const {
    std::vector<Point> points;
    std::vector<double> violations;
    for (const auto& m : pool) points.push_back(m.point), violations.push_back(m.violation);
    const auto ranks = nondominated_ranks(points, violations);
    std::vector<Member> elite;
    const size_t n = size_t(options_.population_size);
    for (int64_t r = 0; elite.size() < n; ++r) {
      std::vector<Member> rank;
      for (size_t i = 0; i < pool.size(); ++i) {
        if (ranks[i] == r) rank.push_back(pool[i]);
      }
      if (elite.size() + rank.size() > n) {
        std::vector<Point> rank_points;
        for (const auto& m : rank) rank_points.push_back(m.point);
        const auto crowding = crowding_distance(rank_points);
        std::vector<size_t> order(rank.size());
        std::iota(order.begin(), order.end(), size_t{0});
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return crowding[a] > crowding[b]; });
        for (size_t k = 0; elite.size() < n; ++k) elite.push_back(rank[order[k]]);
      } else {
        elite.insert(elite.end(), rank.begin(), rank.end());
      }
    }
    return elite;
  }

  /// The better of two members drawn at random (other than `taken`): the
  /// first if it dominates the second, else the second (Optuna's rule).
  static const FrozenTrial* tournament(const std::vector<Member>& population,
                                       const FrozenTrial* taken, detail::Rng& rng) {
    std::vector<const Member*> pool;
    for (const auto& m : population) {
      if (m.trial != taken) pool.push_back(&m);
    }
    const auto* a = pool[size_t(rng.index(int64_t(pool.size())))];
    const auto* b = pool[size_t(rng.index(int64_t(pool.size())))];
    return constrained_dominates(a->point, a->violation, b->point, b->violation) ? a->trial
                                                                                 : b->trial;
  }

  NsgaIIOptions options_;
  Random random_;
};

}  // namespace trainkit::tune::sampler
