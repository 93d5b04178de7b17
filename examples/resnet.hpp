#pragma once
// ResNet-10 for CIFAR-10-shaped images: a 3x3 stem and one basic block per
// stage (64-128-256-512), as the documents' headline case trains it. With
// Fused = true each batch norm that a ReLU follows is trainkit's fused
// BatchNormReLU2d, the residual add inside it, and each block's input is a
// fork of the batch norm that made it (forward_fork): the input's two
// gradients (its convolution's, its shortcut's) are added in that batch
// norm's backward, not by autograd in a kernel of their own. The parameters
// and their state-dict names are the same either way, so weights load across.
#include <torch/torch.h>
#include <trainkit/layers/batch_norm_act.hpp>

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

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
    if constexpr (Fused) {
      return forward_forked(x, x, /*fork=*/false).first;
    } else {
      const auto shortcut = down ? down->forward(x) : x;
      return torch::relu(bn2(conv2(torch::relu(bn1(conv1(x))))) + shortcut);
    }
  }
  /// Fused: the input as two handles (x for conv1, x_shortcut for the
  /// shortcut: a fork of the layer before), and the output forked in turn
  /// when the next block consumes it (second: undefined otherwise).
  std::pair<at::Tensor, at::Tensor> forward_forked(const at::Tensor& x,
                                                   const at::Tensor& x_shortcut, bool fork) {
    static_assert(Fused, "a fork needs the fused batch norm");
    const auto main = conv2(bn1(conv1(x)));
    const auto shortcut = down ? down->forward(x_shortcut) : x_shortcut;
    if (fork) return bn2->forward_fork(main, shortcut);  // relu(bn2(.) + shortcut) in one pass
    return {bn2(main, shortcut), at::Tensor()};
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
    at::Tensor y;
    if constexpr (Fused) {
      auto [main, shortcut] = bn->forward_fork(stem(x));
      const auto children = blocks->children();
      for (size_t i = 0; i < children.size(); ++i) {
        const bool fork = i + 1 < children.size();  // the last block feeds the pooling only
        std::tie(main, shortcut) =
            children[i]->as<BasicBlockImpl<true>>()->forward_forked(main, shortcut, fork);
      }
      y = main;
    } else {
      y = blocks->forward(torch::relu(bn(stem(x))));
    }
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
