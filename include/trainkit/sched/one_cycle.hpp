#pragma once
// sched::OneCycle: the 1cycle policy (Smith & Topin) with PyTorch's exact
// phase boundaries, cos or linear annealing, the three-phase variant and
// inverse momentum cycling (torch.optim.lr_scheduler.OneCycleLR).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <type_traits>
#include <vector>

#include "trainkit/sched/context.hpp"

namespace trainkit::sched {

class OneCycle {
 public:
  static constexpr const char* stable_name(std::type_identity<OneCycle>) {
    return "trainkit::sched::OneCycle";
  }
  enum class Anneal { Cos, Linear };
  struct Options {
    double max_lr = 0.0;      ///< 0: the optimizer's lr
    int64_t total_steps = 0;  ///< 0: the whole run
    double pct_start = 0.3;
    Anneal anneal = Anneal::Cos;
    double div_factor = 25.0;
    double final_div_factor = 1e4;
    bool three_phase = false;
    bool cycle_momentum = true;
    double base_momentum = 0.85;
    double max_momentum = 0.95;
  };

  OneCycle() : OneCycle(Options{}) {}
  explicit OneCycle(const Options& o) : options_(o) {
    using detail::require_option;
    require_option(o.max_lr >= 0.0, "sched.max_lr", o.max_lr, "a number > 0, or 0 for optim.lr");
    require_option(o.pct_start > 0.0 && o.pct_start < 1.0, "sched.pct_start", o.pct_start,
                   "0 < pct_start < 1");
    require_option(o.div_factor > 0.0, "sched.div_factor", o.div_factor, "a number > 0");
    require_option(o.final_div_factor > 0.0, "sched.final_div_factor", o.final_div_factor,
                   "a number > 0");
    require_option(!o.cycle_momentum || o.base_momentum <= o.max_momentum, "sched.base_momentum",
                   o.base_momentum, "a number <= sched.max_momentum");
  }

  void start(const ScheduleContext& ctx) {
    const auto& o = options_;
    total_ = detail::resolve_length(o.total_steps, ctx, "sched.total_steps");
    const double max_lr = o.max_lr > 0.0 ? o.max_lr : ctx.base_lr;
    const double initial = max_lr / o.div_factor;
    const double min_lr = initial / o.final_div_factor;
    const double pct = o.pct_start * double(total_);
    const double hi = o.max_momentum, lo = o.base_momentum;
    if (o.three_phase) {
      phases_ = {{pct - 1.0, initial, max_lr, hi, lo},
                 {2.0 * pct - 2.0, max_lr, initial, lo, hi},
                 {double(total_) - 1.0, initial, min_lr, hi, hi}};
    } else {
      phases_ = {{pct - 1.0, initial, max_lr, hi, lo},
                 {double(total_) - 1.0, max_lr, min_lr, lo, hi}};
    }
  }

  double lr_at(int64_t step) const { return at(step).first; }

  /// Momentum (SGD) or beta1 (Adam family) for `step`, when cycling is on.
  std::optional<double> momentum_at(int64_t step) const {
    if (!options_.cycle_momentum) return std::nullopt;
    return at(step).second;
  }

 private:
  struct Phase {
    double end_step, start_lr, end_lr, start_momentum, end_momentum;
  };

  double anneal(double start, double end, double pct) const {
    if (options_.anneal == Anneal::Linear) return (end - start) * pct + start;
    return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
  }

  std::pair<double, double> at(int64_t step) const {
    const double s = double(std::min(step, total_));  // PyTorch raises past the end
    double start_step = 0.0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& p = phases_[i];
      if (s <= p.end_step || i + 1 == phases_.size()) {
        const double pct = (s - start_step) / (p.end_step - start_step);
        return {anneal(p.start_lr, p.end_lr, pct), anneal(p.start_momentum, p.end_momentum, pct)};
      }
      start_step = p.end_step;
    }
    return {0.0, 0.0};  // unreachable once started
  }

  Options options_;
  int64_t total_ = 1;
  std::vector<Phase> phases_;
};

}  // namespace trainkit::sched
