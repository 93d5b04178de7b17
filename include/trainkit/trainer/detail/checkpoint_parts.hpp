#pragma once
// A checkpoint as a list of named parts, each an object with state_dict()
// and load_state_dict(): the trainer's counters, the model, the optimizer,
// the precision policy, the random generators and each callback. The trainer
// lists its parts once per fit; saving walks the list, and loading checks
// that every part is there, then loads them all or, when one fails, puts
// every part back as it was. The trainer's own part (its counters and the
// signature of the policies that wrote it) is defined here too.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/concepts.hpp"
#include "trainkit/detail/compat.hpp"
#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/io/named_tensors.hpp"
#include "trainkit/state.hpp"
#include "trainkit/state_dict.hpp"
#include "trainkit/trainer/detail/loss_meter.hpp"
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

// The trainer's own part: where the run is, and which policies wrote it.

/// "Trainer<name, name, ...>": which policies wrote a checkpoint.
TRAINKIT_INLINE std::string trainer_signature(std::span<const std::string> names);
/// Where in its epoch a run is, over all its ranks.
struct EpochPosition {
  int64_t samples = 0;     ///< the epoch's samples taken so far, summed over the ranks
  int64_t world_size = 1;  ///< the ranks that took them
  /// The epoch was resumed on another number of ranks: its batches no
  /// longer count from the epoch's start, only its samples do.
  bool resharded = false;
};

/// Where a fit starts.
struct ResumePoint {
  int64_t epoch = 0, batch = 0;
  /// Resume after the epoch's first `samples` (data's set_start_sample),
  /// not at `batch`: on another number of ranks, or in an epoch that was.
  bool by_samples = false;
  int64_t samples = 0;
};

/// Where the run is: the checkpoint's "trainer" part.
TRAINKIT_INLINE StateDict trainer_counters(const TrainState& state, const std::string& signature,
                                           bool epoch_done, const LossTotals& epoch_loss,
                                           const EpochPosition& position);
/// Restores the "trainer" part for a run on `world_size` ranks; returns
/// where to resume. The epoch's loss and samples so far (all ranks') go to
/// the rank that `holds_totals`.
TRAINKIT_INLINE ResumePoint restore_trainer_counters(const StateDict& d, TrainState& state,
                                                     LossMeter& epoch_loss, int64_t& epoch_samples,
                                                     bool holds_totals, int64_t world_size);
/// Other policies wrote `ckpt`: say so before anything else is checked.
/// The policy at `any_position` (the Parallel one) may differ: checkpoints
/// hold whole tensors by name, which any strategy on any number of ranks
/// reads.
TRAINKIT_INLINE void check_trainer_signature(const io::Checkpoint& ckpt,
                                             const std::string& signature, size_t any_position);
/// The policies' names in a signature ("Trainer<a, b<1, 2>, c>": a, b<1, 2>, c).
TRAINKIT_INLINE std::vector<std::string> signature_names(const std::string& signature);
/// `error` from resuming, as a trainkit::Error that names `file`.
[[noreturn]] TRAINKIT_INLINE void throw_resume_error(const std::string& file,
                                                     const std::exception& error);

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
TRAINKIT_INLINE std::string trainer_signature(std::span<const std::string> names) {
  std::string joined;
  for (const auto& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return "Trainer<" + joined + ">";
}

TRAINKIT_INLINE StateDict trainer_counters(const TrainState& state, const std::string& signature,
                                           bool epoch_done, const LossTotals& epoch_loss,
                                           const EpochPosition& position) {
  StateDict d;
  d.values = {{"signature", signature},
              {"epoch", state.epoch},
              {"batch", state.batch},
              {"step", state.step},
              {"epoch_done", epoch_done},
              {"samples_seen", state.samples_seen},
              {"loss_sum", epoch_loss.sum},
              {"loss_count", epoch_loss.count},
              {"epoch_samples", position.samples},
              {"world_size", position.world_size},
              {"epoch_resharded", position.resharded}};
  return d;
}

TRAINKIT_INLINE ResumePoint restore_trainer_counters(const StateDict& d, TrainState& state,
                                                     LossMeter& epoch_loss, int64_t& epoch_samples,
                                                     bool holds_totals, int64_t world_size) {
  const bool done = d.value<bool>("epoch_done");
  const auto epoch = d.value<int64_t>("epoch"), batch = d.value<int64_t>("batch");
  const auto step = d.value<int64_t>("step"), samples = d.value<int64_t>("samples_seen");
  const auto loss_sum = d.value<double>("loss_sum");
  const auto loss_count = d.value<int64_t>("loss_count");
  // checkpoints before the epoch's position was kept resume at their batch
  const bool positioned = d.values.count("epoch_samples") > 0;
  const auto taken = positioned ? d.value<int64_t>("epoch_samples") : 0;
  const bool moved = positioned && (d.value<int64_t>("world_size") != world_size ||
                                    d.value<bool>("epoch_resharded"));
  state.step = step;
  state.samples_seen = samples;
  epoch_loss.restore(holds_totals ? loss_sum : 0.0, holds_totals ? loss_count : 0);
  epoch_samples = holds_totals ? taken : 0;
  if (done) return {epoch + 1, 0, false, 0};
  return {epoch, batch, moved && batch > 0, taken};
}

TRAINKIT_INLINE std::vector<std::string> signature_names(const std::string& signature) {
  std::vector<std::string> names;
  const auto open = signature.find('<');
  if (open == std::string::npos || signature.back() != '>') return names;
  int depth = 0;
  std::string name;
  for (size_t i = open + 1; i + 1 < signature.size(); ++i) {
    const char c = signature[i];
    depth += c == '<' ? 1 : c == '>' ? -1 : 0;
    if (c == ',' && depth == 0) {
      names.push_back(name);
      name.clear();
      if (i + 1 < signature.size() && signature[i + 1] == ' ') ++i;
    } else {
      name += c;
    }
  }
  names.push_back(name);
  return names;
}

TRAINKIT_INLINE void check_trainer_signature(const io::Checkpoint& ckpt,
                                             const std::string& signature, size_t any_position) {
  const auto it = ckpt.parts.find("trainer");
  if (it == ckpt.parts.end()) return;  // the parts list names what is missing
  const auto written_by = it->second.value<std::string>("signature");
  auto written = signature_names(written_by), expected = signature_names(signature);
  if (written.size() == expected.size() && any_position < written.size())
    written[any_position] = expected[any_position];
  if (written != expected) {
    throw Error("trainkit: was written by " + written_by + ", not by this " + signature);
  }
}

TRAINKIT_INLINE void throw_resume_error(const std::string& file, const std::exception& error) {
  std::string what = error.what();
  if (what.rfind("trainkit: ", 0) == 0) what = what.substr(10);
  throw Error("trainkit: cannot resume from " + file + ": " + what);
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
