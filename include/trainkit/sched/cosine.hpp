#pragma once
// sched::Cosine: cosine annealing from the base rate to `eta_min` over
// `t_max` steps, periodic beyond (torch.optim.lr_scheduler.CosineAnnealingLR).
// t_max = 0 means the whole run.
#include <cmath>
#include <numbers>
#include <type_traits>

#include "trainkit/sched/context.hpp"

namespace trainkit::sched {

class Cosine {
 public:
  static constexpr const char* stable_name(std::type_identity<Cosine>) {
    return "trainkit::sched::Cosine";
  }
  struct Options {
    int64_t t_max = 0;
    double eta_min = 0.0;
  };
  Cosine() : Cosine(Options{}) {}
  explicit Cosine(const Options& o) : options_(o) {
    detail::require_option(o.t_max >= 0, "sched.t_max", o.t_max,
                           "a number of steps > 0, or 0 for the whole run");
    detail::require_option(o.eta_min >= 0.0, "sched.eta_min", o.eta_min, "a number >= 0");
  }
  void start(const ScheduleContext& ctx) {
    base_ = ctx.base_lr;
    t_max_ = detail::resolve_length(options_.t_max, ctx, "sched.t_max");
  }
  double lr_at(int64_t step) const {
    const double e = options_.eta_min;
    return e +
           (base_ - e) * (1.0 + std::cos(std::numbers::pi * double(step) / double(t_max_))) / 2.0;
  }

 private:
  Options options_;
  double base_ = 0.0;
  int64_t t_max_ = 1;
};

}  // namespace trainkit::sched
