#pragma once
// Trainer<Optimizer, Scheduler, Precision, Accumulate, Clip, Parallel,
// Capture>: fit and the step algorithm of docs/design.md over seven
// compile-time policies (their roles: policy_roles.hpp).
//
//   per micro-batch k of N: to device; defer grad sync unless k is last;
//     autocast { loss = task.step(model, batch) }; backward(loss / N)
//   per boundary: finish sync; unscale; clip (reports the pre-clip norm);
//     step unless inf/NaN; update scale; advance schedule; zero grads
//   an epoch ending inside a window steps with the partial window, rescaled
//   to the mean over the micro-batches seen; the hot path reads nothing from
//   the device. The step is written once, as pieces (forward_backward,
//   prepare_update, apply_update, advance) that the eager driver below runs
//   per batch and the capture driver (trainer/detail/captured_steps.hpp)
//   records as one graph under capture::CudaGraph, with any Parallel policy.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainkit/concepts.hpp"
#include "trainkit/data/batch_view.hpp"
#include "trainkit/data/shard.hpp"
#include "trainkit/device_options.hpp"
#include "trainkit/error.hpp"
#include "trainkit/policy_roles.hpp"
#include "trainkit/trainer/detail/allocator.hpp"
#include "trainkit/trainer/detail/callback_set.hpp"
#include "trainkit/trainer/detail/captured_steps.hpp"
#include "trainkit/trainer/detail/coordinator.hpp"
#include "trainkit/trainer/detail/evaluation.hpp"
#include "trainkit/trainer/detail/loss_meter.hpp"
#include "trainkit/trainer/detail/parameter_shards.hpp"
#include "trainkit/trainer/detail/policy_checks.hpp"
#include "trainkit/trainer/detail/run_description.hpp"
#include "trainkit/trainer/detail/schedule.hpp"
#include "trainkit/trainer/detail/signals.hpp"
#include "trainkit/trainer/detail/trainer_checkpoint.hpp"
#include "trainkit/trainer_options.hpp"

namespace trainkit {

/// The parameters are the roles of detail::PolicyRoles, in its order, and
/// default to its defaults (AdamW, Constant, Fp32, None, None, Single, None).
template <class Optimizer = detail::default_policy_t<0>,
          class Scheduler = detail::default_policy_t<1>,
          class Precision = detail::default_policy_t<2>,
          class Accumulate = detail::default_policy_t<3>, class Clip = detail::default_policy_t<4>,
          class Parallel = detail::default_policy_t<5>, class Capture = detail::default_policy_t<6>>
class Trainer {
  using Policies = std::tuple<Optimizer, Scheduler, Precision, Accumulate, Clip, Parallel, Capture>;
  static_assert(detail::check_policies<Policies>());  // each role's, with a sentence on failure
  /// Whether steps are captured (capture::CudaGraph).
  static constexpr bool kGraphs = Capture::records;
  static constexpr int64_t kFixedSteps = detail::fixed_steps<Accumulate>();

 public:
  using Options =
      TrainerOptions<Optimizer, Scheduler, Precision, Accumulate, Clip, Parallel, Capture>;

  /// `model` is a module holder (`MyNet net;`) or a shared_ptr to a module,
  /// with any forward: tasks take it as its own type. It is moved to the
  /// device and its parameters flattened here; do not move it afterwards.
  template <class Model>
  explicit Trainer(Model model, const Options& options = {})
      : model_(std::move(model)),
        parallel_(options.parallel),
        device_(prepare(parallel_, model_, options.keep_freed_cpu_memory)),
        device_settings_(detail::apply_device_options(options.device)),
        flat_(model_.module(), options.param_groups,
              device_settings_.channels_last ? at::MemoryFormat::ChannelsLast
                                             : at::MemoryFormat::Contiguous,
              parallel::units_of(parallel_)),
        optimizer_(parallel_.attach(flat_), options.optim),
        schedules_(optimizer_, flat_.param_groups(), options.sched),
        precision_(options.precision, device_),
        accumulate_(options.accumulate),
        clip_(options.clip),
        capture_(options.capture),
        checkpoint_options_(options.checkpoint) {
    detail::require_option(flat_.numel() > 0, "model", "no trainable parameters",
                           "a model with at least one parameter that requires grad");
    parallel_.check_same("trainer (policies and accumulation steps)",
                         signature() + "/" + std::to_string(accumulate_.steps()));
  }

  /// Trains for `options.epochs` over `train_data` (TrainingData: a range of
  /// batches, its optional members used when present). An lvalue callback is
  /// used in place (it sees every hook); an rvalue one is moved in.
  template <class TaskT, class TrainData, class... Callbacks>
  FitResult fit(TaskT&& task, TrainData&& train_data, const FitOptions& options = {},
                Callbacks&&... callbacks) {
    using Data = std::remove_reference_t<TrainData>;
    static_assert(detail::check_fit<TaskT, Data, Callbacks...>());
    using BatchT = batch_of_t<Data>;
    options.check();
    const int64_t n = kFixedSteps > 0 ? kFixedSteps : accumulate_.steps();

    TrainState state(model_.module());
    state.epochs = options.epochs;
    state.log_every = options.log_every;
    state.main_process_ = parallel_.is_main();
    state.parameter_shards_ = shards_.make(parallel_, flat_, model_.module());
    data::take_shard(train_data, parallel_, options.data_is_per_rank);
    if constexpr (HasSize<Data>) {
      state.batches_per_epoch = static_cast<int64_t>(train_data.size());
      state.steps_per_epoch = (state.batches_per_epoch + n - 1) / n;
      state.total_steps = state.steps_per_epoch * options.epochs;
    }
    if (options.max_steps > 0) {
      state.total_steps = state.total_steps > 0 ? std::min(state.total_steps, options.max_steps)
                                                : options.max_steps;
    }
    schedules_.start(state.total_steps);
    apply_schedule(state);
    detail::check_momentum_schedule<Optimizer>(schedules_.front());
    detail::describe_run(state, detail::kPolicyRoles, detail::policy_names<Policies>(),
                         {schedules_.base_lr(), static_cast<int64_t>(accumulate_.steps()),
                          options.epochs, options.log_every, options.max_steps,
                          parallel_.world_size(), device_.str(), flat_.numel(), device_settings_});

    using Hooks = detail::CallbackSet<Callbacks...>;
    Hooks hooks(std::forward<Callbacks>(callbacks)...);
    constexpr bool kCapturable = capturable_with<Callbacks...>();
    [[maybe_unused]] bool capture = false;
    if constexpr (kGraphs) capture = captured_.template start<Hooks, BatchT>(*this, state);
    epoch_done_ = false;
    detail::BackgroundSave background;  // after hooks: joined before they are destroyed
    state.checkpoint_writer_ = Checkpoint::writer(*this, state, hooks, background);
    const auto start = Checkpoint::template start<Data>(*this, options, state, hooks);
    state.epoch = start.epoch;  // on_fit_begin sees where a resumed fit goes on
    state.batch = start.by_samples ? 0 : start.batch;
    FitResult result;
    std::optional<detail::SignalCatcher> signals;
    if (!options.checkpoint_on_signal.empty()) signals.emplace();
    try {
      hooks.template dispatch<OnFitBegin>(state);
      if (options.reached_max_steps(state.step)) state.request_stop("max_steps reached");
      model_.module().train();
      for (int64_t epoch = start.epoch; epoch < options.epochs && !state.stop_requested();
           ++epoch) {
        const int64_t skip = Checkpoint::enter_epoch(*this, train_data, epoch, start);
        state.epoch = epoch;
        state.batch = skip;
        result.metrics = std::exchange(state.metrics, {});  // the last epoch's
        epoch_done_ = false;
        hooks.template dispatch<OnEpochBegin>(state);

        int64_t k = 0;        // micro-batches in the open window
        int64_t skipped = 0;  // data without set_start: skip by reading
        // the open window, when steps are graphs (else an empty array: no code)
        std::conditional_t<kCapturable, std::vector<BatchT>, std::array<BatchT, 0>> window;
        for (auto&& batch : train_data) {
          if constexpr (!HasSetStart<Data>) {
            if (skipped++ < skip) continue;
          }
          if constexpr (kCapturable) {
            if (capture) {
              window.push_back(batch);
              if (static_cast<int64_t>(window.size()) < n) continue;
              captured_.step(
                  *this, task, window, state,
                  [&] {
                    for (int64_t j = 0; j < n; ++j)
                      micro_batch(task, window[j], j + 1 == n, n, state);
                    boundary(n, n, state, hooks);
                  },
                  [&] { account_recorded_step(state); });
              report_step(state, hooks, options, result);
              window.clear();
              if (state.stop_requested() || options.reached_max_steps(state.step)) break;
              continue;
            }
          }
          micro_batch(task, batch, /*last=*/k + 1 == n, n, state);
          if (++k == n) {
            boundary(k, n, state, hooks);
            report_step(state, hooks, options, result);
            k = 0;
            if (state.stop_requested() || options.reached_max_steps(state.step)) break;
          }
        }
        if (!result.interrupted) {  // else the checkpoint resumes inside this epoch
          for (const auto& batch : window) micro_batch(task, batch, ++k == n, n, state);
          if (k > 0) {
            boundary(k, n, state, hooks);
            report_step(state, hooks, options, result);
          }
        }
        if (const auto loss = coordinator().mean_loss(epoch_loss_))
          state.metrics["train_loss"] = *loss;  // of the epoch so far, when interrupted
        if (result.interrupted) break;
        if (options.val_data) detail::validate<BatchT>(*this, task, options.val_data, state, hooks);
        schedules_.end_epoch(optimizer_, state);
        epoch_done_ = true;
        hooks.template dispatch<OnEpochEnd>(state);
        coordinator().agree_on_stop(state);
        result.epochs = epoch + 1;
        if (options.reached_max_steps(state.step)) state.request_stop("max_steps reached");
      }
      detail::use_evaluation_weights(*this);  // what callbacks keep and users get after fit
      hooks.template dispatch<OnFitEnd>(state);
      Checkpoint::finish(*this, background);
    } catch (...) {
      state.exception = std::current_exception();
      hooks.template dispatch<OnException>(state);
      throw;
    }
    result.steps = state.step;
    result.stopped = state.stop_requested();
    result.stop_reason = result.stopped ? state.stop_reason() : "";
    if (result.interrupted) state.metrics.merge(result.metrics);  // the last epoch's others
    result.metrics = state.metrics;
    return result;
  }

  /// Mean loss and task metrics over `data` (a range of batches), without
  /// gradients, in eval mode, on the optimizer's evaluation weights.
  template <class TaskT, class Range>
  requires data::detail::BatchRange<std::remove_reference_t<Range>> Metrics evaluate(TaskT&& task,
                                                                                     Range&& data) {
    return evaluate<batch_of_t<std::remove_reference_t<Range>>>(task, data::BatchView(data));
  }
  /// The same over a view whose batches are of type B.
  template <class B = data::Batch, class TaskT>
  Metrics evaluate(TaskT&& task, const data::BatchView& data) {
    static_assert(detail::check_batch<B>());
    static_assert(detail::check_task<std::remove_cvref_t<TaskT>, B>());
    auto& module = model_.module();
    const bool was_training = module.is_training();
    module.eval();
    const bool averaged = detail::use_evaluation_weights(*this);
    torch::NoGradGuard no_grad;
    detail::EvaluationSums sums;
    [[maybe_unused]] auto gathered = parallel::forward_scope(parallel_);
    data.for_each<B>([&](const B& raw) { sums.add(run_task(task, to_device(raw))); });
    module.train(was_training);
    if (averaged) detail::use_evaluation_weights(*this, false);
    return coordinator().mean_metrics(sums.sums, sums.count);
  }

  torch::nn::Module& model() { return model_.module(); }
  torch::Device device() const { return device_; }
  FlatParams& flat_params() { return flat_; }
  /// The gradients the update reads: all, or this rank's shard (ZeRO-2).
  FlatParams& gradients() { return parallel::gradients_of(parallel_, flat_); }
  Optimizer& optimizer() { return optimizer_; }
  Scheduler& scheduler() { return schedules_.front(); }  ///< the default group's
  Precision& precision() { return precision_; }
  Clip& clip() { return clip_; }
  Parallel& parallel() { return parallel_; }
  Capture& capture() { return capture_; }
  /// Whether steps can be captured with these callbacks, as far as the
  /// types tell (the device is checked when fit starts).
  template <class... Callbacks>
  static constexpr bool capturable_with() {
    using Hooks = detail::CallbackSet<detail::callback_t<Callbacks>...>;
    if constexpr (kGraphs)
      return detail::CapturedSteps<Trainer>::template blocker_of<Hooks>() == nullptr;
    return false;
  }
  /// Why the last fit's steps stayed eager under capture, or "".
  const std::string& graph_fallback_reason() const requires(kGraphs) { return captured_.blocker(); }
  /// Whether the last fit recorded its step (and how many windows replayed it).
  bool graph_recorded() const requires(kGraphs) { return captured_.recorded(); }
  int64_t graph_replays() const requires(kGraphs) { return captured_.replays(); }

 private:
  friend class detail::CapturedSteps<Trainer>;
  using Checkpoint = detail::TrainerCheckpoint<Trainer>;
  friend Checkpoint;
  /// Which policies wrote a checkpoint (its "trainer" part names them).
  static std::string signature() { return detail::policy_signature<Policies>(); }

  template <class Model>
  static torch::Device prepare(Parallel& parallel, Model& model, bool keep_memory) {
    if (keep_memory) detail::keep_freed_cpu_memory();
    parallel.prepare(model.module());
    return parallel.device();
  }

  /// A batch on the device, in the model's memory format.
  template <class B>
  B to_device(const B& raw) const {
    return data::to_device(raw, device_, device_settings_.channels_last);
  }

  /// The task on a device batch, under autocast; samples counted from the
  /// batch's shapes (no sync) where the task left batch_size at 0.
  template <class TaskT, class B>
  StepOutput run_task(TaskT& task, const B& batch) {
    [[maybe_unused]] auto autocast = precision_.autocast();
    StepOutput out = task.step(model_, batch);
    if (out.batch_size == 0) out.batch_size = data::batch_size(batch);
    return out;
  }

  // ---- the step, in pieces that the eager and the capture driver share ----

  /// Forward and backward of one of `n` micro-batches (on the device); the
  /// gradient sync waits for the last.
  template <class TaskT, class B>
  StepOutput forward_backward(TaskT& task, const B& batch, bool last, int64_t n) {
    if constexpr (requires { parallel_.follow_current_stream(); })
      parallel_.follow_current_stream();
    const auto run = [&] {
      [[maybe_unused]] auto gathered = parallel::forward_scope(parallel_);
      StepOutput out = run_task(task, batch);
      if constexpr (kFixedSteps == 1) {
        precision_.backward(out.loss);
      } else {
        precision_.backward(n == 1 ? out.loss : out.loss / static_cast<double>(n));
      }
      return out;
    };
    if (last) return run();
    [[maybe_unused]] auto deferred = parallel_.defer_sync();
    return run();
  }

  /// The update up to the optimizer step: gradient sync, a partial window
  /// rescaled to the mean over its `seen` of `n` micro-batches, unscale, clip.
  void prepare_update(int64_t seen, int64_t n) {
    parallel_.finish_sync(flat_);
    auto& grads = gradients();
    if (seen != n) grads.scale_grad(static_cast<double>(n) / static_cast<double>(seen));
    precision_.unscale(grads);
    clip_.clip(grads);
  }

  /// The optimizer step unless `skip`, then the scale update and zeroing. A
  /// recorded step reads nothing on the host: with a loss scale, the fused
  /// step skips on the device's inf flag.
  template <bool Recorded>
  void apply_update(bool skip) {
    if (!skip) {
      if constexpr (Recorded && HasFoundInf<Precision>) {
        optimizer_.step_unless_inf(precision_.found_inf());
      } else {
        precision_.step([this] { optimizer_.step(); });
      }
      parallel_.after_step(flat_);
    }
    precision_.update();
    gradients().zero_grad();
  }

  /// One micro-batch's share of the epoch's counters and loss.
  void account_micro_batch(TrainState& state, const at::Tensor& loss, int64_t batch_size) {
    const auto held = loss.is_cpu() || !loss.requires_grad() ? loss : loss.detach();
    epoch_loss_.add(held);
    state.add_window_loss(held);  // on a device, graph-free (decision 88)
    state.samples_seen += batch_size;
    epoch_samples_ += batch_size;
    ++state.batch;
  }

  /// One optimizer step taken: the counter and the next step's rates.
  void advance(TrainState& state) {
    state.close_window();
    ++state.step;
    apply_schedule(state);
  }

  // ---- the eager driver ----------------------------------------------------
  template <class TaskT, class B>
  void micro_batch(TaskT& task, const B& raw, bool last, int64_t n, TrainState& state) {
    const auto out = forward_backward(task, to_device(raw), last, n);
    account_micro_batch(state, out.loss, out.batch_size);
  }

  /// The update at a window's end, with on_before_step between clip and step.
  template <class Hooks>
  void boundary(int64_t seen, int64_t n, TrainState& state, Hooks& hooks) {
    prepare_update(seen, n);
    if constexpr (HasLastNorm<Clip>) state.grad_norm_tensor_ = clip_.last_norm();
    if constexpr (HasLossScale<Precision>) state.loss_scale_tensor_ = precision_.loss_scale();
    hooks.template dispatch<OnBeforeStep>(state);
    if constexpr (Hooks::template defines<OnBeforeStep>) coordinator().agree_on_skip(state);
    apply_update</*recorded=*/false>(state.step_skipped());
    state.clear_skip();
    advance(state);
  }

  /// on_step_end, and a pending signal's checkpoint.
  template <class Hooks>
  void report_step(TrainState& state, Hooks& hooks, const FitOptions& options, FitResult& result) {
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

  /// What the eager step records, read from a step that ran from the
  /// capture driver's static buffers (the hooks follow in report_step).
  void account_recorded_step(TrainState& state) requires(kGraphs) {
    const auto& out = captured_.outputs();
    for (size_t k = 0; k < out.losses.size(); ++k)
      account_micro_batch(state, out.losses[k], out.batch_sizes[k]);
    if constexpr (HasLastNorm<Clip>) state.grad_norm_tensor_ = out.grad_norm;
    if constexpr (HasLossScale<Precision>) state.loss_scale_tensor_ = precision_.loss_scale();
    advance(state);
  }

  detail::Coordinator<Parallel> coordinator() { return detail::Coordinator<Parallel>(parallel_); }

  void apply_schedule(TrainState& state) { schedules_.apply(optimizer_, state); }

  ModelRef model_;
  Parallel parallel_;
  torch::Device device_;
  detail::DeviceSettings device_settings_;
  FlatParams flat_;
  Optimizer optimizer_;
  detail::Schedules<Scheduler> schedules_;  ///< one per parameter group
  Precision precision_;
  Accumulate accumulate_;
  Clip clip_;
  [[no_unique_address]] Capture capture_;
  struct NoCapture {};
  /// The capture driver's state; nothing when steps are not captured.
  [[no_unique_address]] std::conditional_t<kGraphs, detail::CapturedSteps<Trainer>, NoCapture>
      captured_;
  detail::LossMeter epoch_loss_;
  bool epoch_done_ = false;  ///< on_epoch_end has begun: a checkpoint resumes at the next epoch
  detail::ResumePoint resume_at_;  ///< where this fit starts
  int64_t epoch_samples_ = 0;      ///< this rank's samples of the epoch so far
  bool epoch_resharded_ = false;   ///< the epoch went on after another run's samples
  CheckpointOptions checkpoint_options_;
  detail::TrainerShards shards_;  ///< TrainState::parameter_shards, refused once this is gone
};

}  // namespace trainkit
