// NSGA-II: the first generation is random, every later child takes its
// parameters from the elite (whole non-dominated ranks, then crowding
// distance), constraints put feasible trials first, and on a two-objective
// problem with a known front it covers more hypervolume than random search.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <trainkit/tune/samplers/nsga2.hpp>
#include <trainkit/tune/study.hpp>
#include <vector>

#include "zdt1.hpp"

using namespace trainkit::tune;

namespace {

const auto& two = zdt1::directions;

/// A finished trial of two parameters and two minimised objectives.
FrozenTrial planted(int64_t number, double a, double b, std::vector<double> values) {
  FrozenTrial t;
  t.id = t.number = number;
  t.state = TrialState::Complete;
  t.params["a"] = {FloatDistribution{0, 10, false, std::nullopt}, a};
  t.params["b"] = {FloatDistribution{0, 10, false, std::nullopt}, b};
  t.values = std::move(values);
  return t;
}

FrozenTrial running(int64_t number) {
  FrozenTrial t;
  t.id = t.number = number;
  return t;
}

/// The parameter values of 200 children of a population of 4, unmutated:
/// with crossover_prob 0 each child copies one parent whole.
std::set<double> drawn(const StudyView& view, double crossover_prob) {
  std::set<double> values;
  for (int64_t k = 0; k < 200; ++k) {
    const auto child = sampler::NsgaII({.population_size = 4,
                                        .mutation_prob = 0.0,
                                        .crossover_prob = crossover_prob,
                                        .seed = uint64_t(k)})
                           .sample_relative(view, running(100 + k));
    REQUIRE(child.size() == 2);
    if (crossover_prob == 0) CHECK(child.at("a") == child.at("b"));
    for (const auto& [name, v] : child) values.insert(v);
  }
  return values;
}

}  // namespace

TEST_CASE("NSGA-II: the first generation is random search's draws") {
  Study nsga(std::make_shared<InMemoryStorage>(), {.directions = two},
             sampler::NsgaII({.population_size = 8, .seed = 4}));
  Study random(std::make_shared<InMemoryStorage>(), {.directions = two},
               sampler::Random({.seed = 4}));
  const auto objective = [](Trial& t) { return zdt1::objective(t, 3); };
  nsga.optimize(objective, {.n_trials = 12, .log = nullptr});
  random.optimize(objective, {.n_trials = 12, .log = nullptr});
  const auto a = nsga.trials(), b = random.trials();
  for (size_t k = 0; k < 8; ++k) CHECK(a[k].param_values() == b[k].param_values());
  int children_differ = 0;
  for (size_t k = 8; k < 12; ++k) children_differ += a[k].param_values() != b[k].param_values();
  CHECK(children_differ > 0);
}

TEST_CASE("NSGA-II: children take their parameters from the elite") {
  // population 4: generation 0 is trials 0-3, generation 1 trials 4-7. Their
  // ranks: {0, 4, 5}, {1, 6}, {7}, {2, 3}; the elite is rank 0 and one of
  // rank 1, whose two members tie on crowding distance (both ends: infinite),
  // so the first in the pool (the newer generation first) is kept: 6.
  std::vector<FrozenTrial> trials{planted(0, 0, 0, {1, 5}),   planted(1, 1, 1, {2, 6}),
                                  planted(2, 2, 2, {9, 9}),   planted(3, 3, 3, {8, 9.5}),
                                  planted(4, 4, 4, {0.5, 7}), planted(5, 5, 5, {4, 2}),
                                  planted(6, 6, 6, {5, 5.5}), planted(7, 7, 7, {3, 7})};
  trials.push_back(planted(8, 8, 8, {0.1, 0.1}));  // generation 2, not whole: not yet a parent
  trials.push_back(running(9));
  const StudyView view{Direction::Minimize, trials, two};
  const std::set<double> elite{0, 4, 5, 6};
  CHECK(drawn(view, 0.0) == elite);
  CHECK(drawn(view, 1.0) == elite);
  // a generation still filling is no parent: with 7 complete trials only
  // generation 0 is whole, and its elite is all of it
  const std::vector<FrozenTrial> first(trials.begin(), trials.begin() + 7);
  CHECK(drawn({Direction::Minimize, first, two}, 0.0) == std::set<double>{0, 1, 2, 3});
  // mutation redraws: with probability 1 nothing is taken from a parent
  auto child = running(100);
  CHECK(sampler::NsgaII({.population_size = 4, .mutation_prob = 1.0})
            .sample_relative(view, child)
            .empty());
  // before a whole generation: nothing relative (random draws)
  const std::vector<FrozenTrial> three(trials.begin(), trials.begin() + 3);
  CHECK(sampler::NsgaII({.population_size = 4})
            .sample_relative({Direction::Minimize, three, two}, child)
            .empty());
}

TEST_CASE("NSGA-II: feasible trials rank first") {
  // trials 0-3 dominate 4-7 but break the constraint: the elite is 4-7
  std::vector<FrozenTrial> trials;
  for (int64_t k = 0; k < 8; ++k) {
    trials.push_back(
        planted(k, double(k), double(k), {double(k), double(8 - k) + (k < 4 ? -10 : 0)}));
    trials.back().system_attrs["constraints"] = {k < 4 ? 1.0 + double(k) : -1.0};
  }
  CHECK(drawn({Direction::Minimize, trials, two}, 0.0) == std::set<double>{4, 5, 6, 7});
}

TEST_CASE("NSGA-II covers more of ZDT1's front than random search") {
  double nsga = 0, random = 0;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    nsga += zdt1::hypervolume_of(
        zdt1::search(sampler::NsgaII({.population_size = 20, .seed = seed}), 300));
    random += zdt1::hypervolume_of(zdt1::search(sampler::Random({.seed = seed}), 300));
  }
  MESSAGE("hypervolume after 300 trials, mean of 4 seeds: NSGA-II " << nsga / 4 << ", random "
                                                                    << random / 4);
  CHECK(nsga > random * 1.02);
}

TEST_CASE("NSGA-II's options are checked") {
  CHECK_THROWS_WITH_AS(sampler::NsgaII({.population_size = 1}),
                       doctest::Contains("population_size"), trainkit::Error);
  CHECK_THROWS_WITH_AS(sampler::NsgaII({.mutation_prob = 1.5}), doctest::Contains("mutation_prob"),
                       trainkit::Error);
  CHECK_THROWS_WITH_AS(sampler::NsgaII({.crossover_prob = -0.1}),
                       doctest::Contains("crossover_prob"), trainkit::Error);
}
