// Pruners against Optuna: planted learning curves replayed through Optuna's
// MedianPruner, PercentilePruner and SuccessiveHalvingPruner
// (tests/reference/make_tune_pruning.py wrote which trial each stops, and
// when) and through ours, one trial at a time and four at once.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <variant>

#include "../scratch.hpp"

#include <trainkit/tune/pruners/asha.hpp>
#include <trainkit/tune/pruners/percentile.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/sqlite.hpp>
#include <trainkit/tune/study.hpp>

using namespace trainkit::tune;
using nlohmann::json;

namespace {

json reference() {
  std::ifstream in(TRAINKIT_REFERENCE_DIR "/tune_pruning.json");
  REQUIRE(in.good());
  return json::parse(in);
}

using AnyPruner = std::variant<pruner::Percentile, pruner::Asha>;

AnyPruner make_pruner(const json& c) {
  const auto& o = c.at("options");
  const auto kind = c.at("pruner").get<std::string>();
  if (kind == "asha") {
    pruner::AshaOptions a;
    if (o.contains("min_resource")) a.min_resource = o["min_resource"].get<int64_t>();
    a.reduction_factor = o.value("reduction_factor", a.reduction_factor);
    a.min_early_stopping_rate = o.value("min_early_stopping_rate", a.min_early_stopping_rate);
    a.bootstrap_count = o.value("bootstrap_count", a.bootstrap_count);
    return pruner::Asha(a);
  }
  pruner::PercentileOptions p;
  if (kind == "percentile") p.percentile = o.at("percentile").get<double>();
  p.n_startup_trials = o.value("n_startup_trials", p.n_startup_trials);
  p.n_warmup_steps = o.value("n_warmup_steps", p.n_warmup_steps);
  p.interval_steps = o.value("interval_steps", p.interval_steps);
  p.n_min_trials = o.value("n_min_trials", p.n_min_trials);
  if (kind == "median") {
    return pruner::Median({p.n_startup_trials, p.n_warmup_steps, p.interval_steps, p.n_min_trials});
  }
  return pruner::Percentile(p);
}

double curve_value(const json& curves, size_t trial, int64_t step, double sign) {
  const auto& v = curves.at(trial).at(static_cast<size_t>(step));
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : sign * v.get<double>();
}

std::string label(const json& c) {
  return c.at("pruner").get<std::string>() + " " + c.at("options").dump() + " " +
         c.at("direction").get<std::string>() + " concurrent " + c.at("concurrent").dump();
}

}  // namespace

TEST_CASE("pruners stop exactly the trials Optuna's stop, at the same steps") {
  const auto ref = reference();
  const auto& curves = ref.at("curves");
  const auto n_steps = static_cast<int64_t>(curves.at(0).size());
  for (const auto& c : ref.at("cases")) {
    INFO(label(c));
    auto pruner = make_pruner(c);
    const auto direction = direction_from_string(c.at("direction"));
    const double sign = direction == Direction::Maximize ? -1.0 : 1.0;
    const auto concurrent = c.at("concurrent").get<size_t>();
    // The same round-robin schedule as the script: a trial per slot, one step each in turn.
    std::vector<FrozenTrial> trials;
    std::vector<size_t> pending(curves.size()), running;
    std::iota(pending.begin(), pending.end(), size_t{0});
    json events = json::array(), pruned = json::object();
    while (!pending.empty() || !running.empty()) {
      while (!pending.empty() && running.size() < concurrent) {
        FrozenTrial t;
        t.id = t.number = static_cast<int64_t>(trials.size());
        trials.push_back(t);
        running.push_back(pending.front());
        pending.erase(pending.begin());
      }
      const size_t i = running.front();
      running.erase(running.begin());
      auto& t = trials[i];
      const int64_t step = t.intermediate.empty() ? 0 : t.last_step().value() + 1;
      t.intermediate[step] = curve_value(curves, i, step, sign);
      events.push_back({i, step});
      auto copy = t;
      const auto why = std::visit(
          [&](auto& p) {
            return p.prune(StudyView{direction, trials}, copy);
          },
          pruner);
      t = copy;
      if (why) {
        CHECK(!why->empty());
        pruned[std::to_string(i)] = step;
        t.state = TrialState::Pruned;
      } else if (step + 1 == n_steps) {
        t.state = TrialState::Complete;
        t.value = t.intermediate.at(step);
      } else {
        running.push_back(i);
      }
    }
    CHECK(events == c.at("events"));
    CHECK(pruned == c.at("pruned_at"));
  }
}

TEST_CASE("a study with a pruner ends pruned trials as pruned, with the reason and last value") {
  const auto ref = reference();
  const auto& curves = ref.at("curves");
  for (const auto& c : ref.at("cases")) {
    if (c.at("concurrent") != 1) continue;
    INFO(label(c));
    const auto direction = direction_from_string(c.at("direction"));
    const double sign = direction == Direction::Maximize ? -1.0 : 1.0;
    auto run = [&](auto pruner) {
      Study study(std::make_shared<InMemoryStorage>(), {.direction = direction}, sampler::Random{},
                  std::move(pruner));
      study.optimize(
          [&](Trial& trial) {
            const auto i = static_cast<size_t>(trial.number);
            double v = 0;
            for (size_t step = 0; step < curves.at(i).size(); ++step) {
              v = curve_value(curves, i, static_cast<int64_t>(step), sign);
              trial.report(v, static_cast<int64_t>(step));
              if (trial.should_prune()) break;
            }
            return v;
          },
          {.n_trials = static_cast<int64_t>(curves.size()), .log = nullptr});
      json pruned = json::object();
      for (const auto& t : study.trials()) {
        if (t.state != TrialState::Pruned) {
          CHECK(t.state == TrialState::Complete);
          continue;
        }
        pruned[std::to_string(t.number)] = t.last_step().value();
        CHECK(t.system_attrs.at("prune_reason").dump().size() > 10);
        const double last = t.intermediate.rbegin()->second;
        CHECK((std::isnan(last) ? std::isnan(*t.value) : *t.value == last));
      }
      CHECK(pruned == c.at("pruned_at"));
    };
    std::visit(run, make_pruner(c));
  }
}

TEST_CASE("pruner options are checked") {
  CHECK_THROWS_WITH_AS(pruner::Asha({.reduction_factor = 1}),
                       doctest::Contains("`reduction_factor` = 1 is invalid; accepted: >= 2"),
                       trainkit::Error);
  CHECK_THROWS_WITH_AS(pruner::Percentile({.percentile = 120}),
                       doctest::Contains("`percentile` = 120"), trainkit::Error);
  CHECK_THROWS_WITH_AS(pruner::Asha({.bootstrap_count = 2}),
                       doctest::Contains("0 when min_resource is estimated"), trainkit::Error);
}

TEST_CASE("ASHA goes on when a trial reported inf, kept as inf by an SQL storage") {
  const auto path = tk_test::temp_dir("asha_inf") / "study.db";
  Study study(std::make_shared<SqliteStorage>(path.string()), {}, sampler::Random{},
              pruner::Asha({.min_resource = 1, .reduction_factor = 2}));
  study.optimize(
      [](Trial& t) {
        for (int64_t step = 0; step < 4; ++step) {
          // trial 0 diverges; the others must still be judged, inf counting as worst
          const double v = t.number == 0 ? std::numeric_limits<double>::infinity()
                                         : 1.0 / double(t.number + step);
          t.report(v, step);
          if (t.should_prune()) return v;
        }
        return 1.0 / double(t.number + 4);
      },
      {.n_trials = 4, .log = nullptr});
  const auto trials = study.trials();
  REQUIRE(trials.size() == 4);
  CHECK(trials[0].system_attrs.at(pruner::Asha::rung_key(0)).get<double>() ==
        std::numeric_limits<double>::infinity());
  for (const auto& t : trials) CHECK(t.state != TrialState::Fail);
  CHECK(trials[1].state == TrialState::Complete);  // better than inf at every rung
  std::filesystem::remove(path);
}
