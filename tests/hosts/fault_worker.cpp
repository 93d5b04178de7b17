// One rank of a multi-host run that the tests in tests/hosts/ break:
//   fault_worker fault DIR TIMEOUT_SECONDS [KILL_BEFORE STEP]
//   fault_worker shrink DIR OUT [RESUME]
// Both train a small MLP (two units) fully sharded, one step after another
// with 40 ms of sleep (so that a fault lands mid-run), printing `rank R:
// step S` after each step.
//
// fault (tests/hosts/faults_test.sh): up to three epochs, a checkpoint every
// 4 steps in DIR. When a collective fails it prints `rank R: error at T:
// WHAT` (T: Unix time, for the test's delays) and exits 3. With KILL_BEFORE
// ("reduce-scatter" or "all-gather") the last rank SIGKILLs itself just
// before its first collective of that kind at step STEP.
//
// shrink (tests/hosts/shrink_test.sh): two epochs of 512 samples, a
// sharded checkpoint every 4 steps in DIR (all kept), resumed from DIR when
// it holds one or from the checkpoint RESUME. It prints `rank R: attempt A
// starts at step S` (A: torchrun's restarts or Slurm's requeues), writes
// each step's sample indices to OUT/seen.A.W.S.R (W: the world size) as
// ` i i ... | STEP EPOCH` (tests/hosts/trained_once.awk reads them), and
// rank 0 writes the final parameters to OUT/final.pt.
#include <torch/torch.h>

#include <trainkit/callbacks/model_checkpoint.hpp>
#include <trainkit/data.hpp>
#include <trainkit/io/torch_save.hpp>
#include <trainkit/parallel/full_shard.hpp>
#include <trainkit/trainkit.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "../ddp/worker_support.hpp"

namespace tk = trainkit;

namespace {

struct Mlp : torch::nn::Module {
  torch::nn::Linear a{register_module("a", torch::nn::Linear(16, 64))};
  torch::nn::Linear b{register_module("b", torch::nn::Linear(64, 1))};
  torch::Tensor forward(const torch::Tensor& x) {
    const auto h = tk::parallel::unit(a, [&] { return torch::relu(a(x)); });
    return tk::parallel::unit(b, [&] { return b(h); });
  }
};

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct SlowSteps {
  int rank;
  int64_t* computing;  ///< the step being computed, for KILL_BEFORE
  void on_step_end(tk::TrainState& state) const {
    std::printf("rank %d: step %lld\n", rank, static_cast<long long>(state.step));
    std::fflush(stdout);
    *computing = state.step + 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
};

using Trainer = tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32,
                            tk::accumulate::None, tk::clip::None, tk::parallel::FullShard>;

int fault(const std::string& dir, double timeout_seconds, const std::string& kill_before,
          int64_t kill_step) {
  const auto timeout = std::chrono::milliseconds(std::lround(timeout_seconds * 1000));
  const int rank = worker::rank_env();
  const bool victim = rank == worker::world_env() - 1;
  torch::set_num_threads(1);
  torch::manual_seed(0);
  auto model = std::make_shared<Mlp>();
  const auto x = torch::randn({4096, 16});
  const auto y = x.sum(1, true).sin();
  tk::data::Loader data(tk::data::TensorDataset({x, y}),
                        tk::data::DistributedSampler({.size = x.size(0), .seed = 1}),
                        {.batch_size = 8});
  int64_t step = 1;
  auto group = worker::ddp_options(0, timeout);
  group.before_collective = [&](const std::string& collective) {
    if (victim && step == kill_step && !kill_before.empty() &&
        collective.rfind(kill_before, 0) == 0) {
      std::printf("rank %d: killed before %s at %.3f\n", rank, collective.c_str(), unix_now());
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
  };
  Trainer trainer(model, {.optim = {.lr = 1e-3}, .parallel = {.group = group}});
  try {
    trainer.fit(tk::task::Regression{}, data, {.epochs = 3},
                tk::callbacks::ModelCheckpoint({.dir = dir, .save_every = 4, .keep_last = 2}),
                SlowSteps{rank, &step});
  } catch (const tk::Error& e) {
    std::printf("rank %d: error at %.3f: %s\n", rank, unix_now(), e.what());
    std::fflush(stdout);
    return 3;
  }
  std::printf("rank %d: finished\n", rank);
  return 0;
}

/// This run's restarts so far: torchrun's, else Slurm's (a requeued job).
std::string attempt() {
  for (const char* name : {"TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"})
    if (const char* count = std::getenv(name)) return count;
  return "0";
}

/// This process's record of the samples it trained, opened once training
/// starts: its name carries the step it resumed at. torchrun restarts a
/// group without counting an attempt when a host joins late, so attempt and
/// rank alone do not name one process's records.
struct Records {
  std::filesystem::path out;
  std::unique_ptr<std::FILE, decltype(&std::fclose)> file{nullptr, &std::fclose};
};

/// Regression that writes each training batch's sample indices (input
/// column 0 holds index / 512, exact in floats).
struct RecordedRegression {
  Records* records;
  tk::StepOutput step(tk::ModelRef& model, const tk::data::Batch& b) const {
    if (at::GradMode::is_enabled()) {
      worker::check(records->file != nullptr, "a training step before on_fit_begin");
      const auto indices = (b.input.select(1, 0) * 512).round().to(at::kLong).contiguous();
      for (const int64_t i : c10::ArrayRef<int64_t>(indices.data_ptr<int64_t>(), indices.numel()))
        std::fprintf(records->file.get(), " %lld", static_cast<long long>(i));
    }
    return tk::task::Regression{}.step(model, b);
  }
};

struct EndOfStep {
  Records* records;
  tk::parallel::Environment environment;
  void on_fit_begin(tk::TrainState& state) const {
    const auto restarts = attempt();
    const auto name = "seen." + restarts + "." + std::to_string(environment.world_size) + "." +
                      std::to_string(state.step) + "." + std::to_string(environment.rank);
    records->file.reset(std::fopen((records->out / name).c_str(), "w"));
    worker::check(records->file != nullptr, "cannot write " + (records->out / name).string());
    std::printf("rank %d: attempt %s starts at step %lld\n", environment.rank, restarts.c_str(),
                static_cast<long long>(state.step));
    std::fflush(stdout);
  }
  void on_step_end(tk::TrainState& state) const {
    std::fprintf(records->file.get(), " | %lld %lld\n", static_cast<long long>(state.step),
                 static_cast<long long>(state.epoch));
    std::fflush(records->file.get());
  }
};

int shrink(const std::filesystem::path& dir, const std::filesystem::path& out,
           const std::filesystem::path& resume) {
  const auto environment = tk::parallel::Environment::detect();  // torchrun's, or Slurm's
  const int rank = environment.rank;
  torch::set_num_threads(1);
  torch::manual_seed(0);
  auto model = std::make_shared<Mlp>();
  auto x = torch::randn({512, 16});
  x.select(1, 0).copy_(torch::arange(512, at::kFloat) / 512);
  const auto y = x.sum(1, true).sin();
  tk::data::Loader data(tk::data::TensorDataset({x, y}),
                        tk::data::DistributedSampler({.size = x.size(0), .seed = 1}),
                        {.batch_size = 8});
  // 10 s, not 60: the survivors of a dead host wait for its ranks' answers
  // to a roll call until 2 s past the timeout (at most 30 s) before restarting.
  Trainer trainer(model, {.optim = {.lr = 1e-3},
                          .parallel = {.group = worker::ddp_options(0, std::chrono::seconds(10))}});
  std::filesystem::create_directories(out);
  Records records{out};
  int64_t step = 1;
  trainer.fit(RecordedRegression{&records}, data,
              {.epochs = 2,
               .resume_from = resume.empty() ? dir : resume,
               .resume_if_present = resume.empty()},
              tk::callbacks::ModelCheckpoint({.dir = dir, .save_every = 4, .keep_last = 0}),
              EndOfStep{&records, environment}, SlowSteps{rank, &step});
  [[maybe_unused]] auto whole = tk::parallel::gathered_parameters(trainer.parallel());
  if (rank == 0) {
    tk::io::NamedTensors params;
    for (const auto& item : model->named_parameters())
      params.emplace_back(item.key(), item.value());
    tk::io::save_torch_save(out / "final.pt", params);
  }
  trainer.parallel().barrier("final parameters written");
  std::printf("rank %d: finished\n", rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "fault" && (argc == 4 || argc == 6))
      return fault(argv[2], std::stod(argv[3]), argc == 6 ? argv[4] : "",
                   argc == 6 ? std::stoll(argv[5]) : -1);
    if (mode == "shrink" && (argc == 4 || argc == 5))
      return shrink(argv[2], argv[3], argc == 5 ? argv[4] : "");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault_worker: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: fault_worker fault DIR TIMEOUT_SECONDS [KILL_BEFORE STEP]\n"
               "       fault_worker shrink DIR OUT [RESUME]\n");
  return 2;
}
