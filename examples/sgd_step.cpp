// Classic recipe: fp32, SGD with Nesterov momentum, a step schedule, no
// accumulation or clipping. An MLP on the glyphs.
#include <torch/torch.h>
#include <trainkit/data.hpp>
#include <trainkit/trainkit.hpp>

#include <cstdio>

#include "glyphs.hpp"
#include "models.hpp"

using namespace trainkit;

int main() {
  const auto train = examples::make_glyphs(4000, 1), val = examples::make_glyphs(1000, 2);
  data::Loader train_batches(train, data::RandomSampler({.size = train.size(), .seed = 1}),
                             {.batch_size = 32, .workers = 1});
  data::Loader val_batches(val, data::SequentialSampler(val.size()), {.batch_size = 500});
  torch::manual_seed(0);
  Trainer<optim::SGD, sched::Step, precision::Fp32, accumulate::None, clip::None> trainer(
      Mlp(28 * 28, 128, 10),
      {.optim = {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true},
       .sched = {.step_size = 125, .gamma = 0.5}});
  const auto r = trainer.fit(task::Classification{}, train_batches,
                             {.epochs = 3, .val_data = val_batches}, callbacks::ProgressBar{});
  const bool ok = r.metrics.at("val_accuracy") > 0.5;
  std::printf("sgd_step: val_accuracy %.4f, final lr %.4g (%s)\n", r.metrics.at("val_accuracy"),
              trainer.optimizer().lr(), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
