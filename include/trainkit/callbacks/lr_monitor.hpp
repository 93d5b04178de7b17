#pragma once
// callbacks::LrMonitor: publishes the learning rate for the loggers after it
// in the callback list: as the step scalar `lr` on logging steps, and as the
// epoch metric `lr` (the rate the epoch ended with) when `per_epoch` is set.
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

class LrMonitor {
 public:
  struct Options {
    bool per_step = true;    ///< `lr` in the step scalars on logging steps
    bool per_epoch = false;  ///< `lr` in the epoch metrics
  };
  LrMonitor() : LrMonitor(Options{}) {}
  explicit LrMonitor(const Options& o) : options_(o) {}

  void on_step_end(TrainState& state) {
    // state.lr is the rate of the next step; the one just taken is last_lr_.
    if (options_.per_step && state.should_log()) state.scalars["lr"] = last_lr_;
    last_lr_ = state.lr;
  }
  void on_epoch_begin(TrainState& state) { last_lr_ = state.lr; }
  void on_epoch_end(TrainState& state) {
    if (options_.per_epoch) state.metrics["lr"] = last_lr_;
  }

 private:
  Options options_;
  double last_lr_ = 0.0;
};

}  // namespace trainkit::callbacks
