// The study's own rules: define-by-run spaces, states, budgets, enqueued
// trials, failures; on the in-memory storage (the storage suite checks the
// others behave the same).
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <sstream>
#include <thread>
#include <trainkit/tune/pruners/none.hpp>
#include <trainkit/tune/samplers/grid.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/study.hpp>
#include <type_traits>

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

TEST_CASE("a study without a pruner never prunes - trial.number reads as FrozenTrial's") {
  Study study(std::make_shared<InMemoryStorage>(), {}, sampler::Random({.seed = 1}));
  static_assert(std::is_same_v<decltype(study), Study<sampler::Random, pruner::None>>);
  study.optimize(
      [](Trial& t) {
        for (int64_t step = 0; step < 4; ++step) {
          t.report(double(t.number * 10 + step), step);
          CHECK_FALSE(t.should_prune());
        }
        const int64_t n = t.number;
        // the earlier spelling, trial.number(), went with 0.2.0
        static_assert(!std::is_invocable_v<decltype(t.number)>);
        CHECK(nlohmann::json(t.number) == n);
        CHECK(std::to_string(t.number) == std::to_string(n));
        return double(n);
      },
      {.n_trials = 3, .log = nullptr});
  const auto trials = study.trials();
  REQUIRE(trials.size() == 3);
  for (const auto& t : trials) {
    CHECK(t.state == TrialState::Complete);
    CHECK(*t.value == double(t.number));
    CHECK(t.intermediate.size() == 4);
  }
}

TEST_CASE("failures are recorded with their reason - the exception goes on unless caught") {
  auto study = make_study();
  CHECK_THROWS_WITH(study.optimize([](Trial&) -> double { throw std::runtime_error("boom"); },
                                   {.n_trials = 3, .log = nullptr}),
                    "boom");
  study.optimize(
      [](Trial& t) {
        if (t.number % 2) throw std::runtime_error("odd");
        return t.number == 2 ? std::nan("") : 1.0;
      },
      {.n_trials = 4, .catch_exceptions = true, .log = nullptr});
  const auto trials = study.trials();
  REQUIRE(trials.size() == 5);
  CHECK(trials[0].system_attrs.at("fail_reason") == "boom");
  CHECK(trials[1].system_attrs.at("fail_reason") == "odd");
  CHECK(trials[2].state == TrialState::Fail);  // NaN
  CHECK(trials[2].system_attrs.at("fail_reason").get<std::string>().find("returned NaN") !=
        std::string::npos);
  CHECK(trials[3].state == TrialState::Fail);
  CHECK(trials[4].state == TrialState::Complete);
  CHECK(*trials[4].value == 1.0);
}

TEST_CASE("max_trials is a study-wide budget - enqueued trials run first with their values") {
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

TEST_CASE("an integer range the step does not divide is stored as Optuna stores it") {
  // Optuna's IntDistribution(0, 10, step=3) is 0..9 (it warns on every load of 0..10).
  Study study(std::make_shared<InMemoryStorage>(), {}, sampler::Random({.seed = 2}));
  study.optimize(
      [](Trial& t) {
        const auto k = t.suggest_int("k", 0, 10, {.step = 3});
        CHECK(k % 3 == 0);
        CHECK(k <= 9);
        CHECK(t.suggest_int("k", 0, 9, {.step = 3}) == k);  // the same distribution
        return double(k);
      },
      {.n_trials = 8, .log = nullptr});
  for (const auto& t : study.trials()) {
    const auto& d = std::get<IntDistribution>(t.params.at("k").distribution);
    CHECK(d.low == 0);
    CHECK(d.high == 9);
    CHECK(d.step == 3);
  }
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

// Returns a value outside every distribution of these tests.
struct OutOfRangeSampler {
  double sample(const StudyView&, const FrozenTrial&, const std::string&,
                const Distribution&) const {
    return 7;
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

TEST_CASE("max_trials bounds a grid and enqueued trials too") {
  Study grid(std::make_shared<InMemoryStorage>(), {},
             sampler::Grid({{"k", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}}), pruner::None{});
  grid.optimize([](Trial& t) { return double(t.suggest_int("k", 0, 11)); },
                {.max_trials = 5, .log = nullptr});
  const auto trials = grid.trials();
  REQUIRE(trials.size() == 12);  // the whole grid is enqueued...
  int64_t ran = 0;
  for (const auto& t : trials) ran += t.state == TrialState::Complete;
  CHECK(ran == 5);  // ...and five of it run
  CHECK(trials[5].state == TrialState::Waiting);
}

TEST_CASE("an infinite value is a value (as Optuna has it) - NaN fails the trial") {
  auto study = make_study();
  const double inf = std::numeric_limits<double>::infinity();
  study.enqueue({{"k", 0}});
  study.enqueue({{"k", 1}});
  study.enqueue({{"k", 2}});
  study.optimize(
      [&](Trial& t) {
        const auto k = t.suggest_int("k", 0, 2);
        return k == 0 ? inf : k == 1 ? -inf : std::nan("");
      },
      {.n_trials = 3, .log = nullptr});
  const auto trials = study.trials();
  CHECK(trials[0].state == TrialState::Complete);
  CHECK(*trials[0].value == inf);
  CHECK(*study.best_trial().value == -inf);
  CHECK(trials[2].state == TrialState::Fail);
  CHECK(trials[2].system_attrs.at("fail_reason") == "the objective returned NaN");
}

TEST_CASE("threads write whole log lines and call on_trial_end one at a time") {
  auto study = make_study();
  std::ostringstream log;
  std::atomic<int> inside{0}, overlaps{0}, calls{0};
  study.optimize(
      [](Trial& t) { return t.suggest_float("x", 0, 1); },
      {.n_trials = 40, .n_threads = 4, .log = &log, .on_trial_end = [&](const FrozenTrial&) {
         overlaps += inside.fetch_add(1) != 0;
         std::this_thread::sleep_for(std::chrono::microseconds(200));
         --inside;
         ++calls;
       }});
  CHECK(calls == 40);
  CHECK(overlaps == 0);
  std::istringstream lines(log.str());
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    CHECK(line.rfind("trainkit tune: trial ", 0) == 0);
    CHECK(line.find(" params {\"x\":") != std::string::npos);
  }
  CHECK(n == 40);
}

TEST_CASE("bad options, ranges and sampler output are named errors") {
  auto study = make_study();
  const auto x = [](Trial& t) { return t.suggest_float("x", 0, 1); };
  const auto rejects = [&](const OptimizeOptions& o, const char* what) {
    CHECK_THROWS_WITH_AS(study.optimize(x, o), doctest::Contains(what), trainkit::Error);
  };
  rejects({.max_trials = 0, .log = nullptr}, "`max_trials` = 0 is invalid");
  rejects({.n_trials = 1, .timeout_s = std::nan(""), .log = nullptr}, "`timeout_s` = nan");
  rejects({.n_trials = 1, .timeout_s = -1, .log = nullptr}, "`timeout_s` = -1");
  rejects({.n_trials = 1, .retry_failed = -1, .log = nullptr}, "`retry_failed` = -1");
  rejects({.n_trials = 1, .heartbeat_s = 1e12, .log = nullptr}, "`heartbeat_s`");
  rejects({.n_trials = 1, .heartbeat_s = 10, .stale_after_s = 15, .log = nullptr},
          ">= 2 * heartbeat_s");
  CHECK_THROWS_WITH_AS(
      Study(std::make_shared<InMemoryStorage>(), {.name = ""}, sampler::Random{}, pruner::None{}),
      doctest::Contains("`StudyOptions.name`"), trainkit::Error);

  const auto suggests = [&](std::function<double(Trial&)> f, const char* what) {
    CHECK_THROWS_WITH_AS(study.optimize(f, {.n_trials = 1, .log = nullptr}),
                         doctest::Contains(what), trainkit::Error);
  };
  suggests([](Trial& t) { return double(t.suggest_int("seed", 0, INT64_MAX)); }, "within +-2^53");
  suggests([](Trial& t) { return t.suggest_float("w", -1e308, 1e308); }, "a finite width");
  suggests(
      [](Trial& t) {
        return t.suggest_categorical("c", {1.0, std::nan("")});
      },
      "finite numbers");
  CHECK_THROWS_WITH_AS(sampler::Grid({{"k", {1, std::nan("")}}}),
                       doctest::Contains("`grid[\"k\"]` = \"nan\""), trainkit::Error);

  Study wild(std::make_shared<InMemoryStorage>(), {}, OutOfRangeSampler{}, pruner::None{});
  CHECK_THROWS_WITH_AS(wild.optimize(x, {.n_trials = 1, .log = nullptr}),
                       doctest::Contains("the sampler returned 7.000000 for \"x\", outside"),
                       trainkit::Error);
  CHECK(wild.trials().at(0).state == TrialState::Fail);
}

TEST_CASE("a trial another worker failed as lost ends quietly in its own worker") {
  auto storage = std::make_shared<InMemoryStorage>();
  Study study(storage, {}, sampler::Random{}, pruner::None{});
  std::ostringstream log;
  study.optimize(
      [&](Trial& t) {
        // What a detector in another process does when it judges us lost.
        storage->finish_trial(t.record().id,
                              {TrialState::Fail, std::nullopt, {{"fail_reason", "lost"}}});
        t.report(1.0, 0);  // TrialNotRunning: not an objective failure
        return 1.0;
      },
      {.n_trials = 2, .log = &log});  // catch_exceptions = false, and no throw
  const auto trials = study.trials();
  REQUIRE(trials.size() == 2);
  for (const auto& t : trials) {
    CHECK(t.state == TrialState::Fail);
    CHECK(t.system_attrs.at("fail_reason") == "lost");  // the detector's reason stays
  }
  CHECK(log.str().find("[not recorded") != std::string::npos);
}

TEST_CASE("a lost trial is judged by its process where pids compare, else by its own beat") {
  auto storage = std::make_shared<InMemoryStorage>();
  Study study(storage, {}, sampler::Random{}, pruner::None{});
  const auto id = storage->create_study("study", Direction::Minimize, true);
  const auto here = detail::this_worker(0.01);
  const int64_t no_pid = 1 << 30;  // above Linux's pid_max: no such process
  // Same host name, other container or machine: its pid means nothing here.
  storage->start_trial(id, {here.host, "other", no_pid, 0}, {}, false);
  storage->start_trial(id, {here.host, "other", no_pid, 0.01}, {}, false);
  storage->start_trial(id, {here.host, here.pid_space, no_pid, 0}, {}, false);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  study.optimize([](Trial&) { return 1.0; },
                 {.n_trials = 1, .heartbeat_s = 0.01, .stale_after_s = 0.02, .log = nullptr});
  const auto trials = study.trials();
  REQUIRE(trials.size() == 4);
  // A worker that never beats is judged by its process only, and here it cannot be.
  CHECK(trials[0].state == TrialState::Running);
  CHECK(trials[1].state == TrialState::Fail);
  CHECK(trials[1].system_attrs.at("fail_reason").get<std::string>().find("no heartbeat for") == 0);
  CHECK(trials[1].system_attrs.at("lost_worker") == true);  // samplers learn nothing from it
  CHECK_FALSE(trials[1].failed_in_objective());
  if (!here.pid_space.empty()) {  // /proc says which pid space this is
    CHECK(trials[2].state == TrialState::Fail);
    CHECK(trials[2].system_attrs.at("fail_reason") == "its worker process is gone");
  }
  CHECK(trials[3].state == TrialState::Complete);
}
