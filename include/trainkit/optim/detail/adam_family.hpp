#pragma once
// Shared state and validation of optim::Adam and optim::AdamW; they differ
// only in where weight decay goes. Each parameter group has its own
// hyperparameters (the optimizer's options with the group's overrides).
#include <cmath>
#include <string>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/optim/detail/adam_kernel.hpp"
#include "trainkit/optim/detail/fused_optim.hpp"
#include "trainkit/optim/detail/group_options.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::detail {

template <class OptionsT, bool Decoupled>
class AdamFamily : public GroupedOptions<OptionsT> {
  using Base = GroupedOptions<OptionsT>;
  using Base::group_;

 public:
  AdamFamily(FlatParams& params, const OptionsT& options);

  void step() {
    if (fused_) return fused_step(at::Tensor());
    ++steps_;
    const auto groups = params_->groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      if (params_->frozen(groups[i].param_group)) continue;  // no step, no state change
      const auto& o = group_[groups[i].param_group];
      const AdamHyper h{o.lr,           o.beta1,   o.beta2,   o.eps,
                        o.weight_decay, Decoupled, o.amsgrad, ++buffer_steps_[i]};
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
    this->make_rates_capturable(params_->groups().front().data);
  }
  /// A step that reads nothing from the host: it changes nothing (not even
  /// the step count) where `found_inf` is nonzero, as torch.optim's fused
  /// step under a GradScaler. Needs fused().
  void step_unless_inf(const at::Tensor& found_inf) {
    require_fused(fused_, "a step without host reads");
    fused_step(found_inf);
  }

  /// OneCycle's momentum cycling drives beta1 (every group's), as PyTorch does for Adam.
  double momentum() const { return group_.front().beta1; }
  void set_momentum(double beta1) { this->set_all(&OptionsT::beta1, beta1); }
  int64_t steps_taken() const {
    return fused_ ? static_cast<int64_t>(step_count_.front().item<float>()) : steps_;
  }
  /// The steps buffer i took (fewer than steps_taken() where its group was frozen).
  int64_t steps_of(size_t i) const {
    return fused_ ? static_cast<int64_t>(step_count_.at(i).item<float>()) : buffer_steps_.at(i);
  }
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  /// The options' ranges (errors name `prefix.field`); optim::Muon's AdamW groups too.
  static void check(const OptionsT& o, const std::string& prefix);

  StateDict state_dict() const;
  /// The state tensors that follow the flat parameters element by element.
  ElementwiseState elementwise_state() const;
  /// Values kept per flat group ("steps.<group>": a frozen group's count stops).
  std::vector<std::string> per_group_values() const { return {"steps"}; }
  void load_state_dict(const StateDict& d);
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  /// Bytes held between steps besides the state: the unfused step's
  /// denominator buffer, one per flat group (so no step allocates).
  int64_t workspace_bytes() const {
    int64_t bytes = 0;
    for (const auto& t : scratch_) bytes += t.defined() ? int64_t(t.nbytes()) : 0;
    return bytes;
  }

 private:
  /// f(state-dict name, tensor, flat group) for each per-element moment.
  template <class F>
  void for_each_moment(F&& f) const {
    for (size_t i = 0; i < exp_avg_.size(); ++i) {
      const auto n = std::to_string(i);
      f("exp_avg." + n, exp_avg_[i], i);
      f("exp_avg_sq." + n, exp_avg_sq_[i], i);
      if (max_exp_avg_sq_[i].defined()) f("max_exp_avg_sq." + n, max_exp_avg_sq_[i], i);
    }
  }
  void fused_step(const at::Tensor& found_inf) {
    const auto groups = params_->groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const size_t g = groups[i].param_group;
      if (params_->frozen(g)) continue;
      const auto& o = group_[g];
      const FusedAdamHyper h{o.beta1, o.beta2, o.eps, o.weight_decay, Decoupled, o.amsgrad};
      step_count_[i].add_(1);
      fused_adam_step(groups[i].data, groups[i].grad, exp_avg_[i], exp_avg_sq_[i],
                      max_exp_avg_sq_[i], {o.lr, this->device_lr(g), step_count_[i], found_inf}, h);
      if (found_inf.defined()) step_count_[i].sub_(found_inf.reshape({}));  // a skip is not a step
    }
  }

  /// The optimizer's options with a group's overrides, checked.
  static OptionsT resolve(OptionsT o, const GroupOptions& g, size_t param_group);

  FlatParams* params_;
  bool fused_;
  int64_t steps_ = 0;  ///< unfused; fused steps count on the device, in step_count_
  /// Unfused, per buffer: the steps it took (a frozen group's do not
  /// advance, as torch.optim's per-parameter step), for the bias correction.
  std::vector<int64_t> buffer_steps_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_, max_exp_avg_sq_, scratch_;
  /// Fused only: per group, the float step count torch.optim keeps.
  std::vector<at::Tensor> step_count_;
};

// Out of line, so that TRAINKIT_SEPARATE_COMPILATION programs compile them
// once for Adam and AdamW (optim/adam.hpp, optim/adamw.hpp, src.hpp).
template <class OptionsT, bool Decoupled>
void AdamFamily<OptionsT, Decoupled>::check(const OptionsT& o, const std::string& prefix) {
  require_option(std::isfinite(o.lr) && o.lr >= 0.0, prefix + ".lr", o.lr, "a finite number >= 0");
  require_option(o.beta1 >= 0.0 && o.beta1 < 1.0, prefix + ".beta1", o.beta1, "0 <= beta1 < 1");
  require_option(o.beta2 >= 0.0 && o.beta2 < 1.0, prefix + ".beta2", o.beta2, "0 <= beta2 < 1");
  require_option(o.eps >= 0.0, prefix + ".eps", o.eps, "a number >= 0");
  require_option(o.weight_decay >= 0.0, prefix + ".weight_decay", o.weight_decay, "a number >= 0");
}

template <class OptionsT, bool Decoupled>
OptionsT AdamFamily<OptionsT, Decoupled>::resolve(OptionsT o, const GroupOptions& g,
                                                  size_t param_group) {
  const char* name = Decoupled ? "optim::AdamW" : "optim::Adam";
  const char* accepted = "lr, lr_scale, weight_decay, beta1, beta2, eps, amsgrad";
  refuse_group_option(g.momentum, param_group, "momentum", name, accepted);
  refuse_group_option(g.dampening, param_group, "dampening", name, accepted);
  refuse_group_option(g.nesterov, param_group, "nesterov", name, accepted);
  refuse_group_option(g.muon, param_group, "muon", name, accepted);
  refuse_group_option(g.trust_ratio, param_group, "trust_ratio", name, accepted);
  o.lr = group_lr(g, o.lr, param_group);
  o.weight_decay = g.weight_decay.value_or(o.weight_decay);
  o.beta1 = g.beta1.value_or(o.beta1);
  o.beta2 = g.beta2.value_or(o.beta2);
  o.eps = g.eps.value_or(o.eps);
  o.amsgrad = g.amsgrad.value_or(o.amsgrad);
  check(o, group_prefix(param_group));
  return o;
}

template <class OptionsT, bool Decoupled>
AdamFamily<OptionsT, Decoupled>::AdamFamily(FlatParams& params, const OptionsT& options)
    : Base(params, options, resolve), params_(&params) {  // group 0's resolve checks `optim`
  const auto groups = params.groups();
  fused_ = !groups.empty() && resolve_fused(options.fused, groups.front().data.device());
  for (auto& g : groups) {
    exp_avg_.push_back(at::zeros_like(g.data));
    exp_avg_sq_.push_back(at::zeros_like(g.data));
    max_exp_avg_sq_.push_back(group_[g.param_group].amsgrad ? at::zeros_like(g.data)
                                                            : at::Tensor());
    if (fused_) {
      step_count_.push_back(at::zeros({}, g.data.options().dtype(at::kFloat)));
    } else {
      scratch_.push_back(at::empty_like(g.data));
      buffer_steps_.push_back(0);
    }
  }
}

template <class OptionsT, bool Decoupled>
StateDict AdamFamily<OptionsT, Decoupled>::state_dict() const {
  StateDict d;
  d.values["steps"] = steps_taken();
  for (size_t i = 0; i < exp_avg_.size(); ++i) d.values["steps." + std::to_string(i)] = steps_of(i);
  this->save_field(d, "beta1", &OptionsT::beta1);  // may be cycled by a schedule
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
    vmax.push_back(max_exp_avg_sq_[i].defined()
                       ? d.tensor_like("max_exp_avg_sq." + n, max_exp_avg_sq_[i])
                       : at::Tensor());
  }
  const auto steps = d.value<int64_t>("steps");
  std::vector<int64_t> per_buffer;  // absent before frozen groups: all took `steps`
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    const auto key = "steps." + std::to_string(i);
    per_buffer.push_back(d.values.count(key) ? d.value<int64_t>(key) : steps);
  }
  const auto beta1 = this->read_field(d, "beta1", &OptionsT::beta1);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    exp_avg_[i].copy_(m[i]);
    exp_avg_sq_[i].copy_(v[i]);
    if (vmax[i].defined()) max_exp_avg_sq_[i].copy_(vmax[i]);
  }
  steps_ = steps;
  buffer_steps_ = per_buffer;
  for (size_t i = 0; i < step_count_.size(); ++i)
    step_count_[i].fill_(static_cast<double>(per_buffer[i]));
  this->assign_field(&OptionsT::beta1, beta1);
}

}  // namespace trainkit::detail
