#pragma once
// parallel::wrap: which modules of a model are units of full sharding
// (parallel::FullShard), FSDP's auto-wrap policies. A rule sees each
// module below the model, by its dotted name, from the top down; a module
// it selects is a unit with everything under it.
#include <torch/nn/module.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/param_groups.hpp"

namespace trainkit::parallel::wrap {

/// Whether the module at `name` (dotted, from the model: "h.0") is a unit.
using Rule = std::function<bool(const std::string& name, const torch::nn::Module& module)>;

/// The model's own children: each top-level module is a unit.
inline Rule children() {
  return [](const std::string& name, const torch::nn::Module&) {
    return name.find('.') == std::string::npos;
  };
}

/// No module: the whole model is the root unit, gathered through each
/// forward and its backward and sharded between steps (with its gradients
/// and optimizer state). For a model that cannot announce units through
/// parallel::unit: a TorchScript one (trainkit::ScriptModule).
inline Rule none() {
  return [](const std::string&, const torch::nn::Module&) { return false; };
}

/// The modules of these names ("h.0", "h.1", ...).
inline Rule names(std::vector<std::string> names) {
  return [names = std::move(names)](const std::string& name, const torch::nn::Module&) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
}

/// Every module of class M (or of the class a holder M holds): a
/// transformer's blocks, wherever they sit.
template <class M>
Rule of_type() {
  using Impl = typename trainkit::detail::module_class<M>::type;
  return [](const std::string&, const torch::nn::Module& m) {
    return dynamic_cast<const Impl*>(&m) != nullptr;
  };
}

}  // namespace trainkit::parallel::wrap
