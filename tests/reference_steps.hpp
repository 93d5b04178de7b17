#pragma once
// An optimizer reference's problem as the tests replay it: its tensors as
// a module's parameters, and its steps with every group's rate decayed as
// the reference script does (make_muon_reference.py, make_trust_reference.py,
// make_schedule_free_reference.py).
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "support.hpp"

namespace tk_test {

/// The reference's tensors (its "init" split by "shapes") as parameters p0, p1, ...
struct ReferenceTensorsImpl : torch::nn::Module {
  explicit ReferenceTensorsImpl(const nlohmann::json& ref) {
    for (const auto& t : reference_tensors(ref))
      params.push_back(register_parameter("p" + std::to_string(params.size()), t));
  }
  std::vector<at::Tensor> params;
};
TORCH_MODULE(ReferenceTensors);

/// The tensors of `model`, flattened in index order.
inline at::Tensor flat_tensors(ReferenceTensors& model) {
  std::vector<at::Tensor> flat;
  for (const auto& t : model->params) flat.push_back(t.detach().reshape(-1));
  return at::cat(flat).clone();
}

/// The reference's steps of `opt` (built on `model`'s two parameter
/// groups), each group's rate decayed by "lr_decay" per step; the tensors
/// after each of its "checkpoints", where `at_checkpoint()` runs too.
template <class Opt, class AtCheckpoint = void (*)()>
std::vector<at::Tensor> reference_trajectory(
    const nlohmann::json& ref, Opt& opt, ReferenceTensors& model,
    AtCheckpoint at_checkpoint = [] {}) {
  const double base[] = {opt.lr(0), opt.lr(1)};
  const auto checkpoints = ref["checkpoints"].get<std::vector<int64_t>>();
  std::vector<at::Tensor> out;
  const auto grads = ref["grads"];
  for (int64_t step = 0; step < int64_t(grads.size()); ++step) {
    for (size_t g = 0; g < 2; ++g)
      opt.set_lr(g, base[g] * std::pow(ref["lr_decay"].get<double>(), double(step)));
    const auto all = to_tensor(grads[step].get<std::vector<double>>()).to(at::kFloat);
    int64_t offset = 0;
    for (const auto& t : model->params) {
      torch::NoGradGuard no_grad;
      t.mutable_grad().copy_(all.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
    opt.step();
    if (std::find(checkpoints.begin(), checkpoints.end(), step + 1) != checkpoints.end()) {
      out.push_back(flat_tensors(model));
      at_checkpoint();
    }
  }
  return out;
}

}  // namespace tk_test
