#pragma once
// The schedule's side of the step: the learning rate (and momentum) for the
// next optimizer step, and the epoch's metrics for a schedule that reads them
// (ReduceLROnPlateau), whose new rate applies from the next step. Each
// parameter group follows its own copy of the schedule, started from the
// group's base learning rate, as PyTorch's schedulers compute every param
// group's rate from its initial_lr (OneCycle with max_lr 0 takes each
// group's lr as its maximum, a group's max_lr is its peak as in PyTorch's
// max_lr list; a group's min_lr is ReduceLROnPlateau's floor for it, as
// PyTorch's per-group min_lrs).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainkit/concepts.hpp"
#include "trainkit/error.hpp"
#include "trainkit/optim/detail/group_options.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state.hpp"

namespace trainkit::detail {

/// An optimizer with a learning rate per parameter group (optim::SGD, Adam, AdamW).
template <class O>
concept HasGroupLr = requires(O& o, const O& c, size_t g, double lr) {
  { c.lr(g) } -> std::convertible_to<double>;
  o.set_lr(g, lr);
};

/// A group's copy of the schedule's options: its min_lr and max_lr where it
/// sets them. A schedule's explicit max_lr would override the group's lr
/// silently, so a group with its own lr must say its peak.
template <class SchedOptions>
SchedOptions group_schedule_options(SchedOptions o, const ParamGroupInfo& group, size_t g) {
  const auto& go = group.options;
  if (go.min_lr) {
    const auto option = group_prefix(g) + ".min_lr";
    if constexpr (requires { o.min_lr; }) {
      require_option(*go.min_lr >= 0.0, option, *go.min_lr, "a learning rate >= 0");
      o.min_lr = *go.min_lr;
    } else {
      require_option(false, option, *go.min_lr,
                     "unset: this schedule has no min_lr (sched::ReduceLROnPlateau has)");
    }
  }
  if constexpr (requires { o.max_lr; }) {
    if (go.max_lr) {
      require_option(*go.max_lr > 0.0, group_prefix(g) + ".max_lr", *go.max_lr,
                     "a learning rate > 0");
      o.max_lr = *go.max_lr;
    } else if (o.max_lr > 0.0 && (go.lr || go.lr_scale)) {
      require_option(false, "sched.max_lr", o.max_lr,
                     "0 (each group peaks at its own lr), or a max_lr for " + group_prefix(g) +
                         ", whose lr the schedule's max_lr would replace");
    }
  } else if (go.max_lr) {
    require_option(false, group_prefix(g) + ".max_lr", *go.max_lr,
                   "unset: this schedule has no max_lr (sched::OneCycle has)");
  }
  return o;
}

template <class Scheduler>
class Schedules {
 public:
  /// One schedule per parameter group, from the groups' learning rates now.
  template <class Optimizer, class SchedOptions>
  Schedules(const Optimizer& optimizer, const std::vector<ParamGroupInfo>& groups,
            const SchedOptions& options) {
    const size_t param_groups = groups.size();
    if constexpr (!HasGroupLr<Optimizer>) {
      require_option(param_groups <= 1, "param_groups", param_groups - 1,
                     "none: this optimizer policy has no per-group learning rate "
                     "(double lr(size_t group) const; void set_lr(size_t group, double lr))");
    }
    schedules_.reserve(param_groups);
    for (size_t g = 0; g < param_groups; ++g) {
      schedules_.emplace_back(group_schedule_options(options, groups[g], g));
      if constexpr (HasGroupLr<Optimizer>) {
        base_lrs_.push_back(optimizer.lr(g));
      } else {
        base_lrs_.push_back(optimizer.lr());
      }
    }
  }

  void start(int64_t total_steps) {
    for (size_t g = 0; g < schedules_.size(); ++g) schedules_[g].start({base_lrs_[g], total_steps});
  }

  /// The rates (and momentum) for state.step; TrainState::lr is the default group's.
  template <class Optimizer>
  void apply(Optimizer& optimizer, TrainState& state) const {
    state.lr = schedules_.front().lr_at(state.step);
    if constexpr (HasGroupLr<Optimizer>) {
      for (size_t g = 0; g < schedules_.size(); ++g)
        optimizer.set_lr(g, g == 0 ? state.lr : schedules_[g].lr_at(state.step));
    } else {
      optimizer.set_lr(state.lr);
    }
    if constexpr (HasMomentumAt<Scheduler> && HasSetMomentum<Optimizer>) {
      if (const auto m = schedules_.front().momentum_at(state.step)) optimizer.set_momentum(*m);
    }
  }

  /// The epoch's metrics to a schedule that reads them, and its new rates.
  template <class Optimizer>
  void end_epoch(Optimizer& optimizer, TrainState& state) {
    if constexpr (ObservesMetrics<Scheduler>) {
      for (auto& s : schedules_) s.observe(state.metrics);
      apply(optimizer, state);
    }
  }

  /// The default group's schedule, and parameter group g's.
  Scheduler& front() { return schedules_.front(); }
  const Scheduler& front() const { return schedules_.front(); }
  Scheduler& operator[](size_t g) { return schedules_.at(g); }
  size_t size() const { return schedules_.size(); }
  double base_lr() const { return base_lrs_.front(); }

 private:
  std::vector<Scheduler> schedules_;
  std::vector<double> base_lrs_;
};

}  // namespace trainkit::detail
