#pragma once
// The schedule's side of the step: the learning rate (and momentum) for the
// next optimizer step, and the epoch's metrics for a schedule that reads them
// (ReduceLROnPlateau), whose new rate applies from the next step.
#include "trainkit/concepts.hpp"
#include "trainkit/state.hpp"

namespace trainkit::detail {

template <class Scheduler, class Optimizer>
void apply_schedule(const Scheduler& scheduler, Optimizer& optimizer, TrainState& state) {
  state.lr = scheduler.lr_at(state.step);
  optimizer.set_lr(state.lr);
  if constexpr (HasMomentumAt<Scheduler> && HasSetMomentum<Optimizer>) {
    if (const auto m = scheduler.momentum_at(state.step)) optimizer.set_momentum(*m);
  }
}

template <class Scheduler, class Optimizer>
void end_epoch_schedule(Scheduler& scheduler, Optimizer& optimizer, TrainState& state) {
  if constexpr (ObservesMetrics<Scheduler>) {
    scheduler.observe(state.metrics);
    apply_schedule(scheduler, optimizer, state);
  }
}

}  // namespace trainkit::detail
