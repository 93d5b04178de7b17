#pragma once
// A checkpoint as a list of named parts, each an object with state_dict()
// and load_state_dict(): the trainer's counters, the model, the optimizer,
// the precision policy, the random generators and each callback. The trainer
// lists its parts once per fit; saving walks the list, and loading checks
// that every part is there, then loads them all or, when one fails, puts
// every part back as it was.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/concepts.hpp"
#include "trainkit/detail/compat.hpp"
#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/io/named_tensors.hpp"
#include "trainkit/state_dict.hpp"
#if TRAINKIT_HAS_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <torch/cuda.h>
#endif

namespace trainkit::detail {

class CheckpointParts {
 public:
  /// Lists a part made of its two functions.
  void add(std::string name, std::function<StateDict()> save,
           std::function<void(const StateDict&)> load);
  /// Lists `part` under `name` when it has state (HasStateDict), held by
  /// reference: it must outlive the list.
  template <class Part>
  void add(std::string name, Part& part) {
    if constexpr (HasStateDict<Part>) {
      add(
          std::move(name), [&part] { return part.state_dict(); },
          [&part](const StateDict& d) { part.load_state_dict(d); });
    }
  }
  /// Lists `module`'s parameters and buffers (a ModulePart); `module` must
  /// outlive the list.
  void add_module(std::string name, torch::nn::Module& module);
  /// Lists the random generators (an RngPart).
  void add_rng(std::string name);

  /// Every part's state; `clone` copies the tensors (a backup that later
  /// steps do not change).
  io::Checkpoint save(bool clone) const;

  /// Loads every part from `ckpt`, or none: a missing part is an error
  /// before anything changes, and a part that fails to load puts all back.
  void load(const io::Checkpoint& ckpt) const;

 private:
  struct Part {
    std::string name;
    std::function<StateDict()> save;
    std::function<void(const StateDict&)> load;
  };
  std::vector<Part> parts_;
};

/// A module's parameters and buffers by name; loading checks every tensor
/// (names, count, shapes, dtypes) before it changes any.
class ModulePart {
 public:
  explicit ModulePart(torch::nn::Module& module) : module_(&module) {}
  StateDict state_dict() const;
  void load_state_dict(const StateDict& d);

 private:
  torch::nn::Module* module_;
};

/// The default CPU generator's state ("cpu") and each visible CUDA device's
/// ("cuda.<index>"): dropout and random transforms continue where they were.
struct RngPart {
  StateDict state_dict() const;
  /// Devices the checkpoint has but this machine lacks are left out.
  void load_state_dict(const StateDict& d);
};

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE void CheckpointParts::add(std::string name, std::function<StateDict()> save,
                                          std::function<void(const StateDict&)> load) {
  parts_.push_back({std::move(name), std::move(save), std::move(load)});
}

TRAINKIT_INLINE void CheckpointParts::add_module(std::string name, torch::nn::Module& module) {
  auto part = std::make_shared<ModulePart>(module);
  add(
      std::move(name), [part] { return part->state_dict(); },
      [part](const StateDict& d) { part->load_state_dict(d); });
}

TRAINKIT_INLINE void CheckpointParts::add_rng(std::string name) {
  add(
      std::move(name), [] { return RngPart{}.state_dict(); },
      [](const StateDict& d) { RngPart{}.load_state_dict(d); });
}

TRAINKIT_INLINE io::Checkpoint CheckpointParts::save(bool clone) const {
  io::Checkpoint ckpt;
  for (const auto& part : parts_) {
    auto d = part.save();
    if (clone) {
      for (auto& [key, t] : d.tensors) t = t.detach().clone();
    }
    ckpt.parts[part.name] = std::move(d);
  }
  return ckpt;
}

TRAINKIT_INLINE void CheckpointParts::load(const io::Checkpoint& ckpt) const {
  for (const auto& part : parts_) {
    if (!ckpt.parts.count(part.name))
      throw Error("trainkit: the checkpoint has no \"" + part.name + "\" state");
  }
  const auto backup = save(/*clone=*/true);
  try {
    for (const auto& part : parts_) part.load(ckpt.parts.at(part.name));
  } catch (...) {
    for (const auto& part : parts_) part.load(backup.parts.at(part.name));
    throw;
  }
}

TRAINKIT_INLINE StateDict ModulePart::state_dict() const {
  StateDict d;
  for (const auto& [name, t] : io::module_tensors(*module_)) d.tensors[name] = t.detach();
  return d;
}

TRAINKIT_INLINE void ModulePart::load_state_dict(const StateDict& d) {
  const auto targets = io::module_tensors(*module_);
  std::vector<at::Tensor> sources;
  for (const auto& [name, t] : targets) sources.push_back(d.tensor_like(name, t.cpu()));
  if (d.tensors.size() != targets.size()) {
    throw Error("trainkit: the checkpoint's model has " + std::to_string(d.tensors.size()) +
                " tensors, this model " + std::to_string(targets.size()));
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < targets.size(); ++i) targets[i].second.copy_(sources[i]);
}

TRAINKIT_INLINE StateDict RngPart::state_dict() const {
  StateDict d;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    d.tensors["cpu"] = gen.get_state();
  }
#if TRAINKIT_HAS_CUDA
  for (int64_t i = 0; torch::cuda::is_available() && i < int64_t(torch::cuda::device_count());
       ++i) {
    auto gen = at::cuda::detail::getDefaultCUDAGenerator(c10::DeviceIndex(i));
    std::lock_guard<std::mutex> lock(gen.mutex());
    d.tensors["cuda." + std::to_string(i)] = gen.get_state();
  }
#endif
  return d;
}

TRAINKIT_INLINE void RngPart::load_state_dict(const StateDict& d) {
  const auto cpu = d.tensors.find("cpu");
  if (cpu == d.tensors.end()) throw Error("trainkit: the checkpoint's rng state has no \"cpu\"");
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(cpu->second);
  }
#if TRAINKIT_HAS_CUDA
  for (const auto& [name, t] : d.tensors) {
    if (name.rfind("cuda.", 0) != 0) continue;
    const auto index = c10::DeviceIndex(std::stoi(name.substr(5)));
    if (index >= c10::DeviceIndex(torch::cuda::device_count())) continue;
    auto gen = at::cuda::detail::getDefaultCUDAGenerator(index);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(t);
  }
#endif
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
