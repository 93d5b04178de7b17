#pragma once
// Trainer<Optimizer, Scheduler, Precision, Accumulate, Clip, Parallel>: the
// step algorithm of docs/design.md over six compile-time policies.
//
//   per micro-batch k of N: to device; defer grad sync unless k is last;
//     autocast { loss = task.step(model, batch) }; backward(loss / N)
//   per boundary: finish sync; unscale; clip (reports the pre-clip norm);
//     step unless inf/NaN; update scale; advance schedule; zero grads
//   an epoch ending inside a window steps with the partial window, rescaled
//   to the mean over the micro-batches seen; nothing reads the device in the
//   hot path. Under parallel::CudaGraph the whole step is one recorded graph
//   once a few eager steps have run (graph_step below).
#include <torch/nn/module.h>
#include <torch/types.h>

#include <c10/util/Type.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainkit/accumulate/none.hpp"
#include "trainkit/clip/none.hpp"
#include "trainkit/concepts.hpp"
#include "trainkit/data/batch_view.hpp"
#include "trainkit/detail/allocator.hpp"
#include "trainkit/detail/callback_set.hpp"
#include "trainkit/detail/checkpoint_parts.hpp"
#include "trainkit/detail/coordinator.hpp"
#include "trainkit/detail/linkage.hpp"
#include "trainkit/detail/loss_meter.hpp"
#include "trainkit/detail/policy_checks.hpp"
#include "trainkit/detail/signals.hpp"
#include "trainkit/detail/step_graph.hpp"
#include "trainkit/device_options.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/io/named_tensors.hpp"
#include "trainkit/optim/adamw.hpp"
#include "trainkit/parallel/cuda_graph.hpp"
#include "trainkit/parallel/single.hpp"
#include "trainkit/precision/fp32.hpp"
#include "trainkit/sched/constant.hpp"

namespace trainkit {

/// Options of every policy, as one aggregate for designated initialisers:
/// `{.optim = {.lr = 1e-3}, .sched = {.max_lr = 1e-2}, .clip = {.max_norm = 1}}`.
template <class Optimizer, class Scheduler, class Precision, class Accumulate, class Clip,
          class Parallel>
struct TrainerOptions {
  detail::options_t<Optimizer> optim{};
  detail::options_t<Scheduler> sched{};
  detail::options_t<Precision> precision{};
  detail::options_t<Accumulate> accumulate{};
  detail::options_t<Clip> clip{};
  detail::options_t<Parallel> parallel{};
  /// TF32, cuDNN autotuning, channels-last (process-wide, as torch.backends).
  DeviceOptions device{};
  /// Keep freed CPU memory for reuse (see detail/allocator.hpp); process-wide.
  bool keep_freed_cpu_memory = true;
};

struct FitOptions {
  int64_t epochs = 1;
  data::BatchView val_data{};  ///< validated after every epoch when set (not owned)
  int64_t log_every = 10;      ///< callbacks may read device values every N steps
  int64_t max_steps = -1;      ///< stop after this many optimizer steps (-1: no limit)
  /// Continue from this checkpoint file, or from the latest one in this folder.
  std::filesystem::path resume_from{};
  /// When set, SIGINT/SIGTERM finish the current step, write a checkpoint
  /// here and return (FitResult::interrupted); a second signal ends at once.
  std::filesystem::path checkpoint_on_signal{};
};

using Metrics = std::map<std::string, double>;

struct FitResult {
  int64_t epochs = 0;  ///< epochs completed
  int64_t steps = 0;   ///< optimizer steps taken
  bool stopped = false;
  bool interrupted = false;  ///< by a signal, after writing checkpoint_on_signal
  std::string stop_reason;
  Metrics metrics;  ///< the last epoch's metrics
};

namespace detail {

/// The policies' roles in template order, and their names (Trainer::policy_names).
inline constexpr std::array<const char*, 6> kPolicyRoles = {"optimizer",  "scheduler", "precision",
                                                            "accumulate", "clip",      "parallel"};
using PolicyNames = std::array<std::string, 6>;

/// What a run's description says besides the policies' names.
struct RunFacts {
  double base_lr;
  int64_t accumulation_steps;
  int world_size;
  std::string device;
  int64_t parameters;
  DeviceSettings device_settings;
};

// The Trainer's code that does not depend on its policies: one definition
// for every Trainer (and compiled once under TRAINKIT_SEPARATE_COMPILATION).

/// "Trainer<name, name, ...>": which policies wrote a checkpoint.
TRAINKIT_INLINE std::string trainer_signature(const PolicyNames& names);
/// The run's configuration, for reports and hyperparameter records.
TRAINKIT_INLINE void describe_run(TrainState& state, const FitOptions& options,
                                  const PolicyNames& names, const RunFacts& facts);
/// Where the run is: the checkpoint's "trainer" part.
TRAINKIT_INLINE StateDict trainer_counters(const TrainState& state, const std::string& signature,
                                           bool epoch_done, const LossMeter& epoch_loss);
/// Restores the "trainer" part; returns the (epoch, batch) to resume at.
TRAINKIT_INLINE std::pair<int64_t, int64_t> restore_trainer_counters(const StateDict& d,
                                                                     TrainState& state,
                                                                     LossMeter& epoch_loss);
/// Other policies wrote `ckpt`: say so before anything else is checked.
TRAINKIT_INLINE void check_trainer_signature(const io::Checkpoint& ckpt,
                                             const std::string& signature,
                                             const std::string& legacy_signature);
/// `error` from resuming, as a trainkit::Error that names `file`.
[[noreturn]] TRAINKIT_INLINE void throw_resume_error(const std::string& file,
                                                     const std::exception& error);
/// The loss and metrics of `step` over `data`, summed over samples (in
/// double, on the device), and the number of samples.
struct EvaluationSums {
  std::map<std::string, at::Tensor> sums;
  int64_t count = 0;
};
TRAINKIT_INLINE EvaluationSums evaluation_sums(
    const data::BatchView& data, const std::function<StepOutput(const data::Batch&)>& step);

}  // namespace detail

template <class Optimizer = optim::AdamW, class Scheduler = sched::Constant,
          class Precision = precision::Fp32, class Accumulate = accumulate::None,
          class Clip = clip::None, class Parallel = parallel::Single>
class Trainer {
  static_assert(detail::check_optimizer<Optimizer>());
  static_assert(detail::check_scheduler<Scheduler>());
  static_assert(detail::check_precision<Precision>());
  static_assert(detail::check_accumulate<Accumulate>());
  static_assert(detail::check_clip<Clip>());
  static_assert(detail::check_parallel<Parallel>());

 public:
  using Options = TrainerOptions<Optimizer, Scheduler, Precision, Accumulate, Clip, Parallel>;

  /// `model` is a module holder (`MyNet net;`) or a shared_ptr to a module
  /// with `forward(Tensor)`. It is moved to the device and its parameters
  /// flattened here; do not move it afterwards.
  template <class Model>
  explicit Trainer(Model model, const Options& options = {})
      : model_(std::move(model)),
        parallel_(options.parallel),
        device_(prepare(parallel_, model_, options.keep_freed_cpu_memory)),
        device_settings_(detail::apply_device_options(options.device)),
        flat_(model_.module().parameters(), device_settings_.channels_last
                                                ? at::MemoryFormat::ChannelsLast
                                                : at::MemoryFormat::Contiguous),
        optimizer_(parallel_.attach(flat_), options.optim),
        scheduler_(options.sched),
        precision_(options.precision, device_),
        accumulate_(options.accumulate),
        clip_(options.clip),
        base_lr_(optimizer_.lr()) {
    detail::require_option(flat_.numel() > 0, "model", "no trainable parameters",
                           "a model with at least one parameter that requires grad");
    parallel_.check_same("trainer (policies and accumulation steps)",
                         signature() + "/" + std::to_string(accumulate_.steps()));
  }

  /// Trains for `options.epochs` over `train_data` (TrainingData: any range
  /// of data::Batch; its optional members are used when present). An lvalue
  /// callback is used in place (it sees every hook); an rvalue one is moved in.
  template <class TaskT, class TrainData, class... Callbacks>
  FitResult fit(TaskT&& task, TrainData&& train_data, const FitOptions& options = {},
                Callbacks&&... callbacks) {
    using Data = std::remove_reference_t<TrainData>;
    static_assert(detail::check_task<std::remove_cvref_t<TaskT>>());
    static_assert(detail::check_training_data<Data>());
    static_assert((detail::check_callback<detail::callback_t<Callbacks>>() && ...));
    static_assert((detail::check_callback_mutable<Callbacks>() && ...));
    detail::require_option(options.epochs >= 1, "fit.epochs", options.epochs, "a number >= 1");
    detail::require_option(options.log_every >= 1, "fit.log_every", options.log_every,
                           "a number >= 1");
    const int64_t n = kFixedSteps > 0 ? kFixedSteps : accumulate_.steps();

    TrainState state(model_.module());
    state.epochs = options.epochs;
    state.log_every = options.log_every;
    state.main_process_ = parallel_.is_main();
    if constexpr (HasSetShard<Data>) {
      train_data.set_shard(parallel_.rank(), parallel_.world_size());  // a sampler's shard
    }
    if constexpr (HasSize<Data>) {
      state.batches_per_epoch = static_cast<int64_t>(train_data.size());
      state.steps_per_epoch = (state.batches_per_epoch + n - 1) / n;
      state.total_steps = state.steps_per_epoch * options.epochs;
    }
    if (options.max_steps > 0) {
      state.total_steps = state.total_steps > 0 ? std::min(state.total_steps, options.max_steps)
                                                : options.max_steps;
    }
    scheduler_.start({base_lr_, state.total_steps});
    apply_schedule(state);
    check_momentum_schedule();
    describe(state, options);

    using Hooks = detail::CallbackSet<Callbacks...>;
    Hooks hooks(std::forward<Callbacks>(callbacks)...);
    constexpr bool kCapturable = capturable_with<Callbacks...>();
    [[maybe_unused]] bool capture = false;
    if constexpr (kGraphs) capture = plan_graph<Hooks>(state);
    epoch_done_ = false;
    // Every rank calls this at the same point; rank 0 writes once all are there.
    state.checkpoint_writer_ = [&](const std::filesystem::path& path) {
      const auto codec = io::checkpoint_codec("TrainState::save_checkpoint", path.string());
      coordinator().write_once(
          "checkpoint " + path.string(),
          [&] { return checkpoint_parts(state, hooks).save(false); },  // gathers sharded state
          [&](const io::Checkpoint& ckpt) { codec.write(path, ckpt); });
    };
    if (!options.checkpoint_on_signal.empty()) {  // fail now, not when the signal comes
      io::checkpoint_codec("fit.checkpoint_on_signal", options.checkpoint_on_signal.string());
    }
    resume_at_ = {0, 0};
    if (!options.resume_from.empty()) {
      const auto codec = io::checkpoint_codec("fit.resume_from", options.resume_from.string());
      const auto file = io::resolve_checkpoint(options.resume_from);
      restore(codec.read(file), file.string(), state, hooks);
      apply_schedule(state);
    }
    const auto [first_epoch, first_batch] = resume_at_;
    FitResult result;
    std::optional<detail::SignalCatcher> signals;
    if (!options.checkpoint_on_signal.empty()) signals.emplace();
    try {
      hooks.template dispatch<OnFitBegin>(state);
      model_.module().train();
      for (int64_t epoch = first_epoch; epoch < options.epochs && !state.stop_requested();
           ++epoch) {
        const int64_t skip = epoch == first_epoch ? first_batch : 0;
        state.epoch = epoch;
        state.batch = skip;
        state.metrics.clear();
        epoch_done_ = false;
        if constexpr (HasSetEpoch<Data>) train_data.set_epoch(epoch);
        if constexpr (HasSetStart<Data>) {
          if (skip > 0) train_data.set_start(skip);
        }
        hooks.template dispatch<OnEpochBegin>(state);

        if (skip == 0) epoch_loss_.reset();
        int64_t k = 0;        // micro-batches in the open window
        int64_t skipped = 0;  // data without set_start: skip by reading
        // the open window, when steps are graphs (else an empty array: no code)
        std::conditional_t<kCapturable, std::vector<data::Batch>, std::array<data::Batch, 0>>
            window;
        for (auto&& batch : train_data) {
          if constexpr (!HasSetStart<Data>) {
            if (skipped++ < skip) continue;
          }
          if constexpr (kCapturable) {
            if (capture) {
              window.push_back(batch);
              if (static_cast<int64_t>(window.size()) < n) continue;
              graph_step(task, window, state, hooks, options, result);
              window.clear();
              if (state.stop_requested() || state.step == options.max_steps) break;
              continue;
            }
          }
          micro_batch(task, batch, /*last=*/k + 1 == n, n, state);
          if (++k == n) {
            end_step(k, n, state, hooks, options, result);
            k = 0;
            if (state.stop_requested() || state.step == options.max_steps) break;
          }
        }
        if (result.interrupted) break;  // the checkpoint resumes inside this epoch
        for (const auto& batch : window) micro_batch(task, batch, ++k == n, n, state);
        if (k > 0) end_step(k, n, state, hooks, options, result);
        if (const auto loss = coordinator().global_mean(epoch_loss_.sum(), epoch_loss_.count()))
          state.metrics["train_loss"] = *loss;
        if (options.val_data) {
          hooks.template dispatch<OnValidationBegin>(state);
          for (const auto& [name, value] : evaluate(task, options.val_data)) {
            state.metrics["val_" + name] = value;
          }
          hooks.template dispatch<OnValidationEnd>(state);
        }
        epoch_done_ = true;
        hooks.template dispatch<OnEpochEnd>(state);
        coordinator().agree_on_stop(state);
        result.epochs = epoch + 1;
        if (state.step == options.max_steps) state.request_stop("max_steps reached");
      }
      hooks.template dispatch<OnFitEnd>(state);
    } catch (...) {
      state.exception = std::current_exception();
      hooks.template dispatch<OnException>(state);
      throw;
    }
    result.steps = state.step;
    result.stopped = state.stop_requested();
    result.stop_reason = result.stopped ? state.stop_reason() : "";
    result.metrics = state.metrics;
    return result;
  }

  /// Mean loss and task metrics over `data`, without gradients, in eval mode.
  template <class TaskT>
  Metrics evaluate(TaskT&& task, const data::BatchView& data) {
    static_assert(detail::check_task<std::remove_cvref_t<TaskT>>());
    auto& module = model_.module();
    const bool was_training = module.is_training();
    module.eval();
    torch::NoGradGuard no_grad;
    const auto [sums, count] = detail::evaluation_sums(data, [&](const data::Batch& raw) {
      const auto batch = to_device(raw);
      [[maybe_unused]] auto autocast = precision_.autocast();
      return task.step(model_, batch);
    });
    module.train(was_training);
    return coordinator().mean_metrics(sums, count);
  }

  torch::nn::Module& model() { return model_.module(); }
  torch::Device device() const { return device_; }
  FlatParams& flat_params() { return flat_; }
  Optimizer& optimizer() { return optimizer_; }
  Scheduler& scheduler() { return scheduler_; }
  Precision& precision() { return precision_; }
  Clip& clip() { return clip_; }
  Parallel& parallel() { return parallel_; }
  /// Whether steps can be captured with these callbacks, as far as the
  /// types tell (parallel::CudaGraph; the device is checked when fit starts).
  template <class... Callbacks>
  static constexpr bool capturable_with() {
    return kGraphs &&
           graph_blocker<detail::CallbackSet<detail::callback_t<Callbacks>...>>() == nullptr;
  }
  /// Why the last fit's steps stayed eager under parallel::CudaGraph, or "".
  const std::string& graph_fallback_reason() const requires(HasGraphCapture<Parallel>) {
    return graph_.blocker;
  }
  /// Whether the last fit recorded its step (and how many windows replayed it).
  bool graph_recorded() const requires(HasGraphCapture<Parallel>) {
    return graph_.graph.recorded();
  }
  int64_t graph_replays() const requires(HasGraphCapture<Parallel>) { return graph_.replays; }

 private:
  /// Whether the Parallel policy captures steps (parallel::CudaGraph).
  static constexpr bool kGraphs = HasGraphCapture<Parallel>;

  /// Micro-batches per step when the Accumulate policy fixes them at compile
  /// time (accumulate::None, Every<N>), else 0.
  static constexpr int64_t kFixedSteps = [] {
    if constexpr (requires { std::integral_constant<int64_t, Accumulate::steps()>{}; }) {
      return int64_t{Accumulate::steps()};
    } else {
      return int64_t{0};
    }
  }();

  /// A policy's name in checkpoints and reports: the stable name it
  /// declares, else (and in checkpoints written before stable names) its
  /// C++ type as the compiler spells it.
  template <class P, bool Legacy>
  static std::string name_of() {
    if constexpr (HasStableName<P> && !Legacy) {
      return std::string(P::stable_name(std::type_identity<P>{}));
    } else {
      return c10::demangle_type<P>();
    }
  }
  /// The policies' names, in template order (detail::kPolicyRoles).
  template <bool Legacy = false>
  static detail::PolicyNames policy_names() {
    return {name_of<Optimizer, Legacy>(), name_of<Scheduler, Legacy>(),
            name_of<Precision, Legacy>(), name_of<Accumulate, Legacy>(),
            name_of<Clip, Legacy>(),      name_of<Parallel, Legacy>()};
  }
  static std::string signature() { return detail::trainer_signature(policy_names()); }
  static std::string legacy_signature() { return detail::trainer_signature(policy_names<true>()); }

  void describe(TrainState& state, const FitOptions& options) const {
    detail::describe_run(
        state, options, policy_names(),
        {base_lr_, static_cast<int64_t>(accumulate_.steps()),
         static_cast<int>(parallel_.world_size()), device_.str(), flat_.numel(), device_settings_});
  }

  /// The checkpoint's parts, in the order they load.
  template <class Hooks>
  detail::CheckpointParts checkpoint_parts(TrainState& state, Hooks& hooks) {
    detail::CheckpointParts parts;
    parts.add(
        "trainer", [this, &state] { return counters(state); },
        [this, &state](const StateDict& d) { restore_counters(d, state); });
    parts.add_module("model", model_.module());
    if constexpr (HasStateDict<Optimizer>) {
      parts.add(
          "optim",
          [this] {
            return parallel_.gather_optimizer_state(optimizer_.state_dict(), elementwise_state());
          },
          [this](const StateDict& d) {
            optimizer_.load_state_dict(parallel_.shard_optimizer_state(d, elementwise_state()));
          });
    }
    parts.add("precision", precision_);
    parts.add_rng("rng");
    hooks.for_each([&](size_t i, auto& cb) { parts.add("callback." + std::to_string(i), cb); });
    return parts;
  }

  StateDict counters(const TrainState& state) const {
    return detail::trainer_counters(state, signature(), epoch_done_, epoch_loss_);
  }
  void restore_counters(const StateDict& d, TrainState& state) {
    resume_at_ = detail::restore_trainer_counters(d, state, epoch_loss_);
  }

  /// Restores everything from `ckpt`, or nothing: on any error the trainer
  /// is put back as it was and the error names the file.
  template <class Hooks>
  void restore(const io::Checkpoint& ckpt, const std::string& file, TrainState& state,
               Hooks& hooks) {
    try {
      detail::check_trainer_signature(ckpt, signature(), legacy_signature());
      checkpoint_parts(state, hooks).load(ckpt);
      state.resumed = true;
    } catch (const std::exception& e) {
      detail::throw_resume_error(file, e);
    }
  }

  template <class Model>
  static torch::Device prepare(Parallel& parallel, Model& model, bool keep_memory) {
    if (keep_memory) detail::keep_freed_cpu_memory();
    parallel.prepare(model.module());
    return parallel.device();
  }

  /// A batch on the device, inputs in the model's memory format.
  data::Batch to_device(const data::Batch& raw) const {
    auto batch = raw.to(device_);
    if (device_settings_.channels_last && batch.input.dim() == 4) {
      batch.input = batch.input.contiguous(at::MemoryFormat::ChannelsLast);
    }
    return batch;
  }

  template <class TaskT>
  void micro_batch(TaskT& task, const data::Batch& raw, bool last, int64_t n, TrainState& state) {
    const auto batch = to_device(raw);
    auto run = [&] {
      StepOutput out;
      {
        [[maybe_unused]] auto autocast = precision_.autocast();
        out = task.step(model_, batch);
      }
      if constexpr (kFixedSteps == 1) {
        precision_.backward(out.loss);
      } else {
        precision_.backward(n == 1 ? out.loss : out.loss / static_cast<double>(n));
      }
      epoch_loss_.add(out.loss);
      state.loss_tensor_ = out.loss;  // held until the next micro-batch
      state.samples_seen += out.batch_size;
    };
    if (last) {
      run();
    } else {
      [[maybe_unused]] auto deferred = parallel_.defer_sync();
      run();
    }
    ++state.batch;
  }

  template <class Hooks>
  void boundary(int64_t seen, int64_t n, TrainState& state, Hooks& hooks) {
    parallel_.finish_sync(flat_);
    if (seen != n) flat_.scale_grad(static_cast<double>(n) / static_cast<double>(seen));
    precision_.unscale(flat_);
    clip_.clip(flat_);
    if constexpr (HasLastNorm<Clip>) state.grad_norm_tensor_ = clip_.last_norm();
    if constexpr (HasLossScale<Precision>) state.loss_scale_tensor_ = precision_.loss_scale();
    hooks.template dispatch<OnBeforeStep>(state);
    if constexpr (Hooks::template defines<OnBeforeStep>) coordinator().agree_on_skip(state);
    if (!state.step_skipped()) {
      precision_.step([this] { optimizer_.step(); });
      parallel_.after_step(flat_);
    }
    state.clear_skip();
    precision_.update();
    ++state.step;
    apply_schedule(state);
    flat_.zero_grad();
  }

  /// The boundary, then after_step.
  template <class Hooks>
  void end_step(int64_t seen, int64_t n, TrainState& state, Hooks& hooks, const FitOptions& options,
                FitResult& result) {
    boundary(seen, n, state, hooks);
    after_step(state, hooks, options, result);
  }

  /// on_step_end, and a pending signal's checkpoint.
  template <class Hooks>
  void after_step(TrainState& state, Hooks& hooks, const FitOptions& options, FitResult& result) {
    hooks.template dispatch<OnStepEnd>(state);
    state.end_step();
    const bool watch_signals = !options.checkpoint_on_signal.empty() && !result.interrupted;
    if constexpr (Hooks::size > 0) coordinator().agree_on_stop(state);  // a hook may ask to stop
    if (!watch_signals) return;
    if (const int sig = coordinator().agree_on_signal(detail::SignalCatcher::caught()); sig != 0) {
      state.save_checkpoint(options.checkpoint_on_signal);
      state.request_stop("interrupted by signal " + std::to_string(sig) + "; checkpoint " +
                         options.checkpoint_on_signal.string());
      result.interrupted = true;
    }
  }

  // ---- captured steps (parallel::CudaGraph) ---------------------------------

  /// What the types rule out, or nullptr.
  template <class Hooks>
  static constexpr const char* graph_blocker() {
    if constexpr (Hooks::template defines<OnBeforeStep>) {
      return "a callback defines on_before_step, which runs on the host between backward and the "
             "optimizer step (and may skip it)";
    } else if constexpr (!HasCapturableStep<Optimizer>) {
      return "the optimizer has no capturable step (capturable, make_capturable, step_unless_inf)";
    } else {
      return nullptr;
    }
  }

  /// At fit's start: whether steps will be captured; if not, the reason goes
  /// to the run's configuration and, once, to stderr.
  template <class Hooks>
  bool plan_graph(TrainState& state) {
    graph_ = {};  // a graph holds this fit's task and static buffers
    if constexpr (constexpr const char* reason = graph_blocker<Hooks>(); reason != nullptr) {
      graph_.blocker = reason;
    } else {
      graph_.blocker = graph_blocker_at_run_time();
    }
    report_graph(state);
    return graph_.blocker.empty();
  }

  std::string graph_blocker_at_run_time() const requires(kGraphs) {
    if (!parallel_.graph_options().emulate) {
      if (!device_.is_cuda()) return "the device is " + device_.str() + ", not CUDA";
      if (!TRAINKIT_HAS_CUDA) return "this build has no CUDA (TRAINKIT_HAS_CUDA is 0)";
    }
    if constexpr (HasMomentumAt<Scheduler> && HasSetMomentum<Optimizer>) {
      if (scheduler_.momentum_at(0).has_value()) {
        return "the schedule cycles momentum (beta1), which the fused kernels take as a number: "
               "sched.cycle_momentum = false captures the step";
      }
    }
    if constexpr (HasCapturableStep<Optimizer>) {
      if (!optimizer_.capturable()) {
        return "the optimizer steps with host-side values: optim.fused = true (LibTorch >= 2.4) "
               "gives a capturable step";
      }
    }
    return "";
  }

  void report_graph(TrainState& state) requires(kGraphs) {
    auto& entry = state.config["cuda_graph"];
    if (graph_.blocker.empty()) {
      entry = std::string(parallel_.graph_options().emulate ? "emulated" : "captured") + " after " +
              std::to_string(parallel_.graph_options().warmup_steps) + " eager steps";
      return;
    }
    entry = "eager: " + graph_.blocker;
    if (graph_.blocker != last_graph_report_ && parallel_.is_main()) {
      std::fprintf(stderr, "trainkit: parallel::CudaGraph: steps stay eager: %s\n",
                   graph_.blocker.c_str());
    }
    last_graph_report_ = graph_.blocker;
  }

  /// One full window: a replay when the graph was recorded for its shapes;
  /// else the probe and the capture once its shapes are warm; else eager.
  template <class TaskT, class Hooks>
  void graph_step(TaskT& task, const std::vector<data::Batch>& window, TrainState& state,
                  Hooks& hooks, const FitOptions& options, FitResult& result) {
    auto& g = graph_;
    if (g.can_replay(window)) {
      if constexpr (requires { optimizer_.momentum(); }) {
        // The fused kernels took it as a number when the step was recorded.
        detail::require_option(optimizer_.momentum() == g.momentum, "optim momentum",
                               optimizer_.momentum(),
                               "its value when parallel::CudaGraph recorded the step");
      }
      g.load(window);
      g.graph.replay();
      ++g.replays;
      account_recorded_step(state);
      return after_step(state, hooks, options, result);
    }
    const bool warming = !g.graph.recorded() && g.blocker.empty();
    if (warming && g.warm_steps >= parallel_.graph_options().warmup_steps &&
        g.warming.match(window) && probe(task, window, state)) {
      // The probe was this window's step: account for it with its own
      // outputs before recording reassigns them to the graph's.
      account_recorded_step(state);
      if constexpr (requires { optimizer_.momentum(); }) g.momentum = optimizer_.momentum();
      g.graph.record([this, &task, n = static_cast<int64_t>(window.size())] { step_body(task, n); },
                     device_, parallel_.graph_options().emulate);
      return after_step(state, hooks, options, result);
    }
    const auto n = static_cast<int64_t>(window.size());
    {
      // Warm-up runs beside the default stream; other eager steps as usual.
      std::optional<detail::SideStream> side;
      if (warming) side.emplace(device_);
      for (int64_t k = 0; k < n; ++k) micro_batch(task, window[k], k + 1 == n, n, state);
      boundary(n, n, state, hooks);
    }
    g.note_eager(window);
    after_step(state, hooks, options, result);
  }

  /// Stages `window` in static buffers and runs its step as the graph will
  /// (the probe), with a host synchronisation on CUDA an error. Returns
  /// whether the window's step ran. A step that synchronises leaves steps
  /// eager with that reason, and its window runs again eagerly (its
  /// forwards ran twice: BatchNorm statistics and dropout's RNG see them).
  template <class TaskT>
  bool probe(TaskT& task, const std::vector<data::Batch>& window, TrainState& state) {
    auto& g = graph_;
    if constexpr (requires { optimizer_.ready_to_capture(); }) {
      if (!optimizer_.ready_to_capture()) return false;  // e.g. SGD's first momentum step
    }
    const auto n = static_cast<int64_t>(window.size());
    g.inputs.clear();
    for (const auto& batch : window) {
      const auto b = to_device(batch);
      g.inputs.push_back({b.input.clone(), b.target.clone()});  // clone keeps the memory format
    }
    g.recorded = detail::WindowShapes::of(window);
    g.losses.assign(n, at::Tensor());
    g.batch_sizes.assign(n, 0);
    optimizer_.make_capturable();
    optimizer_.set_lr(state.lr);  // now on the device, where each replay reads it
    try {
      detail::SideStream side(device_);
      detail::SyncIsError no_sync(device_);
      step_body(task, n);
    } catch (const c10::Error& e) {
      const std::string what = e.what();
      if (what.find("synchroniz") == std::string::npos) throw;  // a real error, not a host read
      g.blocker = "the step reads the device from the host: " + what.substr(0, what.find('\n'));
      g.inputs.clear();
      flat_.zero_grad();
      report_graph(state);
      return false;
    }
    return true;
  }

  /// The recorded step: N micro-batches from the static buffers, then the
  /// boundary with no host read (the fused step skips on the device flag).
  template <class TaskT>
  void step_body(TaskT& task, int64_t n) {
    auto& g = graph_;
    for (int64_t k = 0; k < n; ++k) {
      StepOutput out;
      {
        [[maybe_unused]] auto autocast = precision_.autocast();
        out = task.step(model_, g.inputs[k]);
      }
      precision_.backward(n == 1 ? out.loss : out.loss / static_cast<double>(n));
      g.losses[k] = out.loss.detach();  // a graph's output: each replay writes it
      g.batch_sizes[k] = out.batch_size;
    }
    precision_.unscale(flat_);
    clip_.clip(flat_);
    if constexpr (HasLastNorm<Clip>) g.grad_norm = clip_.last_norm();
    if constexpr (HasFoundInf<Precision>) {
      optimizer_.step_unless_inf(precision_.found_inf());
    } else {
      precision_.step([this] { optimizer_.step(); });
    }
    precision_.update();
    flat_.zero_grad();
  }

  /// What the eager step does on the host besides the device work, after
  /// a recorded step ran (the hooks follow in after_step).
  void account_recorded_step(TrainState& state) {
    auto& g = graph_;
    for (size_t k = 0; k < g.losses.size(); ++k) {
      epoch_loss_.add(g.losses[k]);
      state.samples_seen += g.batch_sizes[k];
      ++state.batch;
    }
    state.loss_tensor_ = g.losses.back();
    if constexpr (HasLastNorm<Clip>) state.grad_norm_tensor_ = g.grad_norm;
    if constexpr (HasLossScale<Precision>) state.loss_scale_tensor_ = precision_.loss_scale();
    ++state.step;
    apply_schedule(state);
  }

  detail::Coordinator<Parallel> coordinator() { return detail::Coordinator<Parallel>(parallel_); }

  ElementwiseState elementwise_state() const {
    if constexpr (HasElementwiseState<Optimizer>) {
      return optimizer_.elementwise_state();
    } else {
      return {};
    }
  }

  void apply_schedule(TrainState& state) {
    state.lr = scheduler_.lr_at(state.step);
    optimizer_.set_lr(state.lr);
    if constexpr (HasMomentumAt<Scheduler> && HasSetMomentum<Optimizer>) {
      if (const auto m = scheduler_.momentum_at(state.step)) optimizer_.set_momentum(*m);
    }
  }

  void check_momentum_schedule() const {
    if constexpr (HasMomentumAt<Scheduler> && !HasSetMomentum<Optimizer>) {
      detail::require_option(!scheduler_.momentum_at(0).has_value(), "sched.cycle_momentum", true,
                             "false for an optimizer without momentum (no set_momentum)");
    }
  }

  ModelRef model_;
  Parallel parallel_;
  torch::Device device_;
  detail::DeviceSettings device_settings_;
  FlatParams flat_;
  Optimizer optimizer_;
  Scheduler scheduler_;
  Precision precision_;
  Accumulate accumulate_;
  Clip clip_;
  double base_lr_;
  struct NoGraph {};
  /// parallel::CudaGraph's state; nothing for other policies.
  [[no_unique_address]] std::conditional_t<kGraphs, detail::GraphRun, NoGraph> graph_;
  [[no_unique_address]] std::conditional_t<kGraphs, std::string, NoGraph> last_graph_report_;
  detail::LossMeter epoch_loss_;
  bool epoch_done_ = false;  ///< on_epoch_end has begun: a checkpoint resumes at the next epoch
  std::pair<int64_t, int64_t> resume_at_{0, 0};  ///< (epoch, batch) this fit starts at
};

#if TRAINKIT_DEFINITIONS
namespace detail {

TRAINKIT_INLINE std::string trainer_signature(const PolicyNames& names) {
  std::string joined;
  for (const auto& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return "Trainer<" + joined + ">";
}

TRAINKIT_INLINE void describe_run(TrainState& state, const FitOptions& options,
                                  const PolicyNames& names, const RunFacts& facts) {
  auto& c = state.config;
  c["trainer"] = trainer_signature(names);
  for (size_t i = 0; i < names.size(); ++i) c[kPolicyRoles[i]] = names[i];
  std::ostringstream lr;
  lr << facts.base_lr;
  c["lr"] = lr.str();
  c["accumulation_steps"] = std::to_string(facts.accumulation_steps);
  c["epochs"] = std::to_string(options.epochs);
  c["log_every"] = std::to_string(options.log_every);
  c["max_steps"] = std::to_string(options.max_steps);
  c["steps_per_epoch"] = std::to_string(state.steps_per_epoch);
  c["world_size"] = std::to_string(facts.world_size);
  c["device"] = facts.device;
  c["parameters"] = std::to_string(facts.parameters);
  const auto on_off = [](bool b) { return std::string(b ? "on" : "off"); };
  c["tf32_matmul"] = on_off(facts.device_settings.tf32_matmul);
  c["tf32_cudnn"] = on_off(facts.device_settings.tf32_cudnn);
  c["cudnn_benchmark"] = on_off(facts.device_settings.cudnn_benchmark);
  c["channels_last"] = on_off(facts.device_settings.channels_last);
}

TRAINKIT_INLINE StateDict trainer_counters(const TrainState& state, const std::string& signature,
                                           bool epoch_done, const LossMeter& epoch_loss) {
  StateDict d;
  d.values = {{"signature", signature},       {"epoch", state.epoch},
              {"batch", state.batch},         {"step", state.step},
              {"epoch_done", epoch_done},     {"samples_seen", state.samples_seen},
              {"loss_sum", epoch_loss.sum()}, {"loss_count", epoch_loss.count()}};
  return d;
}

TRAINKIT_INLINE std::pair<int64_t, int64_t> restore_trainer_counters(const StateDict& d,
                                                                     TrainState& state,
                                                                     LossMeter& epoch_loss) {
  const bool done = d.value<bool>("epoch_done");
  const auto epoch = d.value<int64_t>("epoch"), batch = d.value<int64_t>("batch");
  const auto step = d.value<int64_t>("step"), samples = d.value<int64_t>("samples_seen");
  const auto loss_sum = d.value<double>("loss_sum");
  const auto loss_count = d.value<int64_t>("loss_count");
  state.step = step;
  state.samples_seen = samples;
  epoch_loss.restore(loss_sum, loss_count);
  return {epoch + (done ? 1 : 0), done ? 0 : batch};
}

TRAINKIT_INLINE void check_trainer_signature(const io::Checkpoint& ckpt,
                                             const std::string& signature,
                                             const std::string& legacy_signature) {
  const auto it = ckpt.parts.find("trainer");
  if (it == ckpt.parts.end()) return;  // the parts list names what is missing
  const auto written_by = it->second.value<std::string>("signature");
  if (written_by != signature && written_by != legacy_signature) {
    throw Error("trainkit: was written by " + written_by + ", not by this " + signature);
  }
}

TRAINKIT_INLINE void throw_resume_error(const std::string& file, const std::exception& error) {
  std::string what = error.what();
  if (what.rfind("trainkit: ", 0) == 0) what = what.substr(10);
  throw Error("trainkit: cannot resume from " + file + ": " + what);
}

TRAINKIT_INLINE EvaluationSums evaluation_sums(
    const data::BatchView& data, const std::function<StepOutput(const data::Batch&)>& step) {
  EvaluationSums out;
  const auto add = [](at::Tensor& sum, const at::Tensor& value, double weight) {
    const auto term = value.detach().to(at::kDouble) * weight;
    sum = sum.defined() ? sum + term : term;
  };
  data.for_each([&](const data::Batch& batch) {
    const StepOutput result = step(batch);
    const double weight = static_cast<double>(result.batch_size);
    add(out.sums["loss"], result.loss, weight);
    for (const auto& [name, value] : result.metrics) add(out.sums[name], value, weight);
    out.count += result.batch_size;
  });
  return out;
}

}  // namespace detail
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit
