#pragma once
// sched::Exponential: lr = base * gamma^step (torch.optim.lr_scheduler.ExponentialLR).
#include <cmath>
#include <type_traits>

#include "trainkit/sched/context.hpp"

namespace trainkit::sched {

class Exponential {
 public:
  static constexpr const char* stable_name(std::type_identity<Exponential>) {
    return "trainkit::sched::Exponential";
  }
  struct Options {
    double gamma = 0.99;
  };
  Exponential() : Exponential(Options{}) {}
  explicit Exponential(const Options& o) : options_(o) {
    detail::require_option(o.gamma > 0.0, "sched.gamma", o.gamma, "a number > 0");
  }
  void start(const ScheduleContext& ctx) { base_ = ctx.base_lr; }
  double lr_at(int64_t step) const { return base_ * std::pow(options_.gamma, double(step)); }

 private:
  Options options_;
  double base_ = 0.0;
};

}  // namespace trainkit::sched
