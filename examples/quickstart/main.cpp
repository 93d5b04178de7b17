// trainkit's quick start: an MLP learns to tell two interleaved spirals apart.
#include <torch/torch.h>
#include <trainkit/trainkit.hpp>

#include <cmath>
#include <iostream>

using namespace trainkit;

// n points on two spirals, class 0 and class 1, with a little noise.
data::TensorDataset spirals(int64_t n, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto label = at::randint(0, 2, {n}, gen);
  const auto t = at::rand({n}, gen) * 3 * M_PI + 0.5;
  const auto angle = t + label.to(at::kFloat) * M_PI;
  auto xy = at::stack({t * at::cos(angle), t * at::sin(angle)}, 1) / (3 * M_PI);
  return {xy + 0.02 * at::randn({n, 2}, gen), label};
}

struct NetImpl : torch::nn::Module {
  torch::nn::Sequential layers{torch::nn::Linear(2, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 2)};
  NetImpl() { register_module("layers", layers); }
  at::Tensor forward(at::Tensor x) { return layers->forward(x); }
};
TORCH_MODULE(Net);

int main() {
  torch::manual_seed(0);
  data::TensorBatches train(spirals(4096, 1), {.batch_size = 64, .seed = 1});
  data::TensorBatches val(spirals(1024, 2), {.batch_size = 256, .shuffle = false});

  // AdamW with a one-cycle schedule, gradients clipped at norm 1.
  Trainer<optim::AdamW, sched::OneCycle, precision::Fp32, accumulate::None, clip::Norm> trainer(
      Net(),
      {.optim = {.weight_decay = 1e-4}, .sched = {.max_lr = 1e-2}, .clip = {.max_norm = 1.0}});
  const auto result = trainer.fit(task::Classification{}, train, {.epochs = 20, .val_data = val},
                                  callbacks::ProgressBar{});
  std::cout << "val_accuracy " << result.metrics.at("val_accuracy") << " after " << result.epochs
            << " epochs\n";
  return result.metrics.at("val_accuracy") > 0.95 ? 0 : 1;
}
