// Regression with loss scaling: Fp16's GradScaler (autocast on CUDA only,
// plain loss scaling on a CPU), runtime accumulation, value clipping and a
// warmup-cosine schedule, fitting y = sin(3x) + noise.
#include <torch/torch.h>
#include <trainkit/data.hpp>
#include <trainkit/trainkit.hpp>

#include <cstdio>

#include "models.hpp"

using namespace trainkit;

int main() {
  torch::manual_seed(0);
  auto x = torch::rand({2048, 1}) * 4 - 2;
  auto y = torch::sin(3 * x) + 0.05 * torch::randn({2048, 1});
  data::Loader train(data::TensorDataset{x, y}, data::RandomSampler({.size = 2048, .seed = 3}),
                     {.batch_size = 64});
  const bool cuda = torch::cuda::is_available();
  Trainer<optim::AdamW, sched::WarmupCosine, precision::Fp16, accumulate::Steps, clip::Norm>
      trainer(Mlp(1, 128, 1), {.optim = {.lr = 2e-2, .weight_decay = 0.0},
                               .sched = {.warmup_steps = 20},
                               .precision = {.autocast = cuda},
                               .accumulate = {.steps = 2},
                               .clip = {.max_norm = 5.0}});
  const auto r = trainer.fit(task::Regression{}, train, {.epochs = 40, .val_data = train});
  const bool ok = r.metrics.at("val_loss") < 0.05;
  std::printf("regression_scaled: val_loss %.5f, loss scale %.0f (%s)\n", r.metrics.at("val_loss"),
              trainer.precision().scaler().scale_value(), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
