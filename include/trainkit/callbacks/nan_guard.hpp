#pragma once
// callbacks::NanGuard: before each optimizer step, a non-finite loss or
// gradient norm either skips the step (gradients dropped, the schedule goes
// on, like an fp16 overflow) or stops training with an error naming the step.
// It reads the loss and the norm from the device every step: it trades a
// little speed for safety. Under fp16 the scaler already skips overflowing
// steps, so only the loss is checked there.
#include <cmath>
#include <string>

#include "trainkit/error.hpp"
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

class NanGuard {
 public:
  enum class Action { Skip, Stop };
  struct Options {
    Action action = Action::Stop;
  };
  NanGuard() : NanGuard(Options{}) {}
  explicit NanGuard(const Options& o) : options_(o) {}

  void on_before_step(TrainState& state) {
    std::string what;
    const double loss = state.loss();
    if (!std::isfinite(loss)) {
      what = "non-finite loss (" + std::to_string(loss) + ")";
    } else if (!state.has_loss_scale()) {
      if (const auto norm = state.grad_norm(); norm && !std::isfinite(*norm)) {
        what = "non-finite gradient norm (" + std::to_string(*norm) + ")";
      }
    }
    if (what.empty()) return;
    what += " at step " + std::to_string(state.step + 1);
    if (options_.action == Action::Stop) throw Error("trainkit: NanGuard: " + what);
    ++skipped_;
    state.skip_step("NanGuard: skipped, " + what);
  }

  int64_t skipped() const { return skipped_; }

 private:
  Options options_;
  int64_t skipped_ = 0;
};

}  // namespace trainkit::callbacks
