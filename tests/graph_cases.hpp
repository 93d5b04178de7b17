#pragma once
// The captured-step checks shared by the CPU tests (graph_test.cpp, where
// capture::CudaGraph's `emulate` replays the recorded body by running it
// again) and the CUDA ones (cuda_test.cpp, real CUDA graphs): a recorded
// step equals the eager one, an fp16 step that meets inf skips the update,
// and a recorded run resumes from a checkpoint like an unbroken one.
#include <trainkit/io.hpp>
#include <trainkit/trainkit.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <type_traits>

#include "support.hpp"

namespace tk_test {

inline std::vector<trainkit::data::Batch> graph_batches(int n, uint64_t seed = 3) {
  auto gen = trainkit::data::generator(seed);
  std::vector<trainkit::data::Batch> out;
  for (int i = 0; i < n; ++i)
    out.push_back({at::randn({16, 8}, gen), at::randint(0, 3, {16}, gen)});
  return out;
}

/// Records the run's configuration at on_fit_begin.
struct ConfigProbe {
  std::map<std::string, std::string>* out;
  void on_fit_begin(trainkit::TrainState& s) { *out = s.config; }
};

/// AdamW with ATen's fused kernel, OneCycle without momentum cycling,
/// clipping and Every<2>: the captured setting, eager or captured.
template <class Parallel, class Capture = trainkit::capture::None>
using SettingTrainer =
    trainkit::Trainer<trainkit::optim::AdamW, trainkit::sched::OneCycle, trainkit::precision::Fp32,
                      trainkit::accumulate::Every<2>, trainkit::clip::Norm, Parallel, Capture>;
using EagerTrainer = SettingTrainer<trainkit::parallel::Single>;
using GraphTrainer = SettingTrainer<trainkit::parallel::Single, trainkit::capture::CudaGraph>;

/// The setting's options on `device` (a CPU emulates the graph), with a
/// parameter group of its own weight decay and rate (each group's rate on
/// the device). LibTorch
/// < 2.4 has no fused kernels: there the option stays unset and the
/// fallback tests still run.
template <class T = GraphTrainer>
typename T::Options setting_options(torch::Device device = torch::kCPU) {
  const auto fused = TRAINKIT_HAS_FUSED_OPTIMIZERS ? std::optional<bool>(true) : std::nullopt;
  typename T::Options o{
      .optim = {.lr = 1e-2, .fused = fused},
      .sched = {.max_lr = 2e-2, .cycle_momentum = false},
      .clip = {.max_norm = 0.5},
      .param_groups = {
          {"biases", trainkit::params::below_2d(), {.weight_decay = 0.0, .max_lr = 1e-2}}}};
  o.parallel.device = device;
  if constexpr (std::is_same_v<T, GraphTrainer>) o.capture.emulate = device.is_cpu();
  return o;
}

inline void check_graph_equals_eager(torch::Device device) {
  using namespace trainkit;
  const auto data = graph_batches(41);  // 20 full windows of 2, then one micro-batch
  EagerTrainer eager(seeded_mlp(), setting_options<EagerTrainer>(device));
  GraphTrainer graph(seeded_mlp(), setting_options(device));
  std::map<std::string, std::string> config;
  const auto a = eager.fit(task::Classification{}, data, {.epochs = 1});
  const auto b = graph.fit(task::Classification{}, data, {.epochs = 1}, ConfigProbe{&config});
  CHECK(graph.graph_recorded());
  CHECK(graph.graph_fallback_reason().empty());
  CHECK(config.at("cuda_graph") ==
        std::string(device.is_cpu() ? "emulated" : "captured") + " after 3 eager steps");
  CHECK(b.steps == 21);
  CHECK(graph.graph_replays() == 16);  // 21 steps: 3 warm-up, the probe, the partial window
  CHECK(graph.optimizer().steps_taken() == 21);
  const double err = max_param_rel_error(eager.model(), graph.model());
  MESSAGE("max relative parameter difference, recorded vs eager: " << err);
  CHECK(err < 1e-5);
  CHECK(b.metrics.at("train_loss") == doctest::Approx(a.metrics.at("train_loss")).epsilon(1e-6));
  CHECK(graph.optimizer().lr() == eager.optimizer().lr());
  // the group peaks at its own max_lr, half the default group's (a rate of
  // its own on the device), without weight decay
  CHECK(graph.optimizer().lr(1) == eager.optimizer().lr(1));
  CHECK(graph.optimizer().lr(1) == doctest::Approx(graph.optimizer().lr(0) / 2).epsilon(1e-9));
  CHECK(graph.optimizer().options(1).weight_decay == 0.0);
}

inline void check_graph_inf_skip(torch::Device device) {
  using namespace trainkit;
  using Eager = Trainer<optim::AdamW, sched::Constant, precision::Fp16>;
  using Graph = TrainerWith<precision::Fp16, capture::CudaGraph>;
  auto data = graph_batches(12);
  data[8].input[0][0] = INFINITY;  // a replayed step: after 3 eager ones and the probe
  const auto options = [&]<class T>(std::type_identity<T>) {
    typename T::Options o{
        .optim = {.lr = 1e-2, .fused = true},
        .precision = {.autocast = device.is_cuda(), .scaler = {.init_scale = 1024}}};
    o.parallel.device = device;
    if constexpr (std::is_same_v<T, Graph>) o.capture.emulate = device.is_cpu();
    return o;
  };
  Eager eager(seeded_mlp(), options(std::type_identity<Eager>{}));
  Graph graph(seeded_mlp(), options(std::type_identity<Graph>{}));
  eager.fit(task::Classification{}, data);
  graph.fit(task::Classification{}, data);
  CHECK(graph.graph_recorded());
  CHECK(graph.graph_replays() == 8);
  CHECK(graph.optimizer().steps_taken() == 11);  // 12 steps, one skipped
  CHECK(eager.optimizer().steps_taken() == 11);
  CHECK(graph.precision().scaler().scale_value() == 512.0);  // backed off once
  CHECK(eager.precision().scaler().scale_value() == 512.0);
  CHECK(max_param_rel_error(eager.model(), graph.model()) < 1e-5);
}

/// Saves a checkpoint at step 7 and stops there.
struct StopAtStep7 {
  std::filesystem::path file;
  void on_step_end(trainkit::TrainState& s) {
    if (s.step != 7) return;
    s.save_checkpoint(file);
    s.request_stop("interrupted");
  }
};

inline void check_graph_resume(torch::Device device) {
  using namespace trainkit;
  const auto file = temp_dir("graph_resume_" + device.str()) / "step7.ckpt";
  const auto data = graph_batches(40);
  GraphTrainer unbroken(seeded_mlp(), setting_options(device));
  unbroken.fit(task::Classification{}, data, {.epochs = 2});
  GraphTrainer first(seeded_mlp(), setting_options(device));
  first.fit(task::Classification{}, data, {.epochs = 2}, StopAtStep7{file});
  CHECK(first.graph_recorded());
  GraphTrainer resumed(seeded_mlp(99), setting_options(device));
  const auto r = resumed.fit(task::Classification{}, data, {.epochs = 2, .resume_from = file});
  CHECK(resumed.graph_recorded());
  CHECK(r.steps == 40);
  CHECK(resumed.optimizer().steps_taken() == 40);
  CHECK(max_param_rel_error(unbroken.model(), resumed.model()) < 1e-5);
}

/// Reads the device between backward and the step: steps cannot be captured.
struct HostReader {
  void on_before_step(trainkit::TrainState& s) { (void)s.loss(); }
};

inline void check_host_reader_fallback(torch::Device device) {
  std::map<std::string, std::string> config;
  GraphTrainer t(seeded_mlp(), setting_options(device));
  const auto r = t.fit(trainkit::task::Classification{}, graph_batches(8), {}, HostReader{},
                       ConfigProbe{&config});
  CHECK(r.steps == 4);
  CHECK_FALSE(t.graph_recorded());
  CHECK(t.graph_fallback_reason().find("on_before_step") != std::string::npos);
  CHECK(config.at("cuda_graph") == "eager: " + t.graph_fallback_reason());
}

/// Muon, Lamb, Lars and ScheduleFreeAdamW step on the device once
/// capturable (optim/detail/device_step.hpp), each here with two parameter
/// groups, OneCycle moving both rates every step, clipping and Every<2>.
template <class Optimizer, class Precision = trainkit::precision::Fp32,
          class Capture = trainkit::capture::None>
using DeviceStepTrainer = trainkit::Trainer<Optimizer, trainkit::sched::OneCycle, Precision,
                                            trainkit::accumulate::Every<2>, trainkit::clip::Norm,
                                            trainkit::parallel::Single, Capture>;

template <class T>
typename T::Options device_step_options(torch::Device device) {
  using namespace trainkit;
  using Optimizer = std::remove_cvref_t<decltype(std::declval<T&>().optimizer())>;
  typename T::Options o;
  if constexpr (std::is_same_v<Optimizer, optim::Muon>) {
    o.optim.lr = 0.02;
    o.optim.adamw.lr = 1e-2;
    o.param_groups = {optim::Muon::hidden_matrices()};
  } else if constexpr (std::is_same_v<Optimizer, optim::ScheduleFreeAdamW>) {
    o.optim = {.lr = 1e-2, .weight_decay = 0.01, .warmup_steps = 4};
    o.param_groups = {{"biases", params::below_2d(), {.lr_scale = 0.5, .weight_decay = 0.0}}};
  } else {  // Lamb, Lars: the trust ratio off for biases
    o.optim.lr = std::is_same_v<Optimizer, optim::Lars> ? 0.1 : 1e-2;
    o.param_groups = {params::no_trust_ratio()};
  }
  o.sched.cycle_momentum = false;  // the momentum is a number in the recorded step
  o.clip.max_norm = 0.5;
  if constexpr (requires { o.precision.scaler; }) {
    o.precision = {.autocast = device.is_cuda(), .scaler = {.init_scale = 1024}};
  }
  o.parallel.device = device;
  if constexpr (requires { o.capture.emulate; }) o.capture.emulate = device.is_cpu();
  return o;
}

/// A recorded run equals the eager one (fp32), and with fp16's loss scale a
/// replayed step that meets inf changes nothing, not even the step count.
template <class Optimizer>
void check_device_step_equals_eager(torch::Device device) {
  using namespace trainkit;
  using Eager = DeviceStepTrainer<Optimizer>;
  using Graph = DeviceStepTrainer<Optimizer, precision::Fp32, capture::CudaGraph>;
  const auto data = graph_batches(41);  // 20 full windows of 2, then one micro-batch
  Eager eager(seeded_mlp(), device_step_options<Eager>(device));
  Graph graph(seeded_mlp(), device_step_options<Graph>(device));
  const auto a = eager.fit(task::Classification{}, data);
  const auto b = graph.fit(task::Classification{}, data);
  CHECK(graph.graph_fallback_reason().empty());
  CHECK(graph.graph_replays() == 16);  // 21 steps: 3 warm-up, the probe, the partial window
  CHECK(graph.optimizer().steps_taken() == 21);
  const double err = max_param_rel_error(eager.model(), graph.model());
  MESSAGE("max relative parameter difference, recorded vs eager: " << err);
  CHECK(err < 1e-5);
  CHECK(b.metrics.at("train_loss") == doctest::Approx(a.metrics.at("train_loss")).epsilon(1e-6));

  using Eager16 = DeviceStepTrainer<Optimizer, precision::Fp16>;
  using Graph16 = DeviceStepTrainer<Optimizer, precision::Fp16, capture::CudaGraph>;
  auto spiked = graph_batches(24);
  spiked[16].input[0][0] = INFINITY;  // window 9: a replayed step
  Eager16 eager16(seeded_mlp(), device_step_options<Eager16>(device));
  Graph16 graph16(seeded_mlp(), device_step_options<Graph16>(device));
  eager16.fit(task::Classification{}, spiked);
  graph16.fit(task::Classification{}, spiked);
  CHECK(graph16.graph_replays() == 8);
  CHECK(graph16.optimizer().steps_taken() == 11);  // 12 windows, one skipped
  CHECK(eager16.optimizer().steps_taken() == 11);
  CHECK(graph16.precision().scaler().scale_value() == 512.0);
  CHECK(max_param_rel_error(eager16.model(), graph16.model()) < 1e-5);
}

/// A recorded run stopped after its step was recorded, its checkpoint
/// (step counts and sums read from the device) resumed into a new trainer,
/// equals an unbroken run.
template <class Optimizer>
void check_device_step_resume(torch::Device device) {
  using namespace trainkit;
  using Graph = DeviceStepTrainer<Optimizer, precision::Fp32, capture::CudaGraph>;
  const auto file =
      temp_dir("device_step_resume_" + device.str()) /
      (std::string(Optimizer::stable_name(std::type_identity<Optimizer>{})).substr(17) + ".ckpt");
  const auto data = graph_batches(40);
  Graph unbroken(seeded_mlp(), device_step_options<Graph>(device));
  unbroken.fit(task::Classification{}, data, {.epochs = 2});
  Graph first(seeded_mlp(), device_step_options<Graph>(device));
  first.fit(task::Classification{}, data, {.epochs = 2}, StopAtStep7{file});
  CHECK(first.graph_recorded());
  Graph resumed(seeded_mlp(99), device_step_options<Graph>(device));
  const auto r = resumed.fit(task::Classification{}, data, {.epochs = 2, .resume_from = file});
  CHECK(resumed.graph_recorded());
  CHECK(r.steps == 40);
  CHECK(resumed.optimizer().steps_taken() == 40);
  CHECK(max_param_rel_error(unbroken.model(), resumed.model()) < 1e-5);
}

}  // namespace tk_test
