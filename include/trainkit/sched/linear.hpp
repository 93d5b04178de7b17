#pragma once
// sched::Linear: the factor on the base rate moves linearly from
// `start_factor` to `end_factor` over `total_iters` steps, then stays
// (torch.optim.lr_scheduler.LinearLR). Defaults decay to zero over the run.
#include <algorithm>
#include <type_traits>

#include "trainkit/sched/context.hpp"

namespace trainkit::sched {

class Linear {
 public:
  static constexpr const char* stable_name(std::type_identity<Linear>) {
    return "trainkit::sched::Linear";
  }
  struct Options {
    double start_factor = 1.0;
    double end_factor = 0.0;
    int64_t total_iters = 0;  ///< 0: the whole run
  };
  Linear() : Linear(Options{}) {}
  explicit Linear(const Options& o) : options_(o) {
    detail::require_option(o.start_factor > 0.0 && o.start_factor <= 1.0, "sched.start_factor",
                           o.start_factor, "0 < start_factor <= 1");
    detail::require_option(o.end_factor >= 0.0 && o.end_factor <= 1.0, "sched.end_factor",
                           o.end_factor, "0 <= end_factor <= 1");
    detail::require_option(o.total_iters >= 0, "sched.total_iters", o.total_iters,
                           "a number of steps > 0, or 0 for the whole run");
  }
  void start(const ScheduleContext& ctx) {
    base_ = ctx.base_lr;
    total_ = detail::resolve_length(options_.total_iters, ctx, "sched.total_iters");
  }
  double lr_at(int64_t step) const {
    const double t = double(std::min(step, total_)) / double(total_);
    return base_ * (options_.start_factor + (options_.end_factor - options_.start_factor) * t);
  }

 private:
  Options options_;
  double base_ = 0.0;
  int64_t total_ = 1;
};

}  // namespace trainkit::sched
