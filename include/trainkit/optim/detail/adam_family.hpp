#pragma once
// Shared state and validation of optim::Adam and optim::AdamW; they differ
// only in where weight decay goes.
#include <cmath>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/optim/detail/adam_kernel.hpp"
#include "trainkit/optim/detail/fused_optim.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::detail {

template <class OptionsT, bool Decoupled>
class AdamFamily {
 public:
  AdamFamily(FlatParams& params, const OptionsT& options);

  void step() {
    if (fused_) return fused_step(at::Tensor());
    ++steps_;
    const AdamHyper h{options_.lr,           options_.beta1, options_.beta2,   options_.eps,
                      options_.weight_decay, Decoupled,      options_.amsgrad, steps_};
    const auto groups = params_->groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      adam_step(groups[i].data, groups[i].grad, exp_avg_[i], exp_avg_sq_[i], max_exp_avg_sq_[i],
                scratch_[i], h);
    }
  }

  /// ATen's fused kernel steps the buffers (the `fused` option).
  bool fused() const { return fused_; }
  /// Whether a CUDA graph can capture step_unless_inf (after make_capturable).
  bool capturable() const { return fused_; }
  /// From now on the kernel reads the learning rate from the device
  /// (detail::DeviceLr), so a captured step sees each new value.
  void make_capturable() {
    require_fused(fused_, "a capturable step");
    lr_.make_capturable(options_.lr, params_->groups().front().data);
  }
  /// A step that reads nothing from the host: it changes nothing (not even
  /// the step count) where `found_inf` is nonzero, as torch.optim's fused
  /// step under a GradScaler. Needs fused().
  void step_unless_inf(const at::Tensor& found_inf) {
    require_fused(fused_, "a step without host reads");
    fused_step(found_inf);
  }

  double lr() const { return options_.lr; }
  void set_lr(double lr) {
    options_.lr = lr;
    lr_.set(lr);
  }
  /// OneCycle's momentum cycling drives beta1, as PyTorch does for Adam.
  double momentum() const { return options_.beta1; }
  void set_momentum(double beta1) { options_.beta1 = beta1; }
  const OptionsT& options() const { return options_; }
  int64_t steps_taken() const {
    return fused_ ? static_cast<int64_t>(step_count_.front().item<float>()) : steps_;
  }
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }

  StateDict state_dict() const;
  /// The state tensors that follow the flat parameters element by element.
  ElementwiseState elementwise_state() const;
  void load_state_dict(const StateDict& d);
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }

 private:
  /// f(state-dict name, tensor, flat group) for each per-element moment.
  template <class F>
  void for_each_moment(F&& f) const {
    for (size_t i = 0; i < exp_avg_.size(); ++i) {
      const auto n = std::to_string(i);
      f("exp_avg." + n, exp_avg_[i], i);
      f("exp_avg_sq." + n, exp_avg_sq_[i], i);
      if (options_.amsgrad) f("max_exp_avg_sq." + n, max_exp_avg_sq_[i], i);
    }
  }
  void fused_step(const at::Tensor& found_inf) {
    const FusedAdamHyper h{options_.beta1,        options_.beta2, options_.eps,
                           options_.weight_decay, Decoupled,      options_.amsgrad};
    const auto groups = params_->groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      step_count_[i].add_(1);
      fused_adam_step(groups[i].data, groups[i].grad, exp_avg_[i], exp_avg_sq_[i],
                      max_exp_avg_sq_[i], {options_.lr, lr_.tensor(), step_count_[i], found_inf},
                      h);
      if (found_inf.defined()) step_count_[i].sub_(found_inf.reshape({}));  // a skip is not a step
    }
  }

  FlatParams* params_;
  OptionsT options_;
  bool fused_;
  int64_t steps_ = 0;  ///< unfused; fused steps count on the device, in step_count_
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_, max_exp_avg_sq_, scratch_;
  /// Fused only: per group, the float step count torch.optim keeps.
  std::vector<at::Tensor> step_count_;
  DeviceLr lr_;
};

// Out of line, so that TRAINKIT_SEPARATE_COMPILATION programs compile them
// once for Adam and AdamW (optim/adam.hpp, optim/adamw.hpp, src.hpp).
template <class OptionsT, bool Decoupled>
AdamFamily<OptionsT, Decoupled>::AdamFamily(FlatParams& params, const OptionsT& options)
    : params_(&params), options_(options) {
  require_option(std::isfinite(options.lr) && options.lr >= 0.0, "optim.lr", options.lr,
                 "a finite number >= 0");
  require_option(options.beta1 >= 0.0 && options.beta1 < 1.0, "optim.beta1", options.beta1,
                 "0 <= beta1 < 1");
  require_option(options.beta2 >= 0.0 && options.beta2 < 1.0, "optim.beta2", options.beta2,
                 "0 <= beta2 < 1");
  require_option(options.eps >= 0.0, "optim.eps", options.eps, "a number >= 0");
  require_option(options.weight_decay >= 0.0, "optim.weight_decay", options.weight_decay,
                 "a number >= 0");
  const auto groups = params.groups();
  fused_ = !groups.empty() && resolve_fused(options.fused, groups.front().data.device());
  for (auto& g : groups) {
    exp_avg_.push_back(at::zeros_like(g.data));
    exp_avg_sq_.push_back(at::zeros_like(g.data));
    max_exp_avg_sq_.push_back(options.amsgrad ? at::zeros_like(g.data) : at::Tensor());
    if (fused_) {
      step_count_.push_back(at::zeros({}, g.data.options().dtype(at::kFloat)));
    } else {
      scratch_.push_back(at::empty_like(g.data));
    }
  }
}

template <class OptionsT, bool Decoupled>
StateDict AdamFamily<OptionsT, Decoupled>::state_dict() const {
  StateDict d;
  d.values["steps"] = steps_taken();
  d.values["beta1"] = options_.beta1;  // may be cycled by a schedule
  for_each_moment(
      [&](const std::string& name, const at::Tensor& t, size_t) { d.tensors[name] = t; });
  return d;
}

template <class OptionsT, bool Decoupled>
ElementwiseState AdamFamily<OptionsT, Decoupled>::elementwise_state() const {
  ElementwiseState out;
  for_each_moment([&](const std::string& name, const at::Tensor&, size_t g) { out[name] = g; });
  return out;
}

template <class OptionsT, bool Decoupled>
void AdamFamily<OptionsT, Decoupled>::load_state_dict(const StateDict& d) {
  std::vector<at::Tensor> m, v, vmax;  // check all, then assign
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    const auto n = std::to_string(i);
    m.push_back(d.tensor_like("exp_avg." + n, exp_avg_[i]));
    v.push_back(d.tensor_like("exp_avg_sq." + n, exp_avg_sq_[i]));
    if (options_.amsgrad) vmax.push_back(d.tensor_like("max_exp_avg_sq." + n, max_exp_avg_sq_[i]));
  }
  const auto steps = d.value<int64_t>("steps");
  const auto beta1 = d.value<double>("beta1");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    exp_avg_[i].copy_(m[i]);
    exp_avg_sq_[i].copy_(v[i]);
    if (options_.amsgrad) max_exp_avg_sq_[i].copy_(vmax[i]);
  }
  steps_ = steps;
  for (auto& count : step_count_) count.fill_(static_cast<double>(steps));
  options_.beta1 = beta1;
}

}  // namespace trainkit::detail
