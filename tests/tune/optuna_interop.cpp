// trainkit's side of optuna_interop_test.py, which runs Python's Optuna on
// the same study database:
//   tune_optuna_interop STORAGE STUDY run N      N trials of the shared objective (TPE),
//                                                 then one trial enqueued and left waiting
//   tune_optuna_interop STORAGE STUDY dump FILE  the study as trainkit reads it, as JSON
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
#include <string>

#include <trainkit/tune/pruners/none.hpp>
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
  return {{"number", t.number},
          {"state", to_string(t.state)},
          {"value", t.value ? number(*t.value) : nlohmann::json(nullptr)},
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
    if (mode == "dump") {
      const auto id = storage->create_study(argv[2], Direction::Minimize, true);
      nlohmann::json out = nlohmann::json::array();
      for (const auto& t : storage->trials(id)) out.push_back(dump(t));
      std::ofstream(argv[4]) << out.dump(1) << "\n";
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
          const auto opt = t.suggest_categorical<nlohmann::json>(
              "opt", std::vector<nlohmann::json>{"adam", "sgd", nullptr, true, 2.5});
          const double value = x * x + std::log10(lr) * std::log10(lr) / 25 + frac +
                               static_cast<double>(n + layers) / 100 + (opt == "adam" ? 0 : 0.5);
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
