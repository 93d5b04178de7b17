// trainkit's side of optuna_interop_test.py, which runs Python's Optuna on
// the same study database:
//   tune_optuna_interop STORAGE STUDY run N      N trials of the shared objective (TPE),
//                                                 then one trial enqueued and left waiting
//   tune_optuna_interop STORAGE STUDY dump FILE  the study as trainkit reads it, as JSON
//   tune_optuna_interop STORAGE STUDY pareto N   N trials of the two-objective study
//                                                 with a constraint (NSGA-II, population 4)
//   tune_optuna_interop STORAGE STUDY dump-pareto FILE   that study, as dump writes
// STORAGE is sqlite:PATH or postgres:CONNINFO. The objective is the one the
// Python side runs: every kind of parameter, intermediate values with
// infinities and NaN, attributes with non-finite numbers, and trials that
// are pruned, fail or return an infinity by their number.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <trainkit/tune/pareto.hpp>
#include <trainkit/tune/pruners/none.hpp>
#include <trainkit/tune/samplers/nsga2.hpp>
#include <trainkit/tune/samplers/tpe.hpp>
#include <trainkit/tune/study.hpp>

#include "storage_spec.hpp"

using namespace trainkit::tune;

namespace {

// A number as the dump writes it: JSON's own, or "NaN" / "Infinity" / "-Infinity".
nlohmann::json number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return x;
}

nlohmann::json numbers(const nlohmann::json& v) {
  if (v.is_number_float()) return number(v.get<double>());
  if (!v.is_structured()) return v;
  auto out = v;
  for (auto& [key, item] : out.items()) item = numbers(item);
  return out;
}

nlohmann::json dump(const FrozenTrial& t) {
  nlohmann::json params = nlohmann::json::object(), distributions = nlohmann::json::object(),
                 intermediate = nlohmann::json::object();
  for (const auto& [name, p] : t.params) {
    params[name] = numbers(p.value());
    distributions[name] = to_optuna_json(p.distribution);
  }
  for (const auto& [step, v] : t.intermediate) intermediate[std::to_string(step)] = number(v);
  nlohmann::json fixed = nullptr;
  if (t.system_attrs.contains("fixed_params")) fixed = t.system_attrs["fixed_params"];
  nlohmann::json values = nlohmann::json::array(), constraints = nullptr;
  for (const double v : t.objective_values()) values.push_back(number(v));
  if (const auto c = t.constraints()) constraints = *c;
  return {{"number", t.number},
          {"state", to_string(t.state)},
          {"value", t.value ? number(*t.value) : nlohmann::json(nullptr)},
          {"values", values},
          {"constraints", constraints},
          {"params", params},
          {"distributions", distributions},
          {"intermediate", intermediate},
          {"user_attrs", numbers(t.user_attrs)},
          {"fixed_params", fixed},
          {"started", t.started_at},
          {"finished", t.finished_at}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: tune_optuna_interop STORAGE STUDY run N | dump FILE\n";
    return 2;
  }
  const std::string mode = argv[3];
  try {
    auto storage = tune_test::open_storage(argv[1]);
    // the two-objective study's directions and objective, as the Python side's
    const std::vector pareto{Direction::Minimize, Direction::Maximize};
    if (mode == "dump" || mode == "dump-pareto") {
      const auto directions = mode == "dump" ? std::vector{Direction::Minimize} : pareto;
      const auto id = storage->create_study(argv[2], directions, true);
      const auto trials = storage->trials(id);
      std::set<int64_t> best;  // trainkit's best trials (the feasible Pareto front)
      const auto view = StudyView::of(directions, trials);
      for (const auto* t : best_trials(view)) best.insert(t->number);
      nlohmann::json out = nlohmann::json::array();
      for (const auto& t : trials) {
        out.push_back(dump(t));
        out.back()["best"] = best.contains(t.number);
      }
      std::ofstream(argv[4]) << out.dump(1) << "\n";
      return 0;
    }
    if (mode == "pareto") {
      Study study(storage, {.name = argv[2], .directions = pareto},
                  sampler::NsgaII({.population_size = 4, .seed = 11}));
      study.optimize(
          [](Trial& t) -> std::vector<double> {
            const double x = t.suggest_float("x", -3, 5), y = t.suggest_float("y", 0, 1);
            t.set_constraints({y - 0.8});
            return {x * x + y, -(x - 2) * (x - 2)};
          },
          {.n_trials = std::atoll(argv[4]), .log = nullptr});
      return 0;
    }
    Study study(storage, {.name = argv[2]}, sampler::Tpe({.seed = 7, .n_startup_trials = 4}),
                pruner::None{});
    const double inf = std::numeric_limits<double>::infinity();
    study.optimize(
        [&](Trial& t) {
          const double x = t.suggest_float("x", -5, 5);
          const double lr = t.suggest_float("lr", 1e-5, 1, {.log = true});
          const double frac = t.suggest_float("frac", 0, 1, {.step = 0.25});
          const auto n = t.suggest_int("n", 1, 9, {.step = 2});
          const auto layers = t.suggest_int("layers", 1, 64, {.log = true});
          const auto k = t.suggest_int("k", 0, 10, {.step = 3});  // stored as 0..9
          const auto opt = t.suggest_categorical<nlohmann::json>(
              "opt", std::vector<nlohmann::json>{"adam", "sgd", nullptr, true, 2.5});
          const double value = x * x + std::log10(lr) * std::log10(lr) / 25 + frac +
                               static_cast<double>(n + layers + k) / 100 +
                               (opt == "adam" ? 0 : 0.5);
          t.set_user_attr("by", {{"lib", "trainkit"}, {"odd", {inf, std::nan("")}}});
          t.report(value + 1, 0);
          t.report(t.number % 2 ? inf : -inf, 1);
          t.report(std::nan(""), 2);
          t.report(value, 3);
          if (t.number % 5 == 2) throw TrialPruned("pruned by number");
          if (t.number % 5 == 3) throw std::runtime_error("failed by number");
          return t.number % 5 == 4 ? inf : value;
        },
        {.n_trials = std::atoll(argv[4]), .catch_exceptions = true, .log = nullptr});
    study.enqueue({{"x", 0.5}, {"opt", nullptr}});
  } catch (const std::exception& e) {
    std::cerr << "tune_optuna_interop: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
