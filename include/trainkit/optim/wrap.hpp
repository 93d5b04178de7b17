#pragma once
// optim::Wrap<O>: any torch::optim optimizer as a trainkit policy. It steps
// the per-parameter views (which still share the flat buffers), so zeroing
// and clipping stay flat while the update is LibTorch's own.
#include <torch/optim.h>
#include <torch/serialize/archive.h>

#include <memory>
#include <sstream>
#include <type_traits>

#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::detail {
template <class O>
struct torch_options;
template <>
struct torch_options<torch::optim::SGD> {
  using type = torch::optim::SGDOptions;
};
template <>
struct torch_options<torch::optim::Adam> {
  using type = torch::optim::AdamOptions;
};
template <>
struct torch_options<torch::optim::AdamW> {
  using type = torch::optim::AdamWOptions;
};
template <>
struct torch_options<torch::optim::Adagrad> {
  using type = torch::optim::AdagradOptions;
};
template <>
struct torch_options<torch::optim::RMSprop> {
  using type = torch::optim::RMSpropOptions;
};
}  // namespace trainkit::detail

namespace trainkit::optim {

/// `TorchOptions` is found for LibTorch's own optimizers; name it for others
/// (`Wrap<MyTorchOptimizer, MyTorchOptimizerOptions>`).
template <class TorchOptimizer,
          class TorchOptionsT = typename detail::torch_options<TorchOptimizer>::type>
class Wrap {
  static_assert(std::is_base_of_v<torch::optim::Optimizer, TorchOptimizer>,
                "optim::Wrap<O>: O must derive from torch::optim::Optimizer");

 public:
  using TorchOptions = TorchOptionsT;
  struct Options {
    TorchOptions torch = TorchOptions(1e-3);
  };

  Wrap(FlatParams& params, const Options& options)
      : optimizer_(std::make_unique<TorchOptimizer>(params.params(), options.torch)) {}

  void step() { optimizer_->step(); }
  double lr() const { return optimizer_->param_groups().front().options().get_lr(); }
  void set_lr(double lr) {
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  }
  TorchOptimizer& get() { return *optimizer_; }

  /// LibTorch's own serialisation of the optimizer, kept as bytes.
  StateDict state_dict() const {
    torch::serialize::OutputArchive archive;
    optimizer_->save(archive);
    std::ostringstream out;
    archive.save_to(out);
    const auto bytes = out.str();
    StateDict d;
    d.tensors["torch_archive"] =
        at::from_blob(const_cast<char*>(bytes.data()), {int64_t(bytes.size())}, at::kByte).clone();
    return d;
  }
  void load_state_dict(const StateDict& d) {
    const auto it = d.tensors.find("torch_archive");
    if (it == d.tensors.end())
      throw Error("trainkit: checkpoint state has no tensor \"torch_archive\"");
    const auto& t = it->second;
    std::istringstream in(std::string(static_cast<const char*>(t.data_ptr()), size_t(t.numel())));
    torch::serialize::InputArchive archive;
    try {
      archive.load_from(in);
      optimizer_->load(archive);
    } catch (const c10::Error& e) {
      throw Error(std::string("trainkit: the wrapped torch::optim state does not load: ") +
                  e.what_without_backtrace());
    }
  }

 private:
  std::unique_ptr<TorchOptimizer> optimizer_;
};

}  // namespace trainkit::optim
