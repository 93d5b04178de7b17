#pragma once
// sched::MultiStep: multiply the learning rate by `gamma` at each milestone
// (torch.optim.lr_scheduler.MultiStepLR).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "trainkit/sched/context.hpp"

namespace trainkit::sched {

class MultiStep {
 public:
  static constexpr const char* stable_name(std::type_identity<MultiStep>) {
    return "trainkit::sched::MultiStep";
  }
  struct Options {
    std::vector<int64_t> milestones{};
    double gamma = 0.1;
  };
  MultiStep() : MultiStep(Options{}) {}
  explicit MultiStep(Options o) : options_(std::move(o)) {
    std::sort(options_.milestones.begin(), options_.milestones.end());
    for (int64_t m : options_.milestones) {
      detail::require_option(m > 0, "sched.milestones", m, "step numbers > 0");
    }
    detail::require_option(options_.gamma > 0.0, "sched.gamma", options_.gamma, "a number > 0");
  }
  void start(const ScheduleContext& ctx) { base_ = ctx.base_lr; }
  double lr_at(int64_t step) const {
    const auto& m = options_.milestones;
    const auto passed = std::upper_bound(m.begin(), m.end(), step) - m.begin();
    return base_ * std::pow(options_.gamma, double(passed));
  }

 private:
  Options options_;
  double base_ = 0.0;
};

}  // namespace trainkit::sched
