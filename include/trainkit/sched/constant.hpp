#pragma once
// sched::Constant: the base learning rate, optionally scaled by `factor` for
// the first `total_iters` steps (torch.optim.lr_scheduler.ConstantLR).
#include "trainkit/sched/context.hpp"

namespace trainkit::sched {

class Constant {
 public:
  static constexpr const char* stable_name(std::type_identity<Constant>) {
    return "trainkit::sched::Constant";
  }
  struct Options {
    double factor = 1.0;
    int64_t total_iters = 0;
  };
  Constant() : Constant(Options{}) {}
  explicit Constant(const Options& o) : options_(o) {
    detail::require_option(o.factor >= 0.0 && o.factor <= 1.0, "sched.factor", o.factor,
                           "0 <= factor <= 1");
    detail::require_option(o.total_iters >= 0, "sched.total_iters", o.total_iters, "a number >= 0");
  }
  void start(const ScheduleContext& ctx) { base_ = ctx.base_lr; }
  double lr_at(int64_t step) const {
    return step < options_.total_iters ? base_ * options_.factor : base_;
  }

 private:
  Options options_;
  double base_ = 0.0;
};

}  // namespace trainkit::sched
