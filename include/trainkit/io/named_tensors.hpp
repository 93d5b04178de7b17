#pragma once
// Tensors by name, in order: what safetensors files and checkpoints hold.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <string>
#include <utility>
#include <vector>

#include "trainkit/detail/linkage.hpp"

namespace trainkit::io {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// A module's parameters and buffers by their dotted names ("fc1.weight").
TRAINKIT_INLINE NamedTensors module_tensors(torch::nn::Module& module);

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE NamedTensors module_tensors(torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::io
