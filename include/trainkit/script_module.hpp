#pragma once
// trainkit::ScriptModule: a model defined in Python, scripted or traced
// there (torch.jit.script, torch.jit.trace) and saved with torch.jit.save,
// as a torch::nn::Module the Trainer trains like a C++ one.
//
// A torch::jit::Module is not a torch::nn::Module, so each of its modules
// gets a shell nn::Module that registers the very same tensors (shared, not
// copied) under Python's names and the shells of its children: every
// policy that works on a module's parameters and buffers (groups by name,
// optimizers, DDP, sharding, checkpoints, EMA, Freeze) works on the
// scripted model's own, and `named_parameters()` gives the names Python's
// `state_dict()` does. Moves (`to(device)`) and flattening replace a
// tensor's data in place (set_data), which the scripted graphs see.
//
//   trainkit::ScriptModule model("model.pt");          // torch::jit::load
//   auto [logits, loss] = model->forward_tensors<2>(tokens, targets);
//   model->save("trained.pt");                         // torch.jit.load opens it
//   model->save_state_dict("trained_state.pt");        // the Python class loads it, strict
//
// Opt-in (it includes TorchScript's headers): not part of trainkit.hpp.
#include <c10/util/StringUtil.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/script.h>

#include <array>
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/io/named_tensors.hpp"
#include "trainkit/io/torch_save.hpp"

namespace trainkit {

struct ScriptModuleOptions {
  /// Where torch::jit::load puts the archive's tensors; unset: where they were saved.
  std::optional<c10::Device> device{};
  /// state_dict names of buffers Python registered with persistent=False,
  /// left out of save_state_dict (TorchScript forgets the flag). Added to
  /// those the archive lists in its extra file kNonPersistentBuffersFile.
  std::vector<std::string> non_persistent_buffers{};
  /// false: the graphs run op by op as recorded, the arithmetic of
  /// PyTorch's eager loop; true: TorchScript's profiling executor may fuse
  /// and specialise them (not bit-equal to eager; on the CPU 1.11x the op-by-op
  /// step: bench/bench_scripted.cpp).
  bool optimize = false;
};

/// The extra file of an archive that names its non-persistent buffers, one
/// per line (written in Python with torch.jit.save(..., _extra_files=...);
/// docs/models.md has the two lines).
inline constexpr const char* kNonPersistentBuffersFile = "trainkit/non_persistent_buffers";

namespace detail {

/// Whether a module's graphs recorded a training flag as a constant (a
/// traced model's batch norm or dropout): the mode it was traced in.
inline std::optional<bool> recorded_training_mode(const torch::jit::Module& module) {
  struct FlagInput {
    const char* op;
    size_t input;
  };
  static constexpr std::array<FlagInput, 4> kFlags{{{"aten::batch_norm", 5},
                                                    {"aten::dropout", 2},
                                                    {"aten::feature_dropout", 2},
                                                    {"aten::alpha_dropout", 2}}};
  std::optional<bool> mode;
  for (const auto& m : module.modules()) {
    for (const auto& method : m.get_methods()) {
      for (const auto* node : method.graph()->nodes()) {
        for (const auto& flag : kFlags) {
          if (node->kind().toQualString() != std::string_view(flag.op) ||
              node->inputs().size() <= flag.input)
            continue;
          if (const auto value = torch::jit::toIValue(node->input(flag.input));
              value && value->isBool())
            mode = value->toBool();
        }
      }
    }
  }
  return mode;
}

}  // namespace detail

/// One module of a TorchScript model as a torch::nn::Module: its tensors
/// registered by their Python names (the same tensors), its children as
/// shells too, and train()/eval() passed on to the scripted module.
class ScriptSubmodule : public torch::nn::Module {
 public:
  explicit ScriptSubmodule(torch::jit::Module script)
      : torch::nn::Module(type_name(script)), script_(std::move(script)) {
    for (const auto& p : script_.named_parameters(/*recurse=*/false))
      register_parameter(p.name, p.value, p.value.requires_grad());
    for (const auto& b : script_.named_buffers(/*recurse=*/false)) register_buffer(b.name, b.value);
    for (const auto& c : script_.named_children())
      register_module(c.name, std::make_shared<ScriptSubmodule>(c.value));
    torch::nn::Module::train(script_.is_training());
  }

  void train(bool on = true) override {
    torch::nn::Module::train(on);  // the children's shells pass it on to theirs
    script_.train(on);
  }
  /// The scripted module this one mirrors (shares its tensors).
  const torch::jit::Module& script() const { return script_; }
  torch::jit::Module& script() { return script_; }
  /// Its class as TorchScript names it ("__torch__.model.Block").
  static std::string type_name(const torch::jit::Module& m) {
    const auto& name = m.type()->name();
    return name ? name->qualifiedName() : "ScriptSubmodule";
  }

 protected:
  torch::jit::Module script_;
};

/// A TorchScript model the Trainer trains: see the top of this file.
class ScriptModuleImpl : public ScriptSubmodule {
 public:
  /// The archive at `path`, as torch::jit::load reads it.
  explicit ScriptModuleImpl(const std::filesystem::path& path, ScriptModuleOptions options = {})
      : ScriptModuleImpl(load(path, options), std::move(options)) {}
  /// A module loaded already (it is shared, not copied).
  explicit ScriptModuleImpl(torch::jit::Module script, ScriptModuleOptions options = {})
      : ScriptModuleImpl(Loaded{std::move(script), {}}, std::move(options)) {}

  /// The scripted forward on `inputs` (tensors, numbers, strings, lists:
  /// anything c10::IValue holds), returning what it returns.
  template <class... Inputs>
  c10::IValue call(Inputs&&... inputs) {
    return run_method("forward", {c10::IValue(std::forward<Inputs>(inputs))...});
  }
  /// The forward of a model that returns one tensor (the Trainer's
  /// built-in tasks call it with the batch's input).
  template <class... Inputs>
  at::Tensor forward(Inputs&&... inputs) {
    auto out = call(std::forward<Inputs>(inputs)...);
    if (!out.isTensor()) {
      throw Error("trainkit: ScriptModule::forward: the scripted forward returned a " +
                  out.tagKind() +
                  ", not one tensor; call forward_tensors<N>(...) for a tuple or list of N "
                  "tensors, or call(...) for any value");
    }
    return std::move(out).toTensor();
  }
  /// The forward of a model that returns a tuple or list of `N` tensors.
  template <size_t N, class... Inputs>
  std::array<at::Tensor, N> forward_tensors(Inputs&&... inputs) {
    const auto out = call(std::forward<Inputs>(inputs)...);
    std::vector<c10::IValue> items;
    if (out.isTuple()) {
      items = out.toTupleRef().elements().vec();
    } else if (out.isList()) {
      items = out.toListRef().vec();
    }
    std::array<at::Tensor, N> tensors;
    bool ok = items.size() == N;
    for (size_t i = 0; ok && i < N; ++i) {
      ok = items[i].isTensor();
      if (ok) tensors[i] = items[i].toTensor();
    }
    if (!ok) {
      throw Error("trainkit: ScriptModule::forward_tensors<" + std::to_string(N) +
                  ">: the scripted forward returned " + describe(out) +
                  ", not a tuple or list of " + std::to_string(N) + " tensors");
    }
    return tensors;
  }
  /// Any method of the scripted model (TorchScript's own `forward` rules).
  c10::IValue run_method(const std::string& method, std::vector<c10::IValue> inputs) {
    if (recorded_mode_ && *recorded_mode_ != is_training()) {
      throw Error(std::string("trainkit: ScriptModule: this model was traced in ") +
                  (*recorded_mode_ ? "training" : "evaluation") +
                  " mode (its batch norm or dropout recorded it as a constant), so it cannot run "
                  "in " +
                  (is_training() ? "training" : "evaluation") +
                  " mode: script it (torch.jit.script), or trace one archive per mode");
    }
    const auto found = script_.find_method(method);
    if (!found) {
      throw Error("trainkit: ScriptModule: the scripted model (" + type_name(script_) +
                  ") has no method \"" + method + "\"");
    }
    torch::jit::GraphOptimizerEnabledGuard optimize(options_.optimize);
    return (*found)(std::move(inputs));
  }

  /// The mode a traced model recorded (its batch norm's or dropout's
  /// flag); unset for a scripted one, which follows train() and eval().
  std::optional<bool> recorded_training_mode() const { return recorded_mode_; }
  /// The state_dict names save_state_dict leaves out.
  const std::set<std::string>& non_persistent_buffers() const { return non_persistent_; }

  using torch::nn::Module::save;  // LibTorch's own (an OutputArchive) stays callable
  /// A TorchScript archive of the model as it is now, its tensors on the
  /// CPU (Python: torch.jit.load(path)), written atomically. Under
  /// full sharding call it where the parameters are whole
  /// (trainer.gather_parameters).
  void save(const std::filesystem::path& path) const {
    // Each tensor on its own, contiguous, on the CPU. Not deepcopy(): it
    // takes tensors of one storage for one tensor, and the Trainer's flat
    // buffers make every parameter a view of one storage.
    auto copy = script_.clone(/*inplace=*/true);  // the same tensors, its own slots
    std::map<std::string, torch::jit::Module> originals;
    for (const auto& m : script_.named_modules()) originals.emplace(m.name, m.value);
    for (const auto& item : copy.named_modules()) {
      auto m = item.value;
      const auto& original = originals.at(item.name);
      for (const auto& p : original.named_parameters(/*recurse=*/false)) {
        auto own = p.value.detach().to(at::kCPU).contiguous().clone();
        m.register_parameter(p.name, own.set_requires_grad(p.value.requires_grad()), false);
      }
      for (const auto& b : original.named_buffers(/*recurse=*/false))
        m.register_buffer(b.name, b.value.detach().to(at::kCPU).contiguous().clone());
    }
    std::ostringstream out;
    torch::jit::ExtraFilesMap extra;
    if (!non_persistent_.empty())
      extra[kNonPersistentBuffersFile] = c10::Join("\n", non_persistent_);
    copy.save(out, extra);
    io::write_file_atomically(path, out.str());
  }
  /// The model's state dict as Python's `state_dict()` has it (parameters
  /// and persistent buffers by name), in a torch.save file, atomically:
  /// `model.load_state_dict(torch.load(path))` with strict=True.
  void save_state_dict(const std::filesystem::path& path) {
    auto tensors = io::module_tensors(*this);
    std::erase_if(tensors, [&](const auto& named) { return non_persistent_.count(named.first); });
    io::save_torch_save(path, tensors);
  }

 private:
  struct Loaded {
    torch::jit::Module script;
    torch::jit::ExtraFilesMap extra;
  };
  static Loaded load(const std::filesystem::path& path, const ScriptModuleOptions& options) {
    if (!std::filesystem::is_regular_file(path)) {
      throw Error("trainkit: ScriptModule: \"" + path.string() +
                  "\" is not a file (a TorchScript archive from torch.jit.save is expected)");
    }
    torch::jit::ExtraFilesMap extra{{kNonPersistentBuffersFile, ""}};
    try {
      c10::optional<c10::Device> device;  // std::optional's twin before LibTorch 2.1
      if (options.device) device = *options.device;
      auto script = torch::jit::load(path.string(), device, extra);
      return {std::move(script), std::move(extra)};
    } catch (const c10::Error& e) {
      throw Error("trainkit: ScriptModule: torch::jit::load could not read \"" + path.string() +
                  "\" (a TorchScript archive from torch.jit.save is expected): " +
                  e.what_without_backtrace());
    }
  }
  ScriptModuleImpl(Loaded loaded, ScriptModuleOptions options)
      : ScriptSubmodule(std::move(loaded.script)),
        options_(std::move(options)),
        recorded_mode_(detail::recorded_training_mode(script_)) {
    std::istringstream listed(loaded.extra[kNonPersistentBuffersFile]);
    for (std::string line; std::getline(listed, line);)
      if (!line.empty()) non_persistent_.insert(line);
    non_persistent_.insert(options_.non_persistent_buffers.begin(),
                           options_.non_persistent_buffers.end());
    std::set<std::string> buffers;
    for (const auto& b : named_buffers()) buffers.insert(b.key());
    for (const auto& n : non_persistent_) {
      if (!buffers.count(n)) {
        throw Error("trainkit: ScriptModule: non_persistent_buffers names \"" + n +
                    "\", which is not a buffer of the model (its buffers: " +
                    (buffers.empty() ? "none" : c10::Join(", ", buffers)) + ")");
      }
    }
  }
  static std::string describe(const c10::IValue& v) {
    if (v.isTuple()) return "a tuple of " + std::to_string(v.toTupleRef().elements().size());
    if (v.isList()) return "a list of " + std::to_string(v.toListRef().size());
    return "a " + std::string(v.tagKind());
  }

  ScriptModuleOptions options_;
  std::optional<bool> recorded_mode_;
  std::set<std::string> non_persistent_;
};

/// The module holder (TORCH_MODULE): `ScriptModule model("model.pt");`.
TORCH_MODULE(ScriptModule);

}  // namespace trainkit
