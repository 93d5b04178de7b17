#pragma once
// What the ranks of one run must agree on, over the Parallel policy's
// collectives: stops, skipped steps, signals, the epoch's mean loss, the
// validation metrics and the moment a checkpoint is written. With one rank
// (parallel::Single) every collective is the identity and this is the
// single-process algorithm; the Trainer calls it the same way for both.
// Evaluation's per-rank sums, which mean_metrics averages, are made here too.
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"
#include "trainkit/state.hpp"
#include "trainkit/task.hpp"
#include "trainkit/trainer/detail/loss_meter.hpp"

namespace trainkit::detail {

/// The loss and metrics of an evaluation's steps, summed over samples (in
/// double, on the device), and the number of samples.
struct EvaluationSums {
  std::map<std::string, at::Tensor> sums;
  int64_t count = 0;

  TRAINKIT_INLINE void add(const StepOutput& result);
};

template <class Parallel>
class Coordinator {
 public:
  explicit Coordinator(Parallel& parallel) : parallel_(parallel) {}

  /// A stop requested on any rank stops all of them, at the same step.
  void agree_on_stop(TrainState& state) {
    const auto by = parallel_.max(state.stop_requested() ? rank() + 1 : 0, names().stop);
    if (by > 0 && !state.stop_requested())
      state.request_stop("stop requested by rank " + std::to_string(by - 1));
  }

  /// A step skipped on any rank (from on_before_step) is skipped on all.
  void agree_on_skip(TrainState& state) {
    const auto by = parallel_.max(state.step_skipped() ? rank() + 1 : 0, names().skip);
    if (by > 0 && !state.step_skipped())
      state.skip_step("step skipped by rank " + std::to_string(by - 1));
  }

  /// The largest signal number caught on any rank (0: none).
  int agree_on_signal(int caught) { return int(parallel_.max(caught, names().signals)); }

  /// The sum and count over all ranks of the losses `meter` holds.
  LossTotals loss_totals(const LossMeter& meter) {
    const auto total =
        parallel_.sum({meter.sum(), double(meter.count())}, "sum of the epoch's training loss");
    return {total[0], int64_t(total[1])};
  }

  /// The mean over all ranks of the losses `meter` holds; none when empty.
  std::optional<double> mean_loss(const LossMeter& meter) {
    const auto total = loss_totals(meter);
    if (total.count == 0) return std::nullopt;
    return total.sum / double(total.count);
  }

  /// Per-name means over all ranks of sample-weighted sums (device tensors)
  /// of `count` samples. Every rank must report the same names: checked
  /// before the sums, whose positions are matched by name.
  std::map<std::string, double> mean_metrics(const std::map<std::string, at::Tensor>& sums,
                                             int64_t count) {
    std::string names;
    for (const auto& [name, sum] : sums) names += (names.empty() ? "" : ", ") + name;
    parallel_.check_same("validation metric names (here: " + names + ")", names);
    std::vector<double> totals;  // the sums, then the count
    for (const auto& [name, sum] : sums) totals.push_back(sum.template item<double>());
    totals.push_back(double(count));
    totals = parallel_.sum(totals, "sum of validation metrics");
    const double samples = totals.back();
    std::map<std::string, double> means;
    size_t i = 0;
    for (const auto& [name, sum] : sums) means[name] = samples > 0 ? totals[i++] / samples : 0.0;
    return means;
  }

  /// Every rank calls this at the same point: `gather` runs on all (it may
  /// be a collective), `write` on the main process once all are there; then
  /// all wait for it, unless `write` hands the work to another thread.
  template <class Gather, class Write>
  void write_once(const std::string& what, Gather&& gather, Write&& write,
                  bool wait_for_write = true) {
    parallel_.barrier(what);
    auto gathered = gather();
    if (parallel_.is_main()) write(gathered);
    if (wait_for_write) parallel_.barrier(what + " written");
  }

 private:
  /// The per-step collectives' names (for errors), made once: a string
  /// built in the step would allocate in the hot path.
  struct Names {
    std::string stop = "agree on stop", skip = "agree on skip", signals = "agree on signals";
  };
  static const Names& names() {
    static const Names n;
    return n;
  }
  int rank() const { return parallel_.rank(); }
  Parallel& parallel_;
};

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE void EvaluationSums::add(const StepOutput& result) {
  const double weight = static_cast<double>(result.batch_size);
  const auto add_to = [weight](at::Tensor& sum, const at::Tensor& value) {
    const auto term = value.detach().to(at::kDouble) * weight;
    sum = sum.defined() ? sum + term : term;
  };
  add_to(sums["loss"], result.loss);
  for (const auto& [name, value] : result.metrics) add_to(sums[name], value);
  count += result.batch_size;
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
