#pragma once
// Small models shared by the examples.
#include <torch/torch.h>

/// Two conv blocks and a small head: ~0.1M parameters, fast on a CPU.
struct SmallCnnImpl : torch::nn::Module {
  SmallCnnImpl() {
    conv1 =
        register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
    conv2 =
        register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 7 * 7, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(SmallCnn);

/// Multinomial logistic regression on the pixels: the baseline the CNN must beat.
struct LinearModelImpl : torch::nn::Module {
  LinearModelImpl() { fc = register_module("fc", torch::nn::Linear(28 * 28, 10)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x.flatten(1)); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(LinearModel);

/// A multi-layer perceptron on flattened images.
struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t hidden, int64_t out) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, out));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);
