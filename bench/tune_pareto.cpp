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
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numbers>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

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

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
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

}  // namespace

int main(int argc, char** argv) {
  int seeds = 10, first_seed = 0, trials = 200;
  std::string functions = "zdt1,zdt2,zdt3", samplers = "random,nsga2,motpe", json_path;
  // the defaults name every function and sampler
  const std::string usage =
      "; usage: bench_tune_pareto [--seeds S] [--first-seed K] [--trials N] "
      "[--functions " +
      functions + "] [--samplers " + samplers + "] [--json out.json]";
  const auto fail = [](const std::string& why) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return 2;
  };
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 == argc) return fail("bench_tune_pareto: " + k + " without a value" + usage);
    const std::string v = argv[i + 1];
    if (k == "--seeds")
      seeds = std::atoi(v.c_str());
    else if (k == "--first-seed")  // seeds K .. K+S-1, to add to an earlier run
      first_seed = std::atoi(v.c_str());
    else if (k == "--trials")
      trials = std::atoi(v.c_str());
    else if (k == "--functions")
      functions = v;
    else if (k == "--samplers")
      samplers = v;
    else if (k == "--json")
      json_path = v;
    else
      return fail("bench_tune_pareto: unknown flag " + k + usage);
  }
  nlohmann::json out = {
      {"source", "trainkit"}, {"seeds", seeds}, {"first_seed", first_seed}, {"trials", trials}};
  for (const auto& function : split(functions)) {
    if (function != "zdt1" && function != "zdt2" && function != "zdt3")
      throw std::runtime_error("bench_tune_pareto: unknown function " + function);
    const double best = front_hypervolume(function);
    out["results"][function]["optimum"] = 0.0;
    for (const auto& name : split(samplers)) {
      std::vector<std::vector<double>> curves;
      double overhead_s = 0;
      for (int seed = first_seed; seed < first_seed + seeds; ++seed) {
        if (name == "random")
          curves.push_back(
              run(function, sampler::Random({.seed = uint64_t(seed)}), trials, best, overhead_s));
        else if (name == "nsga2")
          curves.push_back(
              run(function, sampler::NsgaII({.seed = uint64_t(seed)}), trials, best, overhead_s));
        else if (name == "motpe")
          curves.push_back(
              run(function, sampler::Tpe({.seed = uint64_t(seed)}), trials, best, overhead_s));
        else
          throw std::runtime_error("bench_tune_pareto: unknown sampler " + name);
      }
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
