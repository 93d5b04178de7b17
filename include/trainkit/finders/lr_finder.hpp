#pragma once
// The learning-rate range test (Smith 2017), after Lightning's lr_find:
// a few hundred steps with the learning rate growing from min_lr to max_lr
// (exponentially or linearly), the loss smoothed by a debiased moving
// average, a stop when it diverges, and a suggestion where the smoothed loss
// falls fastest. The model, the optimizer, the precision policy's state and
// the random generators are put back afterwards, bit for bit. The curve goes
// to a CSV file or, as a chart, into a callbacks::RunReport.
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "trainkit/callbacks/run_report.hpp"
#include "trainkit/concepts.hpp"
#include "trainkit/error.hpp"
#include "trainkit/finders/detail/trial.hpp"
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/state.hpp"
#include "trainkit/trainer.hpp"

namespace trainkit::finders {

struct LrFindOptions {
  double min_lr = 1e-7;
  double max_lr = 1.0;
  int64_t num_steps = 100;
  bool exponential = true;  ///< false: a linear sweep
  double smoothing = 0.98;  ///< beta of the loss's moving average (0: none)
  double divergence = 4.0;  ///< stop once the smoothed loss exceeds this x the best (0: never)
  int64_t skip_begin = 10;  ///< points left out of the suggestion at the start...
  int64_t skip_end = 1;     ///< ...and at the end, as Lightning's defaults
  /// Suggest only up to the smoothed loss's minimum: a fall after it is the
  /// recovery from a blow-up, not a rate to train at (Lightning: false).
  bool up_to_minimum = true;
};

struct LrFindResult {
  std::vector<double> lrs;     ///< the learning rate of each step taken
  std::vector<double> losses;  ///< the smoothed loss after each step
  std::vector<double> raw;     ///< the step's loss as the task returned it
  std::optional<double> suggestion;
  bool diverged = false;
  bool exponential = true;  ///< the sweep's kind: the chart's lr axis is logarithmic

  /// The smoothed loss against the learning rate with the suggestion
  /// marked, for callbacks::RunReport::add_figure.
  callbacks::RunReport::Figure figure() const {
    callbacks::RunReport::Figure f;
    f.title = "lr_find";
    f.x_label = "lr";
    f.log_x = exponential;
    callbacks::RunReport::Series points;
    for (size_t i = 0; i < lrs.size(); ++i) points.emplace_back(lrs[i], losses[i]);
    f.lines.emplace_back("smoothed loss", std::move(points));
    f.mark_x = suggestion;
    f.mark_label = "suggestion";
    return f;
  }

  /// lr,loss,raw_loss per step, written atomically.
  void write_csv(const std::filesystem::path& path) const {
    std::ostringstream out;
    out.precision(17);
    out << "lr,loss,raw_loss\n";
    for (size_t i = 0; i < lrs.size(); ++i)
      out << lrs[i] << ',' << losses[i] << ',' << raw[i] << '\n';
    io::write_file_atomically(path, out.str());
  }
};

/// The learning rate of step `k` (0-based) of a sweep, as Lightning's
/// _ExponentialLR and _LinearLR: step k uses fraction (k + 1) / num_steps.
inline double sweep_lr(const LrFindOptions& o, int64_t k) {
  const double r = double(k + 1) / double(o.num_steps);
  return o.exponential ? o.min_lr * std::pow(o.max_lr / o.min_lr, r)
                       : o.min_lr + r * (o.max_lr - o.min_lr);
}

/// Where the smoothed loss falls fastest: the smallest unit-step gradient
/// (torch.gradient: central differences inside, one-sided at the ends) of the
/// finite losses between skip_begin and skip_end, and with `up_to_minimum`
/// not after the smallest of them. Nothing when fewer than two points remain
/// or (with `up_to_minimum`) when the first of them is the smallest.
inline std::optional<double> suggest_lr(const std::vector<double>& lrs,
                                        const std::vector<double>& losses, int64_t skip_begin,
                                        int64_t skip_end, bool up_to_minimum = true) {
  std::vector<double> l, lr;
  for (int64_t i = skip_begin; i < int64_t(losses.size()) - skip_end; ++i) {
    if (!std::isfinite(losses[size_t(i)])) continue;
    l.push_back(losses[size_t(i)]);
    lr.push_back(lrs[size_t(i)]);
  }
  if (l.size() < 2) return std::nullopt;
  const size_t last =
      up_to_minimum ? size_t(std::min_element(l.begin(), l.end()) - l.begin()) : l.size() - 1;
  if (last == 0) return std::nullopt;  // the loss only rose: no rate to suggest
  size_t best = 0;
  double steepest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i <= last; ++i) {
    const double g = i == 0              ? l[1] - l[0]
                     : i + 1 == l.size() ? l[i] - l[i - 1]
                                         : (l[i + 1] - l[i - 1]) / 2;
    if (g < steepest) steepest = g, best = i;
  }
  return lr[best];
}

namespace detail {

/// Sets each step's learning rate (after the trainer's schedule has set its
/// own) and records the smoothed loss; asks to stop on divergence.
template <class TrainerT>
struct LrSweep {
  TrainerT* trainer;
  LrFindOptions options;
  LrFindResult* result;
  double average = 0, best = std::numeric_limits<double>::infinity();

  void on_fit_begin(TrainState&) { trainer->optimizer().set_lr(sweep_lr(options, 0)); }
  void on_step_end(TrainState& state) {
    const int64_t k = state.step - 1;  // the step just taken
    const double loss = state.loss();
    const double beta = options.smoothing;
    average = beta * average + (1 - beta) * loss;
    const double smoothed = beta > 0 ? average / (1 - std::pow(beta, double(k + 1))) : loss;
    result->lrs.push_back(sweep_lr(options, k));
    result->losses.push_back(smoothed);
    result->raw.push_back(loss);
    if (options.divergence > 0 && k > 1 && !(smoothed <= options.divergence * best)) {
      result->diverged = true;
      state.request_stop("lr_find: the loss diverged");
    }
    if (smoothed < best || k == 1) best = smoothed;
    trainer->optimizer().set_lr(sweep_lr(options, k + 1));
  }
};

inline void check(const LrFindOptions& o) {
  using trainkit::detail::require_option;
  require_option(o.min_lr > 0 && std::isfinite(o.min_lr), "lr_find.min_lr", o.min_lr,
                 "a finite number > 0");
  require_option(o.max_lr > o.min_lr && std::isfinite(o.max_lr), "lr_find.max_lr", o.max_lr,
                 "a finite number > min_lr = " + std::to_string(o.min_lr));
  require_option(o.num_steps >= 2, "lr_find.num_steps", o.num_steps, "a number >= 2");
  require_option(o.smoothing >= 0 && o.smoothing < 1, "lr_find.smoothing", o.smoothing,
                 "a number in [0, 1)");
  require_option(o.divergence == 0 || o.divergence > 1, "lr_find.divergence", o.divergence,
                 "0 (never stop) or a number > 1");
  require_option(o.skip_begin >= 0 && o.skip_end >= 0, "lr_find.skip_begin", o.skip_begin,
                 "skip_begin and skip_end >= 0");
}

}  // namespace detail

/// Runs the range test on `trainer` over `data` (repeated as needed) and puts
/// the trainer back as it was. Use the suggestion (or read the curve) as
/// the learning rate, or OneCycle's max_lr, of the real run.
template <class TrainerT, class TaskT, class TrainData>
LrFindResult lr_find(TrainerT& trainer, TaskT&& task, TrainData&& data,
                     const LrFindOptions& options = {}) {
  detail::check(options);
  LrFindResult result;
  result.exponential = options.exponential;
  detail::Snapshot<TrainerT> snapshot(trainer);
  try {
    detail::fit_steps(trainer, std::forward<TaskT>(task), std::forward<TrainData>(data),
                      options.num_steps, /*log_every=*/1,
                      detail::LrSweep<TrainerT>{&trainer, options, &result});
  } catch (...) {
    snapshot.restore();
    throw;
  }
  snapshot.restore();
  if (result.lrs.empty()) throw Error("trainkit: lr_find: the training data gave no batch");
  result.suggestion = suggest_lr(result.lrs, result.losses, options.skip_begin, options.skip_end,
                                 options.up_to_minimum);
  return result;
}

}  // namespace trainkit::finders
