#pragma once
// sched::Step: multiply the learning rate by `gamma` every `step_size` steps
// (torch.optim.lr_scheduler.StepLR).
#include <cmath>
#include <type_traits>

#include "trainkit/sched/context.hpp"

namespace trainkit::sched {

class Step {
 public:
  static constexpr const char* stable_name(std::type_identity<Step>) {
    return "trainkit::sched::Step";
  }
  struct Options {
    int64_t step_size = 1;
    double gamma = 0.1;
  };
  Step() : Step(Options{}) {}
  explicit Step(const Options& o) : options_(o) {
    detail::require_option(o.step_size > 0, "sched.step_size", o.step_size,
                           "a number of steps > 0");
    detail::require_option(o.gamma > 0.0, "sched.gamma", o.gamma, "a number > 0");
  }
  void start(const ScheduleContext& ctx) { base_ = ctx.base_lr; }
  double lr_at(int64_t step) const {
    return base_ * std::pow(options_.gamma, double(step / options_.step_size));
  }

 private:
  Options options_;
  double base_ = 0.0;
};

}  // namespace trainkit::sched
