#pragma once
// sched::ReduceLROnPlateau: multiply the learning rate by `factor` when the
// metric it names has stopped improving for `patience` epochs
// (torch.optim.lr_scheduler.ReduceLROnPlateau, decision for decision:
// thresholds relative or absolute, cooldown, min_lr, eps), after an optional
// linear warm-up. Unlike the closed-form schedules it has state: the Trainer
// gives it each epoch's metrics once validation has run (`observe`; under
// DDP every rank sees the same averaged values, so all decide alike) and
// keeps its state in checkpoints.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "trainkit/sched/context.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::sched {

class ReduceLROnPlateau {
 public:
  static constexpr const char* stable_name(std::type_identity<ReduceLROnPlateau>) {
    return "trainkit::sched::ReduceLROnPlateau";
  }
  enum class Mode { Min, Max };
  enum class Threshold { Rel, Abs };
  struct Options {
    std::string metric = "val_loss";  ///< a key of the epoch's metrics (FitResult::metrics)
    Mode mode = Mode::Min;
    double factor = 0.1;
    int64_t patience = 10;  ///< epochs without improvement that are tolerated
    double threshold = 1e-4;
    Threshold threshold_mode = Threshold::Rel;
    int64_t cooldown = 0;  ///< epochs after a reduction in which bad epochs do not count
    double min_lr = 0.0;
    double eps = 1e-8;  ///< a reduction smaller than this is not made
    /// Steps s < warmup_steps run at lr * (s + 1) / warmup_steps.
    int64_t warmup_steps = 0;
  };

  ReduceLROnPlateau() : ReduceLROnPlateau(Options{}) {}
  explicit ReduceLROnPlateau(Options o) : options_(std::move(o)) {
    detail::require_option(!options_.metric.empty(), "sched.metric", options_.metric,
                           "the name of a metric, such as val_loss");
    detail::require_option(options_.factor >= 0.0 && options_.factor < 1.0, "sched.factor",
                           options_.factor, "a number in [0, 1)");
    detail::require_option(options_.patience >= 0, "sched.patience", options_.patience,
                           "a number of epochs >= 0");
    detail::require_option(options_.threshold >= 0.0, "sched.threshold", options_.threshold,
                           "a number >= 0");
    detail::require_option(options_.cooldown >= 0, "sched.cooldown", options_.cooldown,
                           "a number of epochs >= 0");
    detail::require_option(options_.min_lr >= 0.0, "sched.min_lr", options_.min_lr,
                           "a learning rate >= 0");
    detail::require_option(options_.eps >= 0.0, "sched.eps", options_.eps, "a number >= 0");
    detail::require_option(options_.warmup_steps >= 0, "sched.warmup_steps", options_.warmup_steps,
                           "a number of steps >= 0");
  }

  void start(const ScheduleContext& ctx) {
    lr_ = ctx.base_lr;
    best_ = worst();
    bad_epochs_ = cooldown_left_ = 0;
  }

  double lr_at(int64_t step) const {
    if (step < options_.warmup_steps) return lr_ * double(step + 1) / double(options_.warmup_steps);
    return lr_;
  }

  /// One epoch's metrics: PyTorch's `scheduler.step(metrics[metric])`.
  void observe(const std::map<std::string, double>& metrics) {
    const auto it = metrics.find(options_.metric);
    if (it == metrics.end()) {
      std::string names;
      for (const auto& [name, value] : metrics) names += (names.empty() ? "" : ", ") + name;
      detail::throw_option_error(
          "sched.metric", options_.metric,
          "one of this epoch's metrics (" + names + "); val_* metrics need FitOptions::val_data");
    }
    observe(it->second);
  }
  void observe(double current) {
    if (better(current)) {
      best_ = current;
      bad_epochs_ = 0;
    } else {
      ++bad_epochs_;
    }
    if (cooldown_left_ > 0) {  // bad epochs in the cooldown do not count
      --cooldown_left_;
      bad_epochs_ = 0;
    }
    if (bad_epochs_ > options_.patience) {
      const double reduced = std::max(lr_ * options_.factor, options_.min_lr);
      if (lr_ - reduced > options_.eps) lr_ = reduced;
      cooldown_left_ = options_.cooldown;
      bad_epochs_ = 0;
    }
  }

  double lr() const { return lr_; }
  double best() const { return best_; }
  int64_t bad_epochs() const { return bad_epochs_; }

  StateDict state_dict() const {
    StateDict d;
    d.values = {{"lr", lr_},
                {"best", StateDict::number(best_)},
                {"bad_epochs", bad_epochs_},
                {"cooldown_left", cooldown_left_}};
    return d;
  }
  void load_state_dict(const StateDict& d) {
    const auto lr = d.value<double>("lr"), best = d.value<double>("best");
    const auto bad = d.value<int64_t>("bad_epochs"), cooldown = d.value<int64_t>("cooldown_left");
    lr_ = lr, best_ = best, bad_epochs_ = bad, cooldown_left_ = cooldown;
  }

 private:
  double worst() const {
    const double inf = std::numeric_limits<double>::infinity();
    return options_.mode == Mode::Min ? inf : -inf;
  }
  // PyTorch's is_better, comparisons with NaN included (never better).
  bool better(double a) const {
    const double t = options_.threshold;
    const bool rel = options_.threshold_mode == Threshold::Rel;
    if (options_.mode == Mode::Min) return rel ? a < best_ * (1.0 - t) : a < best_ - t;
    return rel ? a > best_ * (t + 1.0) : a > best_ + t;
  }

  Options options_;
  double lr_ = 0.0, best_ = 0.0;
  int64_t bad_epochs_ = 0, cooldown_left_ = 0;
};

}  // namespace trainkit::sched
