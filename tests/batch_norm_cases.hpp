#pragma once
// The fused batch norm's shared pieces for the CPU tests (nn_test.cpp) and
// the CUDA ones (cuda_test.cpp): one training step through the fused module
// and through the unfused ones (BatchNorm2d, the add, ReLU) from the same
// parameters, with everything a user would compare afterwards.
#include <torch/torch.h>
#include <trainkit/layers/batch_norm_act.hpp>

#include <cstdint>
#include <vector>

namespace tk_test {

/// The output, the gradients (input, weight, bias, residual) and the running
/// statistics after one forward and backward.
struct BnStep {
  at::Tensor y, dx, dw, db, dr, running_mean, running_var, batches;
  std::vector<at::Tensor> all() const { return {y, dx, dw, db, dr, running_mean, running_var}; }
};

/// A BatchNorm2d with non-trivial parameters and running statistics.
inline torch::nn::BatchNorm2d seeded_bn(int64_t channels, torch::Device device, uint64_t seed = 5) {
  torch::manual_seed(seed);
  torch::nn::BatchNorm2d bn(channels);
  torch::NoGradGuard no_grad;
  bn->weight.uniform_(0.5, 1.5);
  bn->bias.uniform_(-0.5, 0.5);
  bn->running_mean.uniform_(-1, 1);
  bn->running_var.uniform_(0.5, 2);
  bn->to(device);
  return bn;
}

/// `from`'s parameters and buffers copied into `to`'s of the same names.
inline void copy_state(const torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  const auto to_p = to.named_parameters(), to_b = to.named_buffers();
  for (const auto& p : from.named_parameters()) to_p[p.key()].copy_(p.value());
  for (const auto& b : from.named_buffers()) to_b[b.key()].copy_(b.value());
}

/// The fused module holding `bn`'s state (its state-dict names are BatchNorm2d's).
inline trainkit::layers::BatchNormReLU2d fused_copy(const torch::nn::BatchNorm2d& bn) {
  trainkit::layers::BatchNormReLU2d fused(bn->options);
  fused->to(bn->weight.device(), bn->weight.scalar_type());
  copy_state(*bn, *fused);
  return fused;
}

/// `forward` returns the outputs (one, or a fork's two); each gets its dy,
/// and one whose dy is undefined is not differentiated.
template <class Forward>
BnStep step(torch::nn::Module& m, const at::Tensor& x, const at::Tensor& residual,
            const std::vector<at::Tensor>& dys, Forward forward) {
  m.zero_grad();
  auto xg = x.detach().clone().requires_grad_(true);
  at::Tensor rg = residual.defined() ? residual.detach().clone().requires_grad_(true) : residual;
  const std::vector<at::Tensor> outputs = forward(xg, rg);
  std::vector<at::Tensor> used, grads;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (dys[i].defined()) used.push_back(outputs[i]), grads.push_back(dys[i]);
  torch::autograd::backward(used, grads);
  const auto params = m.named_parameters(), buffers = m.named_buffers();
  return {outputs[0].detach(),
          xg.grad(),
          params["weight"].grad().clone(),
          params["bias"].grad().clone(),
          rg.defined() ? rg.grad() : at::Tensor(),
          buffers["running_mean"].clone(),
          buffers["running_var"].clone(),
          buffers["num_batches_tracked"].clone()};
}

/// relu(bn(x) [+ residual]) through the unfused modules.
inline BnStep unfused_step(torch::nn::BatchNorm2d bn, const at::Tensor& x,
                           const at::Tensor& residual, const at::Tensor& dy) {
  return step(*bn, x, residual, {dy}, [&](const at::Tensor& xg, const at::Tensor& rg) {
    auto y = bn(xg);
    return std::vector{torch::relu(rg.defined() ? y + rg : y)};
  });
}

inline BnStep fused_step(trainkit::layers::BatchNormReLU2d m, const at::Tensor& x,
                         const at::Tensor& residual, const at::Tensor& dy) {
  return step(*m, x, residual, {dy},
              [&](const at::Tensor& xg, const at::Tensor& rg) { return std::vector{m(xg, rg)}; });
}

/// The fused module's output forked in two uses, with gradients dy and dy2
/// (either may be undefined: that use is not differentiated). The unfused
/// modules' equal: unfused_step with dy + dy2.
inline BnStep fused_fork_step(trainkit::layers::BatchNormReLU2d m, const at::Tensor& x,
                              const at::Tensor& residual, const at::Tensor& dy,
                              const at::Tensor& dy2) {
  return step(*m, x, residual, {dy, dy2}, [&](const at::Tensor& xg, const at::Tensor& rg) {
    const auto [first, second] = m->forward_fork(xg, rg);
    return std::vector{first, second};
  });
}

}  // namespace tk_test
