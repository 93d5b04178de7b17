// The tune samplers on three standard test functions: Branin (2-d),
// Hartmann-6 and Rosenbrock-10, and a conditional space (`conditional`: a
// branch choice, then each branch's own parameters), each sampler over S
// seeds of N trials.
// Prints, per function and sampler, the regret (best value found minus the
// known optimum) after 25, 50 and 100 trials (median and quartiles over the
// seeds) and the sampler's overhead per trial: the study's wall time minus
// the objective's own. --json writes the per-seed best-so-far curves in the
// format of bench/tune_optuna.py, which bench/tune_compare.py compares.
//
//   bench_tune_samplers --seeds 20 --trials 100 --functions branin,hartmann6
//                       --samplers random,halton,tpe,gp --json trainkit.json
//
// --fail-above F: the objective throws where the first parameter is above
// the fraction F of its range (a region where training fails); the failed
// trials are counted; tpe and gp count them as the worst result
// (TpeOptions/GpOptions::failed_as_worst), tpe_ignore_failed and
// gp_ignore_failed ignore them, as Optuna does.
//
// --workers N --objective-ms M: N threads share the study (n_threads) and
// each objective call sleeps M ms, so trials overlap as parallel training
// runs do; tpe_no_liar and gp_no_liar leave the running trials out (no
// constant liar). Regret is then counted in trial-number order.
//
// LibTorch (through gp.hpp) before everything else, as tests/tune/gp_test.cpp.
#include <trainkit/tune/samplers/gp.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numbers>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <trainkit/tune/pruners/none.hpp>
#include <trainkit/tune/samplers/halton.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/samplers/tpe.hpp>
#include <trainkit/tune/storage.hpp>
#include <trainkit/tune/study.hpp>

using namespace trainkit::tune;
using Clock = std::chrono::steady_clock;

namespace {

double branin(const std::vector<double>& x) {
  const double pi = std::numbers::pi;
  const double b = 5.1 / (4 * pi * pi), c = 5 / pi, t = 1 / (8 * pi);
  return std::pow(x[1] - b * x[0] * x[0] + c * x[0] - 6, 2) + 10 * (1 - t) * std::cos(x[0]) + 10;
}

double hartmann6(const std::vector<double>& x) {
  static constexpr std::array<double, 4> alpha = {1.0, 1.2, 3.0, 3.2};
  static constexpr double a[4][6] = {{10, 3, 17, 3.5, 1.7, 8},
                                     {0.05, 10, 17, 0.1, 8, 14},
                                     {3, 3.5, 1.7, 10, 17, 8},
                                     {17, 8, 0.05, 10, 0.1, 14}};
  static constexpr double p[4][6] = {{1312, 1696, 5569, 124, 8283, 5886},
                                     {2329, 4135, 8307, 3736, 1004, 9991},
                                     {2348, 1451, 3522, 2883, 3047, 6650},
                                     {4047, 8828, 8732, 5743, 1091, 381}};
  double total = 0;
  for (int i = 0; i < 4; ++i) {
    double inner = 0;
    for (int j = 0; j < 6; ++j) inner += a[i][j] * std::pow(x[j] - 1e-4 * p[i][j], 2);
    total += alpha[i] * std::exp(-inner);
  }
  return -total;
}

double rosenbrock(const std::vector<double>& x) {
  double total = 0;
  for (size_t i = 0; i + 1 < x.size(); ++i)
    total += 100 * std::pow(x[i + 1] - x[i] * x[i], 2) + std::pow(1 - x[i], 2);
  return total;
}

// A conditional space (what group = true models): a branch choice, then the
// branch's own parameters: Branin (the optimum, 0.398), Hartmann-6 raised by
// 4 (0.678), or a log-scale quadratic in an int and a float (2, easy to find).
double conditional(Trial& t) {
  const auto branch = t.suggest_categorical("branch", {"branin", "hartmann", "quadratic"});
  if (branch == "branin")
    return branin({t.suggest_float("branin_x0", -5, 10), t.suggest_float("branin_x1", 0, 15)});
  if (branch == "hartmann") {
    std::vector<double> x;
    for (int j = 0; j < 6; ++j)
      x.push_back(t.suggest_float("hartmann_x" + std::to_string(j), 0, 1));
    return hartmann6(x) + 4;
  }
  const auto n = t.suggest_int("quadratic_n", 1, 32, {.log = true});
  const double lr = t.suggest_float("quadratic_lr", 1e-5, 1, {.log = true});
  return std::pow(std::log10(lr) + 3, 2) + std::pow(std::log2(static_cast<double>(n)) - 3, 2) / 4 +
         2;
}

struct TestFunction {
  std::string name;
  std::function<double(const std::vector<double>&)> f;
  std::vector<std::pair<double, double>> bounds;
  double optimum;
  std::function<double(Trial&)> by_run{};  ///< set: the objective suggests its own space
};

// Same definitions, bounds and optima (to double precision: a rounded
// optimum puts a floor under the regret) as bench/tune_optuna.py.
std::vector<TestFunction> all_functions() {
  return {
      {"branin", branin, {{-5, 10}, {0, 15}}, 0.39788735772973816},
      {"hartmann6", hartmann6, std::vector<std::pair<double, double>>(6, {0, 1}),
       -3.3223680114155147},
      {"rosenbrock10", rosenbrock, std::vector<std::pair<double, double>>(10, {-2.048, 2.048}),
       0.0},
      {"conditional", nullptr, {}, 0.39788735772973816, conditional},
  };
}

struct Run {
  std::vector<double> best_so_far;  // one per trial
  double overhead_s = 0;            // wall time minus the objective's, whole study
  int64_t failed = 0;               // trials that failed (--fail-above)
};

double fail_above = 1;    // --fail-above: the objective fails above this fraction of x0's range
int workers = 1;          // --workers: threads sharing the study
double objective_ms = 0;  // --objective-ms: each objective call's sleep

template <class S>
Run run_study(S sampler, const TestFunction& fn, int64_t n_trials) {
  std::vector<std::string> names;
  // (not "x" + to_string: GCC 12 at -O3 warns of an impossible overlap there, -Wrestrict)
  for (size_t j = 0; j < fn.bounds.size(); ++j)
    names.push_back(std::string("x").append(std::to_string(j)));
  double objective_s = 0;
  std::mutex objective_mutex;
  auto objective = [&](Trial& t) {
    if (fn.by_run) return fn.by_run(t);
    std::vector<double> x;
    for (size_t j = 0; j < names.size(); ++j)
      x.push_back(t.suggest_float(names[j], fn.bounds[j].first, fn.bounds[j].second));
    const auto& [low, high] = fn.bounds[0];
    if (x[0] > low + fail_above * (high - low)) throw std::runtime_error("a failing region");
    const auto start = Clock::now();
    const double v = fn.f(x);
    if (objective_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(objective_ms));
    std::lock_guard lock(objective_mutex);
    objective_s += std::chrono::duration<double>(Clock::now() - start).count();
    return v;
  };
  Study study(std::make_shared<InMemoryStorage>(), {.name = fn.name}, std::move(sampler),
              pruner::None{});
  const auto start = Clock::now();
  // heartbeat_s = 0: no heartbeat thread (one process, nothing to keep alive).
  study.optimize(objective, {.n_trials = n_trials,
                             .n_threads = workers,
                             .catch_exceptions = true,
                             .heartbeat_s = 0,
                             .log = nullptr});
  Run run;
  run.overhead_s = std::chrono::duration<double>(Clock::now() - start).count() - objective_s;
  auto trials = study.trials();
  std::sort(trials.begin(), trials.end(),
            [](const auto& a, const auto& b) { return a.number < b.number; });
  double best = std::numeric_limits<double>::infinity();
  for (const auto& t : trials) {
    if (t.state == TrialState::Complete && t.value) best = std::min(best, *t.value);
    run.failed += t.state == TrialState::Fail;
    run.best_so_far.push_back(best);
  }
  return run;
}

Run run_sampler(const std::string& sampler, uint64_t seed, const TestFunction& fn,
                int64_t n_trials) {
  if (sampler == "random") return run_study(sampler::Random({.seed = seed}), fn, n_trials);
  if (sampler == "halton") return run_study(sampler::Halton({.seed = seed}), fn, n_trials);
  if (sampler == "tpe") {
    sampler::TpeOptions
        o;  // trainkit's defaults (Optuna 3.1's but for the liar and failed_as_worst)
    o.seed = seed;
    return run_study(sampler::Tpe(std::move(o)), fn, n_trials);
  }
  if (sampler == "tpe_true_density") {  // the kernels' true density (Optuna >= 3.5's)
    sampler::TpeOptions o;
    o.seed = seed;
    o.legacy_log_pdf = false;
    return run_study(sampler::Tpe(std::move(o)), fn, n_trials);
  }
  if (sampler == "tpe_ignore_failed") {
    sampler::TpeOptions o;
    o.seed = seed;
    o.failed_as_worst = false;
    return run_study(sampler::Tpe(std::move(o)), fn, n_trials);
  }
  if (sampler == "tpe_no_liar") {
    sampler::TpeOptions o;
    o.seed = seed;
    o.constant_liar = false;
    return run_study(sampler::Tpe(std::move(o)), fn, n_trials);
  }
  if (sampler == "tpe_multivariate" || sampler == "tpe_group") {
    sampler::TpeOptions o;
    o.seed = seed;
    o.multivariate = true;
    o.group = sampler == "tpe_group";
    return run_study(sampler::Tpe(std::move(o)), fn, n_trials);
  }
  if (sampler == "gp") return run_study(sampler::Gp({.seed = seed}), fn, n_trials);
  if (sampler == "gp_group")
    return run_study(sampler::Gp({.seed = seed, .group = true}), fn, n_trials);
  if (sampler == "gp_no_liar")
    return run_study(sampler::Gp({.seed = seed, .constant_liar = false}), fn, n_trials);
  if (sampler == "gp_ignore_failed")
    return run_study(sampler::Gp({.seed = seed, .failed_as_worst = false}), fn, n_trials);
  std::fprintf(
      stderr,
      "unknown sampler %s (random, halton, tpe, tpe_true_density, tpe_ignore_failed, "
      "tpe_no_liar, tpe_multivariate, tpe_group, gp, gp_group, gp_ignore_failed, gp_no_liar)\n",
      sampler.c_str());
  std::exit(2);
}

// Quantile q of v by linear interpolation (numpy's default).
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 20;
  int64_t n_trials = 100;
  std::vector<std::string> functions = {"branin", "hartmann6", "rosenbrock10"};
  std::vector<std::string> samplers = {"random", "halton", "tpe", "gp"};
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", arg.c_str());
      return 2;
    }
    const std::string value = argv[++i];
    if (arg == "--seeds") {
      seeds = std::stoi(value);
    } else if (arg == "--trials") {
      n_trials = std::stoll(value);
    } else if (arg == "--functions") {
      functions = split(value);
    } else if (arg == "--samplers") {
      samplers = split(value);
    } else if (arg == "--json") {
      json_path = value;
    } else if (arg == "--fail-above") {
      fail_above = std::stod(value);
    } else if (arg == "--workers") {
      workers = std::stoi(value);
    } else if (arg == "--objective-ms") {
      objective_ms = std::stod(value);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seeds S] [--trials N] [--functions branin,hartmann6,"
                   "rosenbrock10,conditional] [--samplers random,halton,tpe,gp] [--json out.json] "
                   "[--fail-above F] [--workers N --objective-ms M]\n",
                   argv[0]);
      return 2;
    }
  }

  nlohmann::json out = {
      {"source", "trainkit"}, {"seeds", seeds}, {"trials", n_trials}, {"workers", workers}};
  const auto known = all_functions();
  for (const auto& fname : functions) {
    const auto fn =
        std::find_if(known.begin(), known.end(), [&](const auto& f) { return f.name == fname; });
    if (fn == known.end()) {
      std::fprintf(stderr, "unknown function %s\n", fname.c_str());
      return 2;
    }
    out["results"][fname]["optimum"] = fn->optimum;
    for (const auto& sname : samplers) {
      std::vector<std::vector<double>> curves;
      double overhead_s = 0;
      std::vector<double> failed;
      for (int seed = 0; seed < seeds; ++seed) {
        auto run = run_sampler(sname, static_cast<uint64_t>(seed), *fn, n_trials);
        overhead_s += run.overhead_s;
        failed.push_back(static_cast<double>(run.failed));
        curves.push_back(std::move(run.best_so_far));
      }
      const double overhead_ms =
          1e3 * overhead_s / static_cast<double>(seeds) / static_cast<double>(n_trials);
      out["results"][fname][sname] = {{"best_so_far", curves},
                                      {"overhead_ms_per_trial", overhead_ms}};
      std::ostringstream fields;
      fields << "\"function\": \"" << fname << "\", \"sampler\": \"" << sname
             << "\", \"seeds\": " << seeds << ", \"workers\": " << workers;
      char buf[128];
      for (const int64_t budget : {25, 50, 100}) {
        if (budget > n_trials) continue;
        std::vector<double> regret;
        for (const auto& c : curves)
          regret.push_back(c[static_cast<size_t>(budget - 1)] - fn->optimum);
        std::snprintf(buf, sizeof buf, ", \"regret_%lld\": [%.4g, %.4g, %.4g]", (long long)budget,
                      quantile(regret, 0.25), quantile(regret, 0.5), quantile(regret, 0.75));
        fields << buf;
      }
      std::snprintf(buf, sizeof buf, ", \"overhead_ms_per_trial\": %.3f", overhead_ms);
      fields << buf;
      if (fail_above < 1) {
        std::snprintf(buf, sizeof buf, ", \"failed_trials\": [%.4g, %.4g, %.4g]",
                      quantile(failed, 0.25), quantile(failed, 0.5), quantile(failed, 0.75));
        fields << buf;
      }
      std::printf("{\"bench\": \"tune_sampler_regret\", %s}\n", fields.str().c_str());
      std::fflush(stdout);
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump() << "\n";
  return 0;
}
