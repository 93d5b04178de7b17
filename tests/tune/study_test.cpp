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

TEST_CASE("failures are recorded with their reason; the exception goes on unless caught") {
  auto study = make_study();
  CHECK_THROWS_WITH(study.optimize([](Trial&) -> double { throw std::runtime_error("boom"); },
                                   {.n_trials = 3, .log = nullptr}),
                    "boom");
  study.optimize(
      [](Trial& t) {
        if (t.number() % 2) throw std::runtime_error("odd");
        return t.number() == 2 ? std::nan("") : 1.0;
      },
      {.n_trials = 4, .catch_exceptions = true, .log = nullptr});
  const auto trials = study.trials();
  REQUIRE(trials.size() == 5);
  CHECK(trials[0].system_attrs.at("fail_reason") == "boom");
  CHECK(trials[1].system_attrs.at("fail_reason") == "odd");
  CHECK(trials[2].state == TrialState::Fail);  // NaN
  CHECK(trials[2].system_attrs.at("fail_reason").get<std::string>().find("returned nan") !=
        std::string::npos);
  CHECK(trials[3].state == TrialState::Fail);
  CHECK(trials[4].state == TrialState::Complete);
  CHECK(*trials[4].value == 1.0);
}

TEST_CASE("max_trials is a study-wide budget; enqueued trials run first with their values") {
  auto study = make_study();
  study.enqueue({{"x", 0.25}});
  study.optimize([](Trial& t) { return t.suggest_float("x", 0, 1); },
                 {.max_trials = 5, .log = nullptr});
  auto trials = study.trials();
  REQUIRE(trials.size() == 5);
  CHECK(trials[0].params.at("x").internal == 0.25);
  study.optimize([](Trial& t) { return t.suggest_float("x", 0, 1); },
                 {.max_trials = 5, .log = nullptr});
  CHECK(study.trials().size() == 5);  // used up
  study.enqueue({{"x", 2.0}});
  CHECK_THROWS_WITH_AS(study.optimize([](Trial& t) { return t.suggest_float("x", 0, 1); },
                                      {.n_trials = 1, .log = nullptr}),
                       doctest::Contains("enqueued value 2.0 of \"x\" is outside"),
                       trainkit::Error);
}

TEST_CASE("a name keeps its kind across trials, and bad bounds are named") {
  auto study = make_study();
  study.optimize([](Trial& t) { return t.suggest_float("x", 0, 1); },
                 {.n_trials = 1, .log = nullptr});
  CHECK_THROWS_WITH_AS(study.optimize([](Trial& t) { return double(t.suggest_int("x", 0, 3)); },
                                      {.n_trials = 1, .log = nullptr}),
                       doctest::Contains("a name keeps its kind"), trainkit::Error);
  CHECK_THROWS_WITH_AS(
      study.optimize([](Trial& t) { return t.suggest_float("lr", 0, 1, {.log = true}); },
                     {.n_trials = 1, .log = nullptr}),
      doctest::Contains(
          "option `suggest(\"lr\").low` = 0 is invalid; accepted: > 0 on a log scale"),
      trainkit::Error);
  CHECK_THROWS_WITH_AS(study.optimize([](Trial&) { return 0.0; }, {.log = nullptr}),
                       doctest::Contains("`n_trials`"), trainkit::Error);
  auto storage = std::make_shared<InMemoryStorage>();
  Study first(storage, {.name = "s"}, sampler::Random{}, pruner::None{});
  CHECK_THROWS_WITH_AS(
      Study(storage, {.name = "s", .load_if_exists = false}, sampler::Random{}, pruner::None{}),
      doctest::Contains("study \"s\" already exists"), trainkit::Error);
  CHECK_THROWS_WITH_AS(Study(storage, {.name = "s", .direction = Direction::Maximize},
                             sampler::Random{}, pruner::None{}),
                       doctest::Contains("stored with direction minimize, opened with maximize"),
                       trainkit::Error);
}

namespace {

// Throws when a trial starts: the study must not leave that trial running.
struct FailingSampler {
  std::map<std::string, double> sample_relative(const StudyView&, const FrozenTrial&) const {
    throw std::runtime_error("sampler broke");
  }
  double sample(const StudyView&, const FrozenTrial&, const std::string&,
                const Distribution&) const {
    return 0;
  }
};

}  // namespace

TEST_CASE("a trial whose sampler throws ends failed, not running") {
  Study study(std::make_shared<InMemoryStorage>(), {}, FailingSampler{}, pruner::None{});
  CHECK_THROWS_WITH(study.optimize([](Trial& t) { return t.suggest_float("x", 0, 1); },
                                   {.n_trials = 1, .catch_exceptions = true, .log = nullptr}),
                    "sampler broke");
  const auto trials = study.trials();
  REQUIRE(trials.size() == 1);
  CHECK(trials[0].state == TrialState::Fail);
  CHECK(trials[0].system_attrs.at("fail_reason").get<std::string>().find("sampler or storage") !=
        std::string::npos);
}

TEST_CASE("enqueue takes an object of parameter values") {
  auto study = make_study();
  CHECK_THROWS_WITH_AS(study.enqueue({"lr", 1e-3}),
                       doctest::Contains("`enqueue.params` = \"[\"lr\",0.001]\" is invalid"),
                       trainkit::Error);
}
