#pragma once
// Helpers shared by the tests: reference data and tolerant comparisons.
#include <doctest/doctest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "scratch.hpp"
#include "trainkit/error.hpp"

namespace tk_test {

/// The message of the trainkit::Error that `f` throws, or "(no error)".
/// A python3 that imports torch ("python3", else "/usr/bin/python3"); empty if none.
inline std::string python_with_torch() {
  for (const auto* candidate : {"python3", "/usr/bin/python3"}) {
    if (std::system((std::string(candidate) + " -c 'import torch' 2>/dev/null").c_str()) == 0)
      return candidate;
  }
  return "";
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const trainkit::Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline nlohmann::json load_reference(const std::string& name) {
  std::ifstream in(std::string(TRAINKIT_REFERENCE_DIR) + "/" + name);
  REQUIRE_MESSAGE(in.good(), "missing reference file " << name);
  return nlohmann::json::parse(in);
}

inline at::Tensor to_tensor(const std::vector<double>& values) {
  return at::tensor(values, at::kDouble);
}

/// An optimizer reference's initial tensors (its "init" split by "shapes"), float32.
inline std::vector<at::Tensor> reference_tensors(const nlohmann::json& ref) {
  const auto all = to_tensor(ref["init"].get<std::vector<double>>()).to(at::kFloat);
  std::vector<at::Tensor> out;
  int64_t offset = 0;
  for (const auto& shape : ref["shapes"]) {
    const auto sizes = shape.get<std::vector<int64_t>>();
    const auto n = c10::multiply_integers(sizes);
    out.push_back(all.narrow(0, offset, n).view(sizes).clone());
    offset += n;
  }
  return out;
}

/// Relative error of a tensor: max |a - b| / max |b| (the error measured
/// against the tensor's own scale, so entries near zero do not dominate).
inline double max_rel_error(const at::Tensor& a, const at::Tensor& b) {
  // on the CPU: `a` and `b` may live on different devices
  const auto a64 = a.to(at::kCPU, at::kDouble).reshape({-1}),
             b64 = b.to(at::kCPU, at::kDouble).reshape({-1});
  return ((a64 - b64).abs().max() / b64.abs().max().clamp_min(1e-30)).item<double>();
}

/// A small MLP for trainer tests.
struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t in = 8, int64_t hidden = 16, int64_t out = 3) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, out));
  }
  at::Tensor forward(at::Tensor x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);

/// A seeded MLP whose initial weights are the same in every call.
inline Mlp seeded_mlp(uint64_t seed = 7, int64_t in = 8, int64_t hidden = 16, int64_t out = 3) {
  torch::manual_seed(seed);
  return Mlp(in, hidden, out);
}

inline std::vector<at::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

/// An MLP with dropout on 4x4 inputs: its results depend on the RNG state.
struct DropNetImpl : torch::nn::Module {
  DropNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 32));
    drop = register_module("drop", torch::nn::Dropout(0.3));
    fc2 = register_module("fc2", torch::nn::Linear(32, 4));
  }
  at::Tensor forward(at::Tensor x) { return fc2(drop(torch::relu(fc1(x.flatten(1))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(DropNet);

inline double max_param_rel_error(torch::nn::Module& a, torch::nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  double worst = 0.0;
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, max_rel_error(pa[i], pb[i]));
  return worst;
}

}  // namespace tk_test
