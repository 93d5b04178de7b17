#pragma once
// Activation checkpointing's shared pieces for the CPU tests (memory_test.cpp)
// and the CUDA one (cuda_test.cpp): an MLP with dropout, its gradients, and
// a backward from a fixed seed followed by a draw on the device, which shows
// that the recomputation left the random generator as if nothing ran again.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace tk_test {

/// `blocks` of Linear(width, width), ReLU and (when `dropout` > 0) Dropout.
inline torch::nn::Sequential dropout_mlp(int64_t width, int64_t blocks, double dropout) {
  torch::nn::Sequential s;
  for (int64_t i = 0; i < blocks; ++i) {
    s->push_back(torch::nn::Linear(width, width));
    s->push_back(torch::nn::ReLU());
    if (dropout > 0) s->push_back(torch::nn::Dropout(dropout));
  }
  return s;
}

inline std::vector<at::Tensor> grads_of(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.grad().clone());
  return out;
}

/// Runs `forward` from seed 7, backward of the output's squares; the
/// gradients, and a draw on `device` after it.
inline std::pair<std::vector<at::Tensor>, at::Tensor> grads_from_seed(
    torch::nn::Module& m, const std::function<at::Tensor()>& forward,
    torch::Device device = torch::kCPU) {
  m.zero_grad();
  torch::manual_seed(7);
  forward().pow(2).sum().backward();
  return {grads_of(m), torch::rand({4}, device)};
}

}  // namespace tk_test
