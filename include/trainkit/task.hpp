#pragma once
// Tasks turn a batch into a loss (and, when evaluating, metrics). The trainer
// hands them a ModelRef: a type-erased handle whose call runs the model's
// forward, so Trainer<...> does not depend on the model's type.
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/data/batch.hpp"
#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"

namespace trainkit {

class ModelRef {
 public:
  ModelRef() = default;
  /// From a module holder (`MyNet net;`, see TORCH_MODULE).
  template <class Holder>
  requires requires(Holder h, at::Tensor x) {
    { h.ptr() } -> std::convertible_to<std::shared_ptr<torch::nn::Module>>;
    { h->forward(x) } -> std::convertible_to<at::Tensor>;
  }
  explicit ModelRef(Holder holder)
      : module_(holder.ptr()),
        forward_([impl = holder.ptr()](const at::Tensor& x) { return impl->forward(x); }) {}

  /// From a shared_ptr to a module with forward(Tensor).
  template <class Impl>
  requires std::derived_from<Impl, torch::nn::Module> && requires(Impl& m, at::Tensor x) {
    { m.forward(x) } -> std::convertible_to<at::Tensor>;
  }
  explicit ModelRef(std::shared_ptr<Impl> impl)
      : module_(impl), forward_([impl](const at::Tensor& x) { return impl->forward(x); }) {}

  at::Tensor operator()(const at::Tensor& input) const { return forward_(input); }
  torch::nn::Module& module() const { return *module_; }
  const std::shared_ptr<torch::nn::Module>& ptr() const { return module_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::function<at::Tensor(const at::Tensor&)> forward_;
};

/// What a task returns for one batch.
struct StepOutput {
  at::Tensor loss{};  ///< scalar mean over the batch (with its graph when training)
  int64_t batch_size = 0;
  /// Batch means of extra metrics (e.g. accuracy), usually only when evaluating.
  std::vector<std::pair<std::string, at::Tensor>> metrics{};
};

namespace task {

/// Cross-entropy on logits; accuracy when evaluating.
struct Classification {
  /// PyTorch's `label_smoothing`: the target is (1 - s) on the class and s
  /// spread evenly over all classes; the loss of validation too.
  double label_smoothing = 0.0;

  StepOutput step(ModelRef& model, const data::Batch& batch) const;
};

/// Mean squared error.
struct Regression {
  StepOutput step(ModelRef& model, const data::Batch& batch) const;
};

}  // namespace task
#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE StepOutput task::Classification::step(ModelRef& model,
                                                      const data::Batch& batch) const {
  detail::require_option(label_smoothing >= 0.0 && label_smoothing <= 1.0, "task.label_smoothing",
                         label_smoothing, "a number in [0, 1]");
  const auto logits = model(batch.input);
  namespace F = torch::nn::functional;
  StepOutput out{F::cross_entropy(logits, batch.target,
                                  F::CrossEntropyFuncOptions().label_smoothing(label_smoothing)),
                 batch.size()};
  if (!at::GradMode::is_enabled()) {
    out.metrics.emplace_back("accuracy", logits.argmax(1).eq(batch.target).to(at::kFloat).mean());
  }
  return out;
}

TRAINKIT_INLINE StepOutput task::Regression::step(ModelRef& model, const data::Batch& batch) const {
  const auto pred = model(batch.input);
  return {torch::nn::functional::mse_loss(pred, batch.target.view_as(pred)), batch.size()};
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit
