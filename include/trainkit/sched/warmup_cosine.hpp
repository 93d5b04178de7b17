#pragma once
// sched::WarmupCosine: linear warmup from `start_factor * base` to the base
// rate over `warmup_steps`, then cosine annealing to `eta_min` by
// `total_steps` (PyTorch: SequentialLR(LinearLR, CosineAnnealingLR)), then
// `eta_min` held, as nanoGPT's get_lr and timm hold it; `periodic` follows
// the cosine back up instead, as PyTorch's CosineAnnealingLR does. nanoGPT's
// warm-up, lr * (it + 1) / (warmup + 1), is start_factor = 1 / (warmup + 1).
#include <cmath>
#include <numbers>
#include <type_traits>

#include "trainkit/sched/context.hpp"

namespace trainkit::sched {

class WarmupCosine {
 public:
  static constexpr const char* stable_name(std::type_identity<WarmupCosine>) {
    return "trainkit::sched::WarmupCosine";
  }
  struct Options {
    int64_t warmup_steps = 0;
    double start_factor = 0.01;
    int64_t total_steps = 0;  ///< 0: the whole run
    double eta_min = 0.0;
    bool periodic = false;  ///< past total_steps: false holds eta_min; true rises again
  };
  WarmupCosine() : WarmupCosine(Options{}) {}
  explicit WarmupCosine(const Options& o) : options_(o) {
    detail::require_option(o.warmup_steps >= 0, "sched.warmup_steps", o.warmup_steps,
                           "a number >= 0");
    detail::require_option(o.start_factor > 0.0 && o.start_factor <= 1.0, "sched.start_factor",
                           o.start_factor, "0 < start_factor <= 1");
    detail::require_option(o.eta_min >= 0.0, "sched.eta_min", o.eta_min, "a number >= 0");
  }
  void start(const ScheduleContext& ctx) {
    base_ = ctx.base_lr;
    total_ = detail::resolve_length(options_.total_steps, ctx, "sched.total_steps");
    detail::require_option(options_.warmup_steps < total_, "sched.warmup_steps",
                           options_.warmup_steps, "fewer steps than sched.total_steps");
  }
  double lr_at(int64_t step) const {
    const int64_t w = options_.warmup_steps;
    if (step < w) {
      return base_ *
             (options_.start_factor + (1.0 - options_.start_factor) * double(step) / double(w));
    }
    const double e = options_.eta_min;
    if (step >= total_ && !options_.periodic) return e;
    const double t = double(step - w) / double(total_ - w);
    return e + (base_ - e) * (1.0 + std::cos(std::numbers::pi * t)) / 2.0;
  }

 private:
  Options options_;
  double base_ = 0.0;
  int64_t total_ = 1;
};

}  // namespace trainkit::sched
