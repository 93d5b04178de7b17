#pragma once
// What a schedule learns when training starts: the optimizer's base learning
// rate and, when the trainer can count them, the number of optimizer steps.
#include <cstdint>
#include <string>

#include "trainkit/error.hpp"

namespace trainkit::sched {

struct ScheduleContext {
  double base_lr = 0.0;
  int64_t total_steps = -1;  ///< optimizer steps (boundaries) in the run; -1 when unknown
};

}  // namespace trainkit::sched

namespace trainkit::detail {
/// A schedule length: the option if set (> 0), else the trainer's count, else an error.
inline int64_t resolve_length(int64_t option, const sched::ScheduleContext& ctx, const char* name) {
  if (option > 0) return option;
  require_option(
      ctx.total_steps > 0, name, option,
      "a number of optimizer steps > 0; it was not set and the trainer could not infer it "
      "(training data without size(); pass it explicitly)");
  return ctx.total_steps;
}
}  // namespace trainkit::detail
