#pragma once
// Tasks turn a batch into a loss (and, when evaluating, metrics). The trainer
// hands them a ModelRef: a type-erased handle that converts to the model's
// own type, so Trainer<...> does not depend on the model's type.
#include <c10/util/Type.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <concepts>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "trainkit/data/batch.hpp"
#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"

namespace trainkit {

namespace detail {
template <class M>
concept ModuleHolder = requires(const M& h) {
  typename M::ContainedType;
  { h.ptr() } -> std::convertible_to<std::shared_ptr<torch::nn::Module>>;
};
template <class M>
concept ModelType = ModuleHolder<M> || std::derived_from<M, torch::nn::Module>;
[[noreturn]] TRAINKIT_INLINE void throw_model_type(const std::type_info& wanted,
                                                   const std::type_info& given);
}  // namespace detail

/// The model as the Trainer holds it: one type for every model, so the
/// Trainer's code is not compiled once per model type. A task takes it as
/// the user's own type (`step(GPT& model, const TokenBatch& batch)`: the
/// conversion checks the type when called), or calls it with one tensor
/// when the model's forward takes one.
class ModelRef {
 public:
  ModelRef() = default;
  /// From a module holder (`MyNet net;`, see TORCH_MODULE).
  template <detail::ModuleHolder Holder>
  explicit ModelRef(Holder holder)
      : module_(holder.ptr()),
        holder_(std::make_shared<Holder>(holder)),
        holder_type_(&typeid(Holder)),
        forward_(one_tensor_forward(holder.ptr())) {}

  /// From a shared_ptr to a module.
  template <class Impl>
  requires std::derived_from<Impl, torch::nn::Module>
  explicit ModelRef(std::shared_ptr<Impl> impl)
      : module_(impl), forward_(one_tensor_forward(impl)) {}

  /// The model's forward on one tensor (models whose forward takes one).
  at::Tensor operator()(const at::Tensor& input) const {
    if (!forward_) {
      throw Error("trainkit: this model's forward does not take one tensor (" +
                  c10::demangle(model_type().name()) +
                  "): take the model as its own type in the task's step, `StepOutput "
                  "step(MyModel& model, const MyBatch& batch)`; see docs/models.md");
    }
    return forward_(input);
  }

  /// The model as its own type: the module holder it was given as, or the
  /// module class (or a base of it). Another type throws trainkit::Error.
  template <detail::ModelType M>
  M& as() const {
    if constexpr (detail::ModuleHolder<M>) {
      if (holder_type_ == nullptr || *holder_type_ != typeid(M)) {
        detail::throw_model_type(typeid(M), holder_type_ ? *holder_type_ : model_type());
      }
      return *static_cast<M*>(holder_.get());
    } else {
      auto* m = dynamic_cast<M*>(module_.get());
      if (m == nullptr) detail::throw_model_type(typeid(M), model_type());
      return *m;
    }
  }
  /// What lets a task's step take `GPT&` (or `GPTImpl&`) directly.
  template <detail::ModelType M>
  operator M&() const {  // NOLINT(google-explicit-constructor): the point of it
    return as<M>();
  }

  torch::nn::Module& module() const { return *module_; }
  /// The model's dynamic type (its module class).
  const std::type_info& model_type() const {
    const torch::nn::Module& m = *module_;
    return typeid(m);
  }
  const std::shared_ptr<torch::nn::Module>& ptr() const { return module_; }

 private:
  template <class Impl>
  static std::function<at::Tensor(const at::Tensor&)> one_tensor_forward(
      const std::shared_ptr<Impl>& impl) {
    if constexpr (requires(at::Tensor x) {
                    { impl->forward(x) } -> std::convertible_to<at::Tensor>;
                  }) {
      return [impl](const at::Tensor& x) { return impl->forward(x); };
    } else {
      return {};
    }
  }

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<void> holder_;  ///< a copy of the holder it was given as
  const std::type_info* holder_type_ = nullptr;
  std::function<at::Tensor(const at::Tensor&)> forward_;
};

/// What a task returns for one batch.
struct StepOutput {
  at::Tensor loss{};       ///< scalar mean over the batch (with its graph when training)
  int64_t batch_size = 0;  ///< 0: counted from the batch (data::batch_size)
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
TRAINKIT_INLINE void detail::throw_model_type(const std::type_info& wanted,
                                              const std::type_info& given) {
  throw Error("trainkit: the task takes the model as " + c10::demangle(wanted.name()) +
              ", but the Trainer was given a " + c10::demangle(given.name()) +
              "; take it as that type (or its module class)");
}

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
