// Studies of several objectives and constraints: a value per objective, the
// Pareto front as the best trials (checked against a brute-force front
// written here), infeasible trials never best, and the refusals: a sampler
// or a pruner that reads one objective, an objective of the wrong arity.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>
#include <trainkit/tune/pruners/percentile.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/study.hpp>
#include <vector>

using namespace trainkit::tune;

namespace {

/// The numbers of the complete feasible trials no other one beats, by
/// pairwise comparison in the trials' own directions.
std::set<int64_t> brute_force_front(const std::vector<FrozenTrial>& trials,
                                    const std::vector<Direction>& directions) {
  const auto no_worse = [&](const FrozenTrial& a, const FrozenTrial& b, size_t k) {
    const double x = a.objective_values()[k], y = b.objective_values()[k];
    return directions[k] == Direction::Minimize ? x <= y : x >= y;
  };
  std::set<int64_t> front;
  for (const auto& t : trials) {
    if (t.state != TrialState::Complete || !t.feasible()) continue;
    bool beaten = false;
    for (const auto& o : trials) {
      if (o.state != TrialState::Complete || !o.feasible()) continue;
      bool all = true, strictly = false;
      for (size_t k = 0; k < directions.size(); ++k) {
        all = all && no_worse(o, t, k);
        strictly = strictly || !no_worse(t, o, k);
      }
      beaten = beaten || (all && strictly);
    }
    if (!beaten) front.insert(t.number);
  }
  return front;
}

std::set<int64_t> numbers(const std::vector<FrozenTrial>& trials) {
  std::set<int64_t> out;
  for (const auto& t : trials) out.insert(t.number);
  return out;
}

}  // namespace

TEST_CASE("a study of several objectives keeps each value and returns its Pareto front") {
  const std::vector directions{Direction::Minimize, Direction::Maximize};
  Study study(std::make_shared<InMemoryStorage>(), {.name = "two", .directions = directions},
              sampler::Random({.seed = 3}));
  CHECK(study.directions() == directions);
  // x^2 down and -(x - 2)^2 up: every x in [0, 2] is a trade-off
  study.optimize(
      [](Trial& t) -> std::vector<double> {
        const double x = t.suggest_float("x", -3, 5);
        return {x * x, -(x - 2) * (x - 2)};
      },
      {.n_trials = 40, .log = nullptr});
  const auto trials = study.trials();
  REQUIRE(trials.size() == 40);
  for (const auto& t : trials) {
    const double x = t.param<double>("x");
    CHECK_FALSE(t.value);
    REQUIRE(t.values.size() == 2);
    CHECK(t.values[0] == x * x);
    CHECK(t.values[1] == -(x - 2) * (x - 2));
  }
  const auto best = study.best_trials();
  CHECK(numbers(best) == brute_force_front(trials, directions));
  CHECK(best.size() >= 5);
  for (const auto& t : best) {
    CHECK(t.param<double>("x") >= 0);
    CHECK(t.param<double>("x") <= 2);
  }
  CHECK_THROWS_WITH_AS((study.best_trial()),
                       doctest::Contains("best_trials() gives its Pareto front"), trainkit::Error);
  CHECK_THROWS_WITH_AS((study.direction()), doctest::Contains("directions() gives"),
                       trainkit::Error);
}

TEST_CASE("constraints: an infeasible trial is never a best trial") {
  SUBCASE("several objectives") {
    const std::vector directions{Direction::Minimize, Direction::Minimize};
    Study study(std::make_shared<InMemoryStorage>(), {.directions = directions},
                sampler::Random({.seed = 5}));
    study.optimize(
        [](Trial& t) -> std::vector<double> {
          const double x = t.suggest_float("x", 0, 1), y = t.suggest_float("y", 0, 1);
          t.set_constraints({0.3 - x, -1});  // feasible: x >= 0.3
          return {x, y * y + 1 - x};
        },
        {.n_trials = 60, .log = nullptr});
    const auto trials = study.trials();
    int infeasible = 0;
    for (const auto& t : trials) {
      REQUIRE(t.constraints());
      CHECK(t.constraints()->at(1) == -1);
      infeasible += !t.feasible();
    }
    CHECK(infeasible > 5);
    const auto best = study.best_trials();
    CHECK(numbers(best) == brute_force_front(trials, directions));
    for (const auto& t : best) CHECK(t.feasible());
    // without the constraints the front would differ: some infeasible trial is not beaten
    std::vector<FrozenTrial> unconstrained = trials;
    for (auto& t : unconstrained) t.system_attrs.erase("constraints");
    CHECK(brute_force_front(unconstrained, directions) != numbers(best));
  }
  SUBCASE("one objective") {
    Study study(std::make_shared<InMemoryStorage>(), {}, sampler::Random({.seed = 2}));
    study.optimize(
        [](Trial& t) {
          const double x = t.suggest_float("x", -1, 1);
          t.set_constraints({0.5 - x});  // feasible: x >= 0.5
          return x;                      // minimised: the unconstrained best is near -1
        },
        {.n_trials = 30, .log = nullptr});
    const auto best = study.best_trial();
    CHECK(best.feasible());
    CHECK(best.param<double>("x") >= 0.5);
    double lowest_feasible = 2;
    for (const auto& t : study.trials()) {
      if (t.feasible()) lowest_feasible = std::min(lowest_feasible, *t.value);
    }
    CHECK(*best.value == lowest_feasible);
    CHECK(numbers(study.best_trials()) == std::set<int64_t>{best.number});
  }
  SUBCASE("a NaN constraint fails its trial, naming it") {
    Study study(std::make_shared<InMemoryStorage>(), {}, sampler::Random({.seed = 2}));
    study.optimize(
        [](Trial& t) {
          t.set_constraints({std::numeric_limits<double>::quiet_NaN()});
          return 1.0;
        },
        {.n_trials = 1, .catch_exceptions = true, .log = nullptr});
    const auto t = study.trials().at(0);
    CHECK(t.state == TrialState::Fail);
    CHECK(t.system_attrs.at("fail_reason").get<std::string>().find("constraint value is NaN") !=
          std::string::npos);
  }
}

namespace {

/// A sampler of one objective, as the GP sampler: it does not say
/// multi_objective (gp.hpp is left out here: LibTorch's glog defines CHECK).
struct OneObjective {
  double sample(const StudyView&, const FrozenTrial&, const std::string&,
                const Distribution&) const {
    return 0;
  }
};

}  // namespace

TEST_CASE("several objectives: what reads one objective is refused, a wrong arity fails") {
  const std::vector two{Direction::Minimize, Direction::Minimize};
  auto storage = std::make_shared<InMemoryStorage>();
  CHECK_THROWS_WITH_AS((Study(storage, {.name = "one", .directions = two}, OneObjective())),
                       doctest::Contains("this sampler models one"), trainkit::Error);
  CHECK_THROWS_WITH_AS((Study(storage, {.name = "pruned", .directions = two}, sampler::Random(),
                              pruner::Percentile())),
                       doctest::Contains("cannot prune"), trainkit::Error);

  Study study(storage, {.name = "arity", .directions = two}, sampler::Random());
  CHECK_THROWS_WITH_AS(
      (study.optimize([](Trial&) { return 1.0; }, {.n_trials = 1, .log = nullptr})),
      doctest::Contains("returns one value per objective"), trainkit::Error);
  study.optimize(
      [](Trial& t) -> std::vector<double> {
        if (t.number == 0) return {1.0};
        if (t.number == 1) return {1.0, std::nan("")};
        return {1.0, std::numeric_limits<double>::infinity()};
      },
      {.n_trials = 3, .log = nullptr});
  const auto trials = study.trials();
  CHECK(trials[0].state == TrialState::Fail);
  CHECK(trials[0].system_attrs.at("fail_reason") ==
        "the objective returned 1 values for 2 "
        "objectives");
  CHECK(trials[1].state == TrialState::Fail);
  CHECK(trials[1].system_attrs.at("fail_reason") == "the objective returned NaN");
  CHECK(trials[2].state == TrialState::Complete);
  CHECK(trials[2].values == std::vector{1.0, std::numeric_limits<double>::infinity()});

  Study one(storage, {.name = "one"}, sampler::Random());
  CHECK_THROWS_WITH_AS(
      (one.optimize([](Trial&) { return std::vector{1.0}; }, {.n_trials = 1, .log = nullptr})),
      doctest::Contains("has one objective; its objective returns a double"), trainkit::Error);
  // a study reopened with other directions is refused
  CHECK_THROWS_WITH_AS(
      (Study(storage, {.name = "arity", .directions = {Direction::Maximize, Direction::Minimize}},
             sampler::Random())),
      doctest::Contains("stored with directions minimize, minimize"), trainkit::Error);
}
