#pragma once
// tune::Pruning: the callback that connects a Trainer to its trial. After
// every epoch (or every `every_n_steps` optimizer steps) it reports the
// monitored value to the trial and, when the study's pruner says so, stops
// the fit through the trainer's normal stop, with the pruner's reason: the
// run ends cleanly (callbacks see on_fit_end, logs are closed) and the
// study records the trial as pruned.
#include <cstdint>
#include <string>

#include "trainkit/error.hpp"
#include "trainkit/state.hpp"
#include "trainkit/tune/trial.hpp"

namespace trainkit::tune {

class Pruning {
 public:
  struct Options {
    /// An epoch metric ("val_loss", "val_accuracy", ...); with
    /// every_n_steps, the training loss is reported instead.
    std::string monitor = "val_loss";
    /// 0: report at each epoch end, as step = epoch. N: every N optimizer
    /// steps, the training loss, as step = the optimizer step.
    int64_t every_n_steps = 0;
  };

  explicit Pruning(Trial& trial) : Pruning(trial, Options{}) {}
  Pruning(Trial& trial, Options o) : trial_(&trial), options_(std::move(o)) {
    trainkit::detail::require_option(options_.every_n_steps >= 0, "pruning.every_n_steps",
                                     options_.every_n_steps, ">= 0 (0: every epoch)");
  }

  void on_epoch_end(TrainState& state) {
    if (options_.every_n_steps > 0) return;
    const auto it = state.metrics.find(options_.monitor);
    if (it == state.metrics.end()) {
      std::string available;
      for (const auto& [name, v] : state.metrics) available += " " + name;
      trainkit::detail::throw_option_error("pruning.monitor", options_.monitor,
                                           "a metric logged at epoch end:" + available);
    }
    decide(state, it->second, state.epoch);
  }

  void on_step_end(TrainState& state) {
    if (options_.every_n_steps == 0 || state.step % options_.every_n_steps != 0) return;
    decide(state, state.loss(), state.step);
  }

 private:
  void decide(TrainState& state, double value, int64_t step) {
    trial_->report(value, step);
    if (trial_->should_prune()) {
      state.request_stop("pruned by the study (trial " + std::to_string(trial_->number) +
                         "): " + *trial_->prune_reason());
    }
  }

  Trial* trial_;
  Options options_;
};

}  // namespace trainkit::tune
