#pragma once
// optim::Wrap<O>: any torch::optim optimizer as a trainkit policy. It steps
// the per-parameter views (which still share the flat buffers), so zeroing
// and clipping stay flat while the update is LibTorch's own.
#include <torch/optim.h>

#include <memory>
#include <type_traits>

#include "trainkit/params.hpp"

namespace trainkit::optim {

namespace detail {
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
}  // namespace detail

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

 private:
  std::unique_ptr<TorchOptimizer> optimizer_;
};

}  // namespace trainkit::optim
