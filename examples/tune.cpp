// Tunes the demo CNN on the glyphs: learning rate, weight decay, batch size
// and OneCycle's pct_start, with TPE and ASHA pruning, in a study that lives
// in an SQLite file. Several processes can share it, each on its own GPU
// where there are GPUs (cuda:LOCAL_RANK):
//   scripts/launch.sh --independent -n 2 -- ./build/demo/examples/tune --trials 30
// and it resumes after a crash with every finished trial kept. Writes the
// trial table (CSV, JSON) and an HTML study report beside the database.
// With --objectives accuracy-seconds it searches for speed against accuracy
// instead (multi-objective TPE, NSGA-II or random search; two objectives:
// validation accuracy up, training seconds down) and prints the Pareto front.
// With --space optimizer it also chooses the optimizer, AdamW or SGD, each
// with its own hyperparameters (--group models each branch jointly).
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <trainkit/parallel/environment.hpp>
#include <trainkit/trainkit.hpp>
#include <trainkit/tune.hpp>
#include <trainkit/tune/samplers/gp.hpp>

#include "glyphs.hpp"
#include "models.hpp"

using namespace trainkit;

namespace {

struct Setup {
  int64_t max_epochs = 8;
  int64_t train_size = 6000, val_size = 1000;
  uint64_t seed = 0;
  data::TensorDataset train, val;
};

// One GPU per worker where there are GPUs: scripts/launch.sh --independent
// gives each worker its LOCAL_RANK (more workers than GPUs share them).
std::optional<torch::Device> worker_device() {
  if (!torch::cuda::is_available()) return std::nullopt;
  const int gpus = static_cast<int>(torch::cuda::device_count());
  return torch::Device(torch::kCUDA,
                       c10::DeviceIndex(parallel::Environment::detect().local_rank % gpus));
}

// Rank 0 under a launcher of ranks, LOCAL_RANK 0 of independent workers.
bool is_worker_0() {
  const auto env = parallel::Environment::detect();
  return env.rank == 0 && env.local_rank == 0;
}

// Worker 0 reports on the whole study: the others may still be in their last
// trials (one silent for stale_after_s has lost its worker).
template <class Study>
std::vector<tune::FrozenTrial> whole_study(const Study& study, tune::Storage& db,
                                           double stale_after_s) {
  const bool reporter = is_worker_0();
  for (auto all = study.trials();; all = study.trials()) {
    const bool busy = std::any_of(all.begin(), all.end(), [&](const tune::FrozenTrial& t) {
      return t.state == tune::TrialState::Running &&
             db.seconds_since_heartbeat(t.id) < stale_after_s;
    });
    if (!reporter || !busy) return all;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// The search space: "lr-wd", AdamW's learning rate and weight decay; or
// "optimizer", a conditional space: AdamW or SGD, each with hyperparameters
// of its own (named by it, as their ranges differ). Both add the batch size
// and OneCycle's pct_start.
enum class Space { LrWd, Optimizer };

// Trains one trial's CNN with optimizer policy Optim and the learning rate
// `lr` (OneCycle's peak), with pruning; returns the fit's result and the
// best validation loss.
template <class Optim>
std::pair<FitResult, double> fit_with(tune::Trial& trial, const Setup& s,
                                      typename Optim::Options optim, double lr) {
  const auto batch_size = trial.suggest_categorical("batch_size", {32, 64, 128, 256});
  const double pct_start = trial.suggest_float("pct_start", 0.1, 0.5);
  torch::manual_seed(static_cast<uint64_t>(trial.number) + s.seed);
  SmallCnn model;
  optim.lr = lr;
  Trainer<Optim, sched::OneCycle> trainer(model, {.optim = optim,
                                                  .sched = {.max_lr = lr, .pct_start = pct_start},
                                                  .parallel = {.device = worker_device()}});
  data::TensorBatches train(s.train, {.batch_size = batch_size,
                                      .shuffle = true,
                                      .seed = s.seed + static_cast<uint64_t>(trial.number)});
  data::TensorBatches val(s.val, {.batch_size = 500});
  callbacks::EarlyStopping best(
      {.monitor = "val_loss", .patience = s.max_epochs, .restore_best_weights = false});
  auto result =
      trainer.fit(task::Classification{}, train, {.epochs = s.max_epochs, .val_data = val},
                  tune::Pruning(trial, {.monitor = "val_loss"}), best);
  return {std::move(result), best.best()};
}

// One trial: suggest, train with pruning, return the best validation loss;
// the accuracy and the training time go into the trial's user attrs.
double train_once(tune::Trial& trial, const Setup& s, Space space) {
  const auto start = std::chrono::steady_clock::now();
  const auto [result, best] = [&] {
    if (space == Space::LrWd ||
        trial.suggest_categorical("optimizer", {"adamw", "sgd"}) == "adamw") {
      const std::string prefix = space == Space::LrWd ? "" : "adamw_";
      const double lr = trial.suggest_float(prefix + "lr", 1e-4, 3e-2, {.log = true});
      optim::AdamWOptions o{
          .weight_decay = trial.suggest_float(prefix + "weight_decay", 1e-5, 1e-1, {.log = true})};
      if (space == Space::Optimizer) o.beta2 = trial.suggest_float("adamw_beta2", 0.9, 0.9999);
      return fit_with<optim::AdamW>(trial, s, o, lr);
    }
    const double lr = trial.suggest_float("sgd_lr", 1e-3, 0.3, {.log = true});
    const optim::SGDOptions o{
        .momentum = trial.suggest_float("sgd_momentum", 0.5, 0.99),
        .weight_decay = trial.suggest_float("sgd_weight_decay", 1e-6, 1e-2, {.log = true}),
        .nesterov = trial.suggest_categorical("sgd_nesterov", {false, true})};
    return fit_with<optim::SGD>(trial, s, o, lr);
  }();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  trial.set_user_attr("epochs", result.epochs);  // the compute this trial used
  trial.set_user_attr("val_accuracy", result.metrics.at("val_accuracy"));
  trial.set_user_attr("seconds", seconds);
  return best;
}

// Speed against accuracy: the Pareto front of validation accuracy (up) and
// training seconds (down), searched by multi-objective TPE, NSGA-II or at random.
int speed_against_accuracy(const Setup& s, Space space, const std::shared_ptr<tune::Storage>& db,
                           const std::string& study_name, const std::string& sampler, bool group,
                           int64_t trials, const std::filesystem::path& report_dir) {
  const std::vector directions{tune::Direction::Maximize, tune::Direction::Minimize};
  auto search = [&](auto policy) {
    tune::Study study(db, {.name = study_name, .directions = directions}, std::move(policy));
    const tune::OptimizeOptions o{.max_trials = trials, .retry_failed = 1};
    study.optimize(
        [&](tune::Trial& t) -> std::vector<double> {
          train_once(t, s, space);
          return {t.record().user_attrs.at("val_accuracy").get<double>(),
                  t.record().user_attrs.at("seconds").get<double>()};
        },
        o);
    return std::pair{whole_study(study, *db, o.stale_after_s), study.best_trials()};
  };
  // a small random start: the example's budgets are tens of trials
  const int64_t start = std::max<int64_t>(2, trials / 4);
  const auto [all, front] =
      sampler == "tpe"
          ? search(tune::sampler::Tpe(
                {.seed = s.seed, .n_startup_trials = start, .multivariate = group, .group = group}))
      : sampler == "nsga2"
          ? search(tune::sampler::NsgaII({.population_size = start, .seed = s.seed}))
          : search(tune::sampler::Random({.seed = s.seed}));
  if (!is_worker_0()) return 0;
  tune::StudyReport{report_dir}.write(study_name, directions, all);
  std::printf("study %s: %zu trials, Pareto front of %zu (val_accuracy up, seconds down)\n",
              study_name.c_str(), all.size(), front.size());
  std::printf("report: %s/report.html, trials.csv, trials.json\n", report_dir.c_str());
  if (front.empty()) throw Error("no trial completed");
  for (const auto& t : front) {
    std::printf("front: trial %lld val_accuracy %.4f seconds %.2f params %s\n", (long long)t.number,
                t.values[0], t.values[1], t.param_values().dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainkit tune: hyperparameter search for the demo CNN on the glyphs"};
  Setup s;
  int64_t trials = 30;
  std::string sampler = "tpe", pruner = "asha", storage = "runs/tune/study.db", study_name;
  int threads = 0;
  int64_t reduction_factor = 3;
  app.add_option("--trials", trials, "study budget: trials across all workers")
      ->check(CLI::PositiveNumber);
  app.add_option("--epochs", s.max_epochs, "epochs of a trial that is not pruned")
      ->check(CLI::PositiveNumber);
  app.add_option("--sampler", sampler,
                 "tpe, gp, random, halton; tpe, nsga2 or random for two objectives")
      ->check(CLI::IsMember({"tpe", "gp", "random", "halton", "nsga2"}));
  std::string objectives = "loss";
  app.add_option("--objectives", objectives,
                 "loss (the best validation loss), or accuracy-seconds: validation accuracy "
                 "against training seconds, with --sampler tpe, nsga2 or random and --pruner none")
      ->check(CLI::IsMember({"loss", "accuracy-seconds"}));
  std::string space_name = "lr-wd";
  app.add_option("--space", space_name,
                 "lr-wd: AdamW's learning rate and weight decay; optimizer: AdamW or SGD, each "
                 "with its own hyperparameters (a conditional space). Both add batch size and "
                 "OneCycle's pct_start")
      ->check(CLI::IsMember({"lr-wd", "optimizer"}));
  bool group = false;
  app.add_flag("--group", group,
               "tpe (one or two objectives) and gp model each group of parameters that appear "
               "together (a conditional space's branches; tpe multivariate); refused elsewhere");
  app.add_option("--pruner", pruner, "asha, median, none")
      ->check(CLI::IsMember({"asha", "median", "none"}));
  app.add_option("--storage", storage, "the study's SQLite file");
  app.add_option("--study", study_name,
                 "the study's name in the storage (default cnn; cnn-pareto for "
                 "accuracy-seconds, cnn-optimizer for --space optimizer)");
  app.add_option("--reduction-factor", reduction_factor,
                 "ASHA: a trial goes on past a rung if in the best 1/this there")
      ->check(CLI::Range(int64_t{2}, int64_t{100}));
  app.add_option("--train-size", s.train_size, "glyphs to train on")->check(CLI::PositiveNumber);
  app.add_option("--val-size", s.val_size, "glyphs to validate on")->check(CLI::PositiveNumber);
  app.add_option("--seed", s.seed, "sampler and training seed");
  app.add_option("--threads", threads, "intra-op threads (0: LibTorch's default)");
  std::string evaluate;
  app.add_option("--evaluate", evaluate,
                 "train once with these parameters (a JSON object) and print its value and "
                 "epochs: the objective for another search driver (bench/tune_cnn.py)");
  CLI11_PARSE(app, argc, argv);
  const Space space = space_name == "optimizer" ? Space::Optimizer : Space::LrWd;
  if (threads > 0) torch::set_num_threads(threads);

  try {
    // Only the model-based samplers have groups; elsewhere --group would do nothing.
    if (group && sampler != "tpe" && sampler != "gp")
      throw Error("--group with --sampler " + sampler +
                  ": only a model-based sampler models groups; accepted: --sampler tpe or gp");
    s.train = examples::make_glyphs(s.train_size, /*seed=*/1);
    s.val = examples::make_glyphs(s.val_size, /*seed=*/2);
    if (!evaluate.empty()) {
      tune::Study study(std::make_shared<tune::InMemoryStorage>(), {.name = "evaluate"},
                        tune::sampler::Random{}, tune::pruner::None{});
      study.enqueue(nlohmann::json::parse(evaluate));
      study.optimize([&](tune::Trial& t) { return train_once(t, s, space); },
                     {.n_trials = 1, .log = nullptr});
      const auto t = study.trials().at(0);
      if (!t.value)
        throw Error(std::string("the trial ended ") + tune::to_string(t.state) + ": " +
                    t.system_attrs.dump());
      std::printf("value %.17g epochs %lld\n", *t.value,
                  (long long)t.user_attrs.value("epochs", int64_t{0}));
      return 0;
    }
    if (study_name.empty())
      study_name = objectives != "loss"        ? "cnn-pareto"
                   : space == Space::Optimizer ? "cnn-optimizer"
                                               : "cnn";
    const auto dir = std::filesystem::path(storage).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);
    auto db = std::make_shared<tune::SqliteStorage>(storage);
    const auto report_dir = (dir.empty() ? std::filesystem::path(".") : dir) / study_name;
    const bool two_objective_sampler =
        sampler == "tpe" || sampler == "nsga2" || sampler == "random";
    const bool one_objective_sampler = sampler != "nsga2";
    if (!(objectives == "accuracy-seconds" ? two_objective_sampler : one_objective_sampler))
      throw Error("--sampler " + sampler + " with --objectives " + objectives +
                  "; accepted: tpe, nsga2 or random for accuracy-seconds, tpe, gp, halton or "
                  "random for loss");
    if (objectives == "accuracy-seconds") {
      if (pruner != "none")
        throw Error("--objectives accuracy-seconds with --pruner " + pruner +
                    ": two objectives are not pruned; accepted: --pruner none");
      return speed_against_accuracy(s, space, db, study_name, sampler, group, trials, report_dir);
    }

    auto run = [&](auto sampler_policy, auto pruner_policy) {
      tune::Study study(db, {.name = study_name, .direction = tune::Direction::Minimize},
                        std::move(sampler_policy), std::move(pruner_policy));
      const tune::OptimizeOptions o{.max_trials = trials, .retry_failed = 1};
      study.optimize([&](tune::Trial& t) { return train_once(t, s, space); }, o);
      return whole_study(study, *db, o.stale_after_s);
    };
    auto with_pruner = [&](auto sampler_policy) {
      if (pruner == "asha")
        return run(std::move(sampler_policy),
                   tune::pruner::Asha({.min_resource = 1, .reduction_factor = reduction_factor}));
      if (pruner == "median")
        return run(std::move(sampler_policy), tune::pruner::Median({.n_warmup_steps = 1}));
      return run(std::move(sampler_policy), tune::pruner::None{});
    };
    const auto all =
        sampler == "tpe"      ? with_pruner(tune::sampler::Tpe(
                                    {.seed = s.seed, .multivariate = group, .group = group}))
        : sampler == "gp"     ? with_pruner(tune::sampler::Gp({.seed = s.seed, .group = group}))
        : sampler == "halton" ? with_pruner(tune::sampler::Halton({.seed = s.seed}))
                              : with_pruner(tune::sampler::Random({.seed = s.seed}));

    // Worker 0 (or a lone process) writes the tables and the report.
    if (!is_worker_0()) return 0;
    tune::StudyReport{report_dir}.write(study_name, tune::Direction::Minimize, all);
    int64_t epochs = 0, complete = 0, pruned = 0;
    for (const auto& t : all) {
      epochs += t.user_attrs.value("epochs", int64_t{0});
      complete += t.state == tune::TrialState::Complete;
      pruned += t.state == tune::TrialState::Pruned;
    }
    const auto* best = tune::StudyView{tune::Direction::Minimize, all}.best();
    std::printf(
        "study %s: %zu trials (%lld complete, %lld pruned), %lld epochs trained of %lld without "
        "pruning\n",
        study_name.c_str(), all.size(), (long long)complete, (long long)pruned, (long long)epochs,
        (long long)(all.size() * static_cast<size_t>(s.max_epochs)));
    std::printf("report: %s/report.html, trials.csv, trials.json\n", report_dir.c_str());
    if (!best) throw Error("no trial completed");
    std::printf("best: trial %lld val_loss %.4f val_accuracy %.4f params %s\n",
                (long long)best->number, *best->value, best->user_attrs.value("val_accuracy", 0.0),
                best->param_values().dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tune: %s\n", e.what());
    return 1;
  }
  return 0;
}
