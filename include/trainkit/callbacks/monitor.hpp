#pragma once
// A monitored epoch metric: its mode (Auto: max for names containing "acc",
// else min), the improvement that counts (`min_delta`, Keras and Lightning
// semantics: better than the best by more than it) and the best value so
// far. EarlyStopping and ModelCheckpoint share it.
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "trainkit/error.hpp"
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

enum class MonitorMode { Auto, Min, Max };

class Monitor {
 public:
  /// `owner` prefixes the option names in errors ("early_stopping").
  Monitor(std::string owner, std::string metric, MonitorMode mode, double min_delta)
      : owner_(std::move(owner)), metric_(std::move(metric)), min_delta_(min_delta) {
    detail::require_option(min_delta >= 0.0 && std::isfinite(min_delta), owner_ + ".min_delta",
                           min_delta, "a number >= 0");
    maximize_ = mode == MonitorMode::Max ||
                (mode == MonitorMode::Auto && metric_.find("acc") != std::string::npos);
    best_ = maximize_ ? -std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::infinity();
  }

  /// The metric at this epoch's end; an error naming the option and the
  /// metrics there are when it is missing.
  double value(const TrainState& state) const {
    const auto it = state.metrics.find(metric_);
    if (it == state.metrics.end()) {
      std::string available;
      for (const auto& [name, v] : state.metrics) available += " " + name;
      detail::throw_option_error(owner_ + ".monitor", metric_,
                                 "a metric logged at epoch end:" + available);
    }
    return it->second;
  }

  /// Takes `value` as the new best when it improves by more than min_delta.
  bool improve(double value) {
    const bool better = maximize_ ? value > best_ + min_delta_ : value < best_ - min_delta_;
    if (better) best_ = value;
    return better;
  }

  const std::string& metric() const { return metric_; }
  double best() const { return best_; }
  void set_best(double best) { best_ = best; }

 private:
  std::string owner_, metric_;
  double min_delta_;
  bool maximize_ = false;
  double best_;
};

}  // namespace trainkit::callbacks
