#pragma once
// Trial: what an objective function receives. It suggests parameters
// define-by-run (a parameter exists only if the code that asks for it runs,
// so conditional spaces are plain `if`s), reports intermediate values and
// asks whether to stop. The study behind it is reached through
// detail::TrialDriver, so objectives are plain functions of `Trial&`
// whatever the study's sampler and pruner.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/tune/record.hpp"
#include "trainkit/tune/system_attrs.hpp"

namespace trainkit::tune {

/// Thrown by an objective to end its trial as pruned (Trial::should_prune
/// said so); the study records it, it does not propagate.
class TrialPruned : public std::runtime_error {
 public:
  explicit TrialPruned(const std::string& why = "pruned") : std::runtime_error(why) {}
};

struct FloatOptions {
  bool log = false;              ///< sample log(x) uniformly (low > 0)
  std::optional<double> step{};  ///< only low, low + step, ... (not with log)
};

struct IntOptions {
  int64_t step = 1;
  bool log = false;  ///< sample log(x) uniformly (low >= 1, step 1)
};

namespace detail {

/// The study's side of a trial (implemented by Study).
class TrialDriver {
 public:
  virtual double suggest(FrozenTrial& trial, const std::string& name, const Distribution& d) = 0;
  virtual void report(FrozenTrial& trial, double value, int64_t step) = 0;
  virtual std::optional<std::string> should_prune(FrozenTrial& trial) = 0;
  virtual void set_user_attr(FrozenTrial& trial, const std::string& key,
                             const nlohmann::json& value) = 0;
  virtual void set_system_attr(FrozenTrial& trial, const std::string& key,
                               const nlohmann::json& value) = 0;

 protected:
  ~TrialDriver() = default;
};

/// suggest_categorical's result type: string literals come back as std::string.
template <class T>
using choice_t = std::conditional_t<std::is_convertible_v<T, std::string_view> &&
                                        !std::is_same_v<std::decay_t<T>, std::nullptr_t>,
                                    std::string, std::decay_t<T>>;

}  // namespace detail

/// A trial's number, read as FrozenTrial's is: `trial.number` (0.1's
/// `trial.number()` went with 0.2.0).
struct TrialNumber {
  int64_t value;
  constexpr operator int64_t() const { return value; }
  friend void to_json(nlohmann::json& j, TrialNumber n) { j = n.value; }
};

class Trial {
 public:
  Trial(detail::TrialDriver& driver, FrozenTrial record)
      : number{record.number}, driver_(&driver), record_(std::move(record)) {}

  /// 0, 1, ... within the study (FrozenTrial::number).
  const TrialNumber number;

  double suggest_float(const std::string& name, double low, double high, FloatOptions o = {}) {
    return driver_->suggest(record_, name, FloatDistribution{low, high, o.log, o.step});
  }
  int64_t suggest_int(const std::string& name, int64_t low, int64_t high, IntOptions o = {}) {
    return static_cast<int64_t>(
        driver_->suggest(record_, name, IntDistribution{low, high, o.step, o.log}));
  }
  template <class T>
  detail::choice_t<T> suggest_categorical(const std::string& name,
                                          std::initializer_list<T> choices) {
    return suggest_categorical(name,
                               std::vector<detail::choice_t<T>>(choices.begin(), choices.end()));
  }
  template <class T>
  T suggest_categorical(const std::string& name, const std::vector<T>& choices) {
    CategoricalDistribution d;
    for (const auto& c : choices) d.choices.emplace_back(c);
    const auto k = static_cast<size_t>(driver_->suggest(record_, name, d));
    return choices.at(k);
  }

  /// The objective's value after `step` (an epoch, or a number of steps),
  /// for pruners and the study report.
  void report(double value, int64_t step) { driver_->report(record_, value, step); }
  /// Whether the pruner stops this trial now; the reason is kept
  /// (prune_reason()) and the trial ends as pruned when the objective returns.
  bool should_prune() {
    if (auto why = driver_->should_prune(record_)) prune_reason_ = std::move(*why);
    return prune_reason_.has_value();
  }
  const std::optional<std::string>& prune_reason() const { return prune_reason_; }
  void set_user_attr(const std::string& key, const nlohmann::json& value) {
    driver_->set_user_attr(record_, key, value);
  }
  /// This trial's constraint values: it is feasible when every one is <= 0
  /// (Optuna's convention; stored as its system attr "constraints"). An
  /// infeasible trial is never a best trial, and multi-objective samplers
  /// rank it behind every feasible one.
  void set_constraints(const std::vector<double>& values) {
    for (const double v : values) {
      if (std::isnan(v))
        throw Error(
            "trainkit: set_constraints: a constraint value is NaN; accepted: numbers, "
            "<= 0 where the constraint holds");
    }
    driver_->set_system_attr(record_, system_attr::kConstraints, values);
  }

  /// The trial as recorded so far: parameters, intermediate values, attrs.
  const FrozenTrial& record() const { return record_; }

 private:
  detail::TrialDriver* driver_;
  FrozenTrial record_;
  std::optional<std::string> prune_reason_;
};

}  // namespace trainkit::tune
