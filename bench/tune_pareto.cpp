// Multi-objective search on ZDT1, ZDT2 and ZDT3 (Zitzler, Deb and Thiele,
// 2000: 30 variables in [0, 1], two minimised objectives, a known front;
// ZDT3's is disconnected), each sampler over S seeds of N trials. Its
// measure is the hypervolume gap: the hypervolume (reference point (1.1, 11))
// of the true front, sampled at 10001 points, less that of the trials so
// far; lower is better, 0 the front itself. --json writes the per-seed gap
// curves in the format bench/tune_compare.py reads (the gap as the regret,
// the optimum 0), beside bench/tune_pareto_optuna.py's for Optuna.
//
//   bench_tune_pareto --seeds 10 --trials 200 --functions zdt1,zdt2,zdt3
//                     --samplers random,nsga2,motpe --json trainkit.json
//
// motpe is sampler::Tpe with its defaults on the two objectives, as
// Optuna's TPESampler with its defaults is there.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <trainkit/tune/pareto.hpp>
#include <trainkit/tune/samplers/nsga2.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/samplers/tpe.hpp>
#include <trainkit/tune/storage.hpp>
#include <trainkit/tune/study.hpp>

using namespace trainkit::tune;

namespace {

constexpr int kVariables = 30;
const Point kReference{1.1, 11};

/// f2 / g at g's optimum as a function of f1: the front's shape.
double zdt_h(const std::string& name, double r) {
  if (name == "zdt1") return 1 - std::sqrt(r);
  if (name == "zdt2") return 1 - r * r;
  return 1 - std::sqrt(r) - r * std::sin(10 * std::numbers::pi * r);  // zdt3
}

Point zdt(const std::string& name, const std::vector<double>& x) {
  double g = 0;
  for (size_t i = 1; i < x.size(); ++i) g += x[i];
  g = 1 + 9 * g / double(x.size() - 1);
  return {x[0], g * zdt_h(name, x[0] / g)};
}

/// The true front's hypervolume: 10001 points of g = 1 (its dominated ones
/// add nothing).
double front_hypervolume(const std::string& name) {
  std::vector<Point> front;
  for (int i = 0; i <= 10000; ++i) {
    const double f1 = i / 10000.0;
    front.push_back({f1, zdt_h(name, f1)});
  }
  return hypervolume(front, kReference);
}

/// The hypervolume gap after each trial of one run.
template <class S>
std::vector<double> run(const std::string& function, S sampler, int trials, double best,
                        double& overhead_s) {
  Study study(std::make_shared<InMemoryStorage>(),
              {.directions = {Direction::Minimize, Direction::Minimize}}, std::move(sampler));
  std::vector<std::string> names;
  for (int i = 0; i < kVariables; ++i) names.push_back(std::string("x").append(std::to_string(i)));
  double objective_s = 0;
  const auto start = std::chrono::steady_clock::now();
  study.optimize(
      [&](Trial& t) -> std::vector<double> {
        std::vector<double> x;
        for (const auto& name : names) x.push_back(t.suggest_float(name, 0, 1));
        const auto t0 = std::chrono::steady_clock::now();
        const auto f = zdt(function, x);
        objective_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return f;
      },
      {.n_trials = trials, .log = nullptr});
  overhead_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - objective_s;
  std::vector<double> curve;
  std::vector<Point> so_far;
  for (const auto& t : study.trials()) {
    if (t.state == TrialState::Complete) so_far.push_back(t.values);
    curve.push_back(best - hypervolume(so_far, kReference));
  }
  return curve;
}

using Runner = std::function<std::vector<double>(const std::string& function, uint64_t seed,
                                                 int trials, double best, double& overhead_s)>;

/// The samplers by name (motpe: sampler::Tpe on two objectives).
const std::map<std::string, Runner>& samplers() {
  static const std::map<std::string, Runner> all{
      {"random",
       [](const std::string& f, uint64_t seed, int n, double best, double& overhead) {
         return run(f, sampler::Random({.seed = seed}), n, best, overhead);
       }},
      {"nsga2",
       [](const std::string& f, uint64_t seed, int n, double best, double& overhead) {
         return run(f, sampler::NsgaII({.seed = seed}), n, best, overhead);
       }},
      {"motpe", [](const std::string& f, uint64_t seed, int n, double best, double& overhead) {
         return run(f, sampler::Tpe({.seed = seed}), n, best, overhead);
       }}};
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 10, first_seed = 0, trials = 200;
  const std::vector<std::string> all_functions{"zdt1", "zdt2", "zdt3"};
  std::vector<std::string> all_samplers;
  for (const auto& [name, runner] : samplers()) all_samplers.push_back(name);
  auto functions = all_functions, sampler_names = all_samplers;  // the defaults: every one
  std::string json_path;
  CLI::App app{"Multi-objective samplers on ZDT1-3: the hypervolume gap after each trial"};
  app.add_option("--seeds", seeds, "seeds per function and sampler")->capture_default_str();
  app.add_option("--first-seed", first_seed, "seeds K .. K+S-1, to add to an earlier run")
      ->capture_default_str();
  app.add_option("--trials", trials)->capture_default_str();
  app.add_option("--functions", functions)
      ->delimiter(',')
      ->check(CLI::IsMember(all_functions))
      ->capture_default_str();
  app.add_option("--samplers", sampler_names)
      ->delimiter(',')
      ->check(CLI::IsMember(all_samplers))
      ->capture_default_str();
  app.add_option("--json", json_path, "the curves, for bench/tune_compare.py");
  CLI11_PARSE(app, argc, argv);
  nlohmann::json out = {
      {"source", "trainkit"}, {"seeds", seeds}, {"first_seed", first_seed}, {"trials", trials}};
  for (const auto& function : functions) {
    const double best = front_hypervolume(function);
    out["results"][function]["optimum"] = 0.0;
    for (const auto& name : sampler_names) {
      std::vector<std::vector<double>> curves;
      double overhead_s = 0;
      for (int seed = first_seed; seed < first_seed + seeds; ++seed)
        curves.push_back(samplers().at(name)(function, uint64_t(seed), trials, best, overhead_s));
      const double ms = 1e3 * overhead_s / double(seeds * trials);
      out["results"][function][name] = {{"best_so_far", curves}, {"overhead_ms_per_trial", ms}};
      std::vector<double> last;
      for (const auto& c : curves) last.push_back(c.back());
      std::sort(last.begin(), last.end());
      std::printf(
          "%s %s: hypervolume gap after %d trials, median %.4g (front %.4f); %.2f ms "
          "per trial\n",
          function.c_str(), name.c_str(), trials, last[last.size() / 2], best, ms);
      std::fflush(stdout);
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump() << "\n";
  return 0;
}
