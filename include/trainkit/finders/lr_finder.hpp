#pragma once
// The learning-rate range test (Smith 2017), after Lightning's lr_find:
// a few hundred steps with the learning rate growing from min_lr to max_lr
// (exponentially or linearly), the loss smoothed by a debiased moving
// average, a stop when it diverges, and a suggestion where the smoothed loss
// falls fastest. The model, the optimizer, the precision policy's state and
// the random generators are put back afterwards, bit for bit.
#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "trainkit/concepts.hpp"
#include "trainkit/detail/checkpoint_parts.hpp"
#include "trainkit/error.hpp"
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
};

struct LrFindResult {
  std::vector<double> lrs;     ///< the learning rate of each step taken
  std::vector<double> losses;  ///< the smoothed loss after each step
  std::vector<double> raw;     ///< the step's loss as the task returned it
  std::optional<double> suggestion;
  bool diverged = false;

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
/// finite losses between skip_begin and skip_end. Nothing when fewer than two
/// points remain.
inline std::optional<double> suggest_lr(const std::vector<double>& lrs,
                                        const std::vector<double>& losses, int64_t skip_begin,
                                        int64_t skip_end) {
  std::vector<double> l, lr;
  for (int64_t i = skip_begin; i < int64_t(losses.size()) - skip_end; ++i) {
    if (!std::isfinite(losses[size_t(i)])) continue;
    l.push_back(losses[size_t(i)]);
    lr.push_back(lrs[size_t(i)]);
  }
  if (l.size() < 2) return std::nullopt;
  size_t best = 0;
  double steepest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < l.size(); ++i) {
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

/// A copy of what training changes, put back by restore().
template <class TrainerT>
class Snapshot {
 public:
  explicit Snapshot(TrainerT& t) : trainer_(t) {
    torch::NoGradGuard no_grad;
    for (const auto& g : t.flat_params().groups()) params_.push_back(g.data.clone());
    for (const auto& b : t.model().buffers()) buffers_.push_back(b.clone());
    if constexpr (HasStateDict<std::remove_reference_t<decltype(t.optimizer())>>)
      optim_ = cloned(t.optimizer().state_dict());
    if constexpr (HasStateDict<std::remove_reference_t<decltype(t.precision())>>)
      precision_ = cloned(t.precision().state_dict());
    lr_ = t.optimizer().lr();
    rng_ = trainkit::detail::RngPart{}.state_dict();  // dropout draws as if no sweep ran
  }
  void restore() {
    torch::NoGradGuard no_grad;
    auto groups = trainer_.flat_params().groups();
    for (size_t i = 0; i < params_.size(); ++i) groups[i].data.copy_(params_[i]);
    const auto buffers = trainer_.model().buffers();
    for (size_t i = 0; i < buffers_.size(); ++i) buffers[i].copy_(buffers_[i]);
    if constexpr (HasStateDict<std::remove_reference_t<decltype(trainer_.optimizer())>>)
      trainer_.optimizer().load_state_dict(optim_);
    if constexpr (HasStateDict<std::remove_reference_t<decltype(trainer_.precision())>>)
      trainer_.precision().load_state_dict(precision_);
    trainer_.optimizer().set_lr(lr_);
    trainkit::detail::RngPart{}.load_state_dict(rng_);
    trainer_.flat_params().zero_grad();
  }

 private:
  static StateDict cloned(StateDict d) {
    for (auto& [name, t] : d.tensors) t = t.detach().clone();
    return d;
  }
  TrainerT& trainer_;
  std::vector<at::Tensor> params_, buffers_;
  StateDict optim_, precision_, rng_;
  double lr_ = 0;
};

}  // namespace detail

/// Runs the range test on `trainer` over `data` (repeated as needed) and puts
/// the trainer back as it was. Use the suggestion (or read the curve) as
/// the learning rate, or OneCycle's max_lr, of the real run.
template <class TrainerT, class TaskT, class TrainData>
LrFindResult lr_find(TrainerT& trainer, TaskT&& task, TrainData&& data,
                     const LrFindOptions& options = {}) {
  detail::check(options);
  LrFindResult result;
  detail::Snapshot<TrainerT> snapshot(trainer);
  try {
    trainer.fit(std::forward<TaskT>(task), std::forward<TrainData>(data),
                {.epochs = std::numeric_limits<int32_t>::max(),
                 .log_every = 1,
                 .max_steps = options.num_steps},
                detail::LrSweep<TrainerT>{&trainer, options, &result});
  } catch (...) {
    snapshot.restore();
    throw;
  }
  snapshot.restore();
  result.suggestion = suggest_lr(result.lrs, result.losses, options.skip_begin, options.skip_end);
  return result;
}

}  // namespace trainkit::finders
