// Mixed precision recipe: AdamW + OneCycle, bf16 autocast, 4 micro-batches
// per step (effective batch 64 from batches of 16) and gradient-norm clipping.
#include <torch/torch.h>
#include <trainkit/data.hpp>
#include <trainkit/trainkit.hpp>

#include <cstdio>

#include "glyphs.hpp"
#include "models.hpp"

using namespace trainkit;

int main() {
  const auto train = examples::make_glyphs(3000, 1), val = examples::make_glyphs(1000, 2);
  data::Loader train_batches(
      train, data::RandomSampler({.size = train.size(), .seed = 1}),
      {.batch_size = 16, .workers = 2, .device_transform = data::transforms::RandomCrop{28, 2}});
  data::Loader val_batches(val, data::SequentialSampler(val.size()), {.batch_size = 500});
  torch::manual_seed(0);
  Trainer<optim::AdamW, sched::OneCycle, precision::Bf16, accumulate::Every<4>, clip::Norm> trainer(
      SmallCnn(), {.optim = {.lr = 3e-3, .weight_decay = 0.01},
                   .sched = {.max_lr = 3e-3, .pct_start = 0.25},
                   .clip = {.max_norm = 1.0}});
  const auto r = trainer.fit(task::Classification{}, train_batches,
                             {.epochs = 2, .val_data = val_batches}, callbacks::ProgressBar{});
  const bool ok = r.metrics.at("val_accuracy") > 0.5;
  std::printf("adamw_onecycle_bf16: val_accuracy %.4f after %lld steps (%s)\n",
              r.metrics.at("val_accuracy"), (long long)r.steps, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
