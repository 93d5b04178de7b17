// One rank of a fully sharded run that tests/hosts/faults_test.sh breaks:
//   fault_worker CHECKPOINT_DIR TIMEOUT_SECONDS [KILL_BEFORE STEP]
// A small MLP (two units) trains one slow step after another (40 ms of
// sleep each, so that a fault lands mid-run) for at most a minute, saving
// a checkpoint every 4 steps. It prints `rank R: step S` after each step,
// and, when a collective fails, `rank R: error at T: WHAT` (T: Unix time,
// for the test's delays) and exits 3. With KILL_BEFORE ("reduce-scatter"
// or "all-gather") the last rank SIGKILLs itself just before its first
// collective of that kind at step STEP.
#include <torch/torch.h>

#include <trainkit/callbacks/model_checkpoint.hpp>
#include <trainkit/data.hpp>
#include <trainkit/parallel/full_shard.hpp>
#include <trainkit/trainkit.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
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

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: fault_worker DIR TIMEOUT_SECONDS [KILL_BEFORE STEP]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const auto timeout = std::chrono::milliseconds(std::lround(std::stod(argv[2]) * 1000));
  const std::string kill_before = argc == 5 ? argv[3] : "";
  const int64_t kill_step = argc == 5 ? std::stoll(argv[4]) : -1;
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
  tk::Trainer<tk::optim::AdamW, tk::sched::Constant, tk::precision::Fp32, tk::accumulate::None,
              tk::clip::None, tk::parallel::FullShard>
      trainer(model, {.optim = {.lr = 1e-3}, .parallel = {.group = group}});
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
