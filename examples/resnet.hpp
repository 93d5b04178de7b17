#pragma once
// ResNet-10 for CIFAR-10-shaped images: a 3x3 stem and one basic block per
// stage (64-128-256-512), as the documents' headline case trains it. With
// Fused = true each batch norm that a ReLU follows is trainkit's fused
// BatchNormReLU2d, the residual add inside it; the parameters and their
// state-dict names are the same either way, so weights load across.
#include <torch/torch.h>
#include <trainkit/layers/batch_norm_act.hpp>

#include <cstdint>
#include <type_traits>

namespace examples {

template <bool Fused>
struct BasicBlockImpl : torch::nn::Module {
  using Norm = std::conditional_t<Fused, trainkit::layers::BatchNormReLU2d, torch::nn::BatchNorm2d>;
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    namespace nn = torch::nn;
    conv1 = register_module(
        "conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    bn1 = register_module("bn1", Norm(out));
    conv2 =
        register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", Norm(out));
    if (stride != 1 || in != out) {
      down = register_module(
          "down",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out)));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    const auto shortcut = down ? down->forward(x) : x;
    if constexpr (Fused) {
      return bn2(conv2(bn1(conv1(x))), shortcut);  // relu(bn2(.) + shortcut) in one pass
    } else {
      return torch::relu(bn2(conv2(torch::relu(bn1(conv1(x))))) + shortcut);
    }
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  Norm bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential down{nullptr};
};
template <bool Fused>
using BasicBlock = torch::nn::ModuleHolder<BasicBlockImpl<Fused>>;

template <bool Fused>
struct ResNet10Impl : torch::nn::Module {
  using Norm = typename BasicBlockImpl<Fused>::Norm;
  explicit ResNet10Impl(int64_t classes = 10) {
    namespace nn = torch::nn;
    stem = register_module("stem", nn::Conv2d(nn::Conv2dOptions(3, 64, 3).padding(1).bias(false)));
    bn = register_module("bn", Norm(64));
    blocks = register_module(
        "blocks", nn::Sequential(BasicBlock<Fused>(64, 64, 1), BasicBlock<Fused>(64, 128, 2),
                                 BasicBlock<Fused>(128, 256, 2), BasicBlock<Fused>(256, 512, 2)));
    fc = register_module("fc", nn::Linear(512, classes));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = bn(stem(x));
    if constexpr (!Fused) y = torch::relu(y);
    y = blocks->forward(y);
    return fc(torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1));
  }
  torch::nn::Conv2d stem{nullptr};
  Norm bn{nullptr};
  torch::nn::Sequential blocks{nullptr};
  torch::nn::Linear fc{nullptr};
};
template <bool Fused>
using ResNet10 = torch::nn::ModuleHolder<ResNet10Impl<Fused>>;

}  // namespace examples
