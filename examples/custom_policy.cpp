// Extending trainkit: a user-written schedule (inverse square root with
// warmup, as in "Attention is all you need") and a user-written callback
// that keeps the best validation accuracy, over class-balanced sampling.
// Neither derives from anything: they only have the members their concepts
// ask for.
#include <torch/torch.h>
#include <trainkit/data.hpp>
#include <trainkit/trainkit.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "glyphs.hpp"
#include "models.hpp"

using namespace trainkit;

struct InverseSqrt {
  struct Options {
    int64_t warmup_steps = 50;
  };
  explicit InverseSqrt(const Options& o) : warmup_(o.warmup_steps) {}
  void start(const sched::ScheduleContext& ctx) { base_ = ctx.base_lr; }
  double lr_at(int64_t step) const {
    const double s = double(step + 1), w = double(warmup_);
    return base_ * std::min(s / w, std::sqrt(w / s));
  }
  int64_t warmup_;
  double base_ = 0.0;
};

struct BestAccuracy {
  double* best;
  void on_validation_end(TrainState& state) {
    *best = std::max(*best, state.metrics.at("val_accuracy"));
  }
};

int main() {
  static_assert(SchedulerPolicy<InverseSqrt> && TrainerCallback<BestAccuracy>);
  const auto train = examples::make_glyphs(3000, 1), val = examples::make_glyphs(1000, 2);
  // Class-balanced sampling: each sample weighted by 1 / (its class's count).
  const auto counts = at::bincount(train.targets, {}, 10).to(at::kDouble);
  data::Loader train_batches(
      train, data::WeightedSampler({.weights = counts.reciprocal().index_select(0, train.targets)}),
      {.batch_size = 32});
  data::Loader val_batches(val, data::SequentialSampler(val.size()), {.batch_size = 500});
  torch::manual_seed(0);
  Trainer<optim::Adam, InverseSqrt, precision::Fp32, accumulate::Steps, clip::Value> trainer(
      Mlp(28 * 28, 64, 10), {.optim = {.lr = 2e-3},
                             .sched = {.warmup_steps = 40},
                             .accumulate = {.steps = 2},
                             .clip = {.clip_value = 0.5}});
  double best = 0.0;
  trainer.fit(task::Classification{}, train_batches, {.epochs = 3, .val_data = val_batches},
              BestAccuracy{&best}, callbacks::ProgressBar{});
  const bool ok = best > 0.5;
  std::printf("custom_policy: best val_accuracy %.4f (%s)\n", best, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
