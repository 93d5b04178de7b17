// The study's own rules: define-by-run spaces, states, budgets, enqueued
// trials, failures; on the in-memory storage (the storage suite checks the
// others behave the same).
#include <doctest/doctest.h>

#include <trainkit/tune/pruners/none.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/study.hpp>

using namespace trainkit::tune;

namespace {

auto make_study(std::string name = "s", Direction d = Direction::Minimize) {
  return Study(std::make_shared<InMemoryStorage>(), {.name = name, .direction = d},
               sampler::Random({.seed = 7}), pruner::None{});
}

}  // namespace

TEST_CASE("a study runs n_trials, numbers them densely and finds the best") {
  auto study = make_study();
  study.optimize([](Trial& t) { return std::pow(t.suggest_float("x", -3, 3) - 1, 2); },
                 {.n_trials = 30, .log = nullptr});
  const auto trials = study.trials();
  REQUIRE(trials.size() == 30);
  double best = 1e9;
  for (size_t k = 0; k < trials.size(); ++k) {
    CHECK(trials[k].number == static_cast<int64_t>(k));
    CHECK(trials[k].state == TrialState::Complete);
    const double x = trials[k].param<double>("x");
    CHECK(x >= -3);
    CHECK(x <= 3);
    CHECK(*trials[k].value == doctest::Approx(std::pow(x - 1, 2)));
    best = std::min(best, *trials[k].value);
  }
  CHECK(*study.best_trial().value == best);
}
