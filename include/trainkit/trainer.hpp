#pragma once
// Trainer<Optimizer, Scheduler, Precision, Accumulate, Clip, Parallel>: the
// step algorithm of DESIGN.md over six compile-time policies.
//
//   per micro-batch k of N: to device; defer grad sync unless k is last;
//     autocast { loss = task.step(model, batch) }; backward(loss / N)
//   per boundary: finish sync; unscale; clip (reports the pre-clip norm);
//     step unless inf/NaN; update scale; advance schedule; zero grads
//   an epoch ending inside a window steps with the partial window, rescaled
//   to the mean over the micro-batches seen; nothing reads the device in the
//   hot path.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainkit/accumulate/none.hpp"
#include "trainkit/clip/none.hpp"
#include "trainkit/concepts.hpp"
#include "trainkit/data/batch_view.hpp"
#include "trainkit/detail/allocator.hpp"
#include "trainkit/detail/callback_set.hpp"
#include "trainkit/detail/loss_meter.hpp"
#include "trainkit/detail/policy_checks.hpp"
#include "trainkit/error.hpp"
#include "trainkit/optim/adamw.hpp"
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
  /// Keep freed CPU memory for reuse (see detail/allocator.hpp); process-wide.
  bool keep_freed_cpu_memory = true;
};

struct FitOptions {
  int64_t epochs = 1;
  data::BatchView val_data{};  ///< validated after every epoch when set (not owned)
  int64_t log_every = 10;      ///< callbacks may read device values every N steps
  int64_t max_steps = -1;      ///< stop after this many optimizer steps (-1: no limit)
};

using Metrics = std::map<std::string, double>;

struct FitResult {
  int64_t epochs = 0;  ///< epochs completed
  int64_t steps = 0;   ///< optimizer steps taken
  bool stopped = false;
  std::string stop_reason;
  Metrics metrics;  ///< the last epoch's metrics
};

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
        flat_(model_.module()),
        optimizer_(flat_, options.optim),
        scheduler_(options.sched),
        precision_(options.precision, device_),
        accumulate_(options.accumulate),
        clip_(options.clip),
        base_lr_(optimizer_.lr()) {
    detail::require_option(flat_.numel() > 0, "model", "no trainable parameters",
                           "a model with at least one parameter that requires grad");
  }

  /// Trains for `options.epochs` over `train_data` (any range of data::Batch;
  /// `set_epoch(int64_t)` and `size()` are used when present).
  template <class TaskT, class TrainData, class... Callbacks>
  FitResult fit(TaskT&& task, TrainData&& train_data, const FitOptions& options = {},
                Callbacks... callbacks) {
    static_assert(detail::check_task<std::remove_cvref_t<TaskT>>());
    static_assert((detail::check_callback<detail::unwrap_ref_t<Callbacks>>() && ...));
    detail::require_option(options.epochs >= 1, "fit.epochs", options.epochs, "a number >= 1");
    detail::require_option(options.log_every >= 1, "fit.log_every", options.log_every,
                           "a number >= 1");
    const int64_t n = accumulate_.steps();

    TrainState state(model_.module());
    state.epochs = options.epochs;
    state.log_every = options.log_every;
    state.main_process = parallel_.is_main();
    if constexpr (requires { train_data.size(); }) {
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

    detail::CallbackSet<Callbacks...> hooks(std::move(callbacks)...);
    FitResult result;
    try {
      hooks.template dispatch<OnFitBegin>(state);
      model_.module().train();
      for (int64_t epoch = 0; epoch < options.epochs && !state.stop_requested(); ++epoch) {
        state.epoch = epoch;
        state.batch = 0;
        state.metrics.clear();
        if constexpr (requires { train_data.set_epoch(epoch); }) train_data.set_epoch(epoch);
        hooks.template dispatch<OnEpochBegin>(state);

        epoch_loss_.reset();
        int64_t k = 0;  // micro-batches in the open window
        for (auto&& batch : train_data) {
          micro_batch(task, batch, /*last=*/k + 1 == n, n, state);
          if (++k == n) {
            boundary(k, n, state);
            k = 0;
            hooks.template dispatch<OnStepEnd>(state);
            if (state.stop_requested() || state.step == options.max_steps) break;
          }
        }
        if (k > 0) {
          boundary(k, n, state);
          hooks.template dispatch<OnStepEnd>(state);
        }
        if (!epoch_loss_.empty()) state.metrics["train_loss"] = epoch_loss_.mean();
        if (options.val_data) {
          for (const auto& [name, value] : evaluate(task, options.val_data)) {
            state.metrics["val_" + name] = value;
          }
          hooks.template dispatch<OnValidationEnd>(state);
        }
        hooks.template dispatch<OnEpochEnd>(state);
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
    std::map<std::string, at::Tensor> sums;
    int64_t count = 0;
    data.for_each([&](const data::Batch& raw) {
      const auto batch = raw.to(device_);
      StepOutput out;
      {
        [[maybe_unused]] auto autocast = precision_.autocast();
        out = task.step(model_, batch);
      }
      const double weight = static_cast<double>(out.batch_size);
      accumulate_sum(sums["loss"], out.loss, weight);
      for (const auto& [name, value] : out.metrics) accumulate_sum(sums[name], value, weight);
      count += out.batch_size;
    });
    module.train(was_training);
    Metrics metrics;
    for (const auto& [name, sum] : sums) {
      metrics[name] = count > 0 ? sum.template item<double>() / double(count) : 0.0;
    }
    return metrics;
  }

  torch::nn::Module& model() { return model_.module(); }
  torch::Device device() const { return device_; }
  FlatParams& flat_params() { return flat_; }
  Optimizer& optimizer() { return optimizer_; }
  Scheduler& scheduler() { return scheduler_; }
  Precision& precision() { return precision_; }
  Clip& clipper() { return clip_; }
  Parallel& parallel() { return parallel_; }

 private:
  template <class Model>
  static torch::Device prepare(Parallel& parallel, Model& model, bool keep_memory) {
    if (keep_memory) detail::keep_freed_cpu_memory();
    parallel.prepare(model.module());
    return parallel.device();
  }

  template <class TaskT>
  void micro_batch(TaskT& task, const data::Batch& raw, bool last, int64_t n, TrainState& state) {
    const auto batch = raw.to(device_);
    auto run = [&] {
      StepOutput out;
      {
        [[maybe_unused]] auto autocast = precision_.autocast();
        out = task.step(model_, batch);
      }
      precision_.backward(n == 1 ? out.loss : out.loss / static_cast<double>(n));
      epoch_loss_.add(out.loss);
      state.loss_tensor = out.loss;  // held until the next micro-batch
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

  void boundary(int64_t seen, int64_t n, TrainState& state) {
    parallel_.finish_sync(flat_);
    if (seen != n) flat_.scale_grad(static_cast<double>(n) / static_cast<double>(seen));
    precision_.unscale(flat_);
    clip_.clip(flat_);
    precision_.step([this] { optimizer_.step(); });
    precision_.update();
    ++state.step;
    apply_schedule(state);
    flat_.zero_grad();
    if constexpr (HasLastNorm<Clip>) state.grad_norm_tensor = clip_.last_norm();
    if constexpr (HasLossScale<Precision>) state.loss_scale_tensor = precision_.loss_scale();
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

  static void accumulate_sum(at::Tensor& sum, const at::Tensor& value, double weight) {
    const auto term = value.detach().to(at::kDouble) * weight;
    sum = sum.defined() ? sum + term : term;
  }

  ModelRef model_;
  Parallel parallel_;
  torch::Device device_;
  FlatParams flat_;
  Optimizer optimizer_;
  Scheduler scheduler_;
  Precision precision_;
  Accumulate accumulate_;
  Clip clip_;
  double base_lr_;
  detail::LossMeter epoch_loss_;
};

}  // namespace trainkit
