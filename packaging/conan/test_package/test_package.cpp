// The package's headers compile and LibTorch links: one optimizer step.
#include <torch/torch.h>
#include <trainkit/optim/sgd.hpp>
#include <trainkit/params.hpp>

#include <cstdio>

int main() {
  torch::nn::Linear layer(2, 1);
  trainkit::FlatParams params(*layer);
  trainkit::optim::SGD sgd(params, {.lr = 0.1});
  layer(torch::ones({1, 2})).sum().backward();
  sgd.step();
  std::printf("trainkit test_package: one SGD step on %lld parameters\n",
              (long long)params.numel());
  return 0;
}
