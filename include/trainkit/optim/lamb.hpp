#pragma once
// optim::Lamb: Adam's step rescaled per parameter by a trust ratio (You et
// al., 2020, "Large Batch Optimization for Deep Learning", Algorithm 2), for
// large batches of transformers. Per parameter tensor W with gradient G:
//   m = b1 m + (1 - b1) G;  v = b2 v + (1 - b2) G^2
//   u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay W
//   W = W - lr r u,  r = |W| / |u| (1 where either norm is 0)
// with r = 1 in the groups marked trust_ratio = false (the papers leave
// biases and norms out, and their weight decay: params::no_trust_ratio()).
// On the flat buffers: the norms of all of a buffer's parameters at once,
// on the device (detail/trust_ratio.hpp); under sharding totalled over the
// ranks, so every strategy steps as one process does.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/optim/detail/device_step.hpp"
#include "trainkit/optim/detail/group_options.hpp"
#include "trainkit/optim/detail/trust_ratio.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::optim {

struct LambOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;  ///< the paper's and NVIDIA's LAMB default
  double weight_decay = 0.01;
  bool bias_correction = true;  ///< Algorithm 2 as published has it; some BERT code not
};

class Lamb : public detail::CapturableOptimizer<Lamb, LambOptions> {
 public:
  static constexpr const char* stable_name(std::type_identity<Lamb>) {
    return "trainkit::optim::Lamb";
  }
  using Options = LambOptions;

  Lamb(FlatParams& params, const Options& options) : CapturableOptimizer(params, options, resolve) {
    for (const auto& g : params.groups()) {
      exp_avg_.push_back(at::zeros_like(g.data));
      exp_avg_sq_.push_back(at::zeros_like(g.data));
      update_.push_back(at::empty_like(g.data));
      trust_.push_back(params.param_groups()[g.param_group].options.trust_ratio.value_or(true));
      lengths_.push_back(trust_.back() ? detail::lengths_on_device(g) : at::Tensor());
    }
  }

  /// OneCycle's momentum cycling drives beta1 (every group's), as for Adam.
  double momentum() const { return group_.front().beta1; }
  void set_momentum(double beta1) { set_all(&Options::beta1, beta1); }

  StateDict state_dict() const {
    StateDict d;
    steps_.counts().save(d);
    save_field(d, "beta1", &Options::beta1);  // may be cycled by a schedule
    detail::save_state_tensors(d, [this](auto&& f) { for_each_state(f); });
    return d;
  }
  /// The state tensors that follow the flat parameters element by element.
  ElementwiseState elementwise_state() const {
    return detail::elementwise_of([this](auto&& f) { for_each_state(f); });
  }
  std::vector<std::string> per_group_values() const { return {"steps"}; }
  void load_state_dict(const StateDict& d) {
    const auto assign = detail::read_state_tensors(
        d, [this](auto&& f) { for_each_state(f); });  // checked, then assigned
    const auto steps = detail::StepCounts::read(d, steps_.buffers());
    const auto beta1 = read_field(d, "beta1", &Options::beta1);
    torch::NoGradGuard no_grad;
    for (auto& [target, source] : assign) target.copy_(source);
    steps_.assign(steps);
    assign_field(&Options::beta1, beta1);
  }

 private:
  friend CapturableOptimizer;

  /// Flat buffer i's step, with scalars S: double on the host, 0-d
  /// tensors on the device (called for each buffer not frozen).
  template <class S>
  void step_buffer(size_t i, FlatGroup& g, detail::InfSkip& skip) {
    using namespace detail;
    const auto& o = group_[g.param_group];
    const S t = steps_.advance<S>(i, skip);
    const S lr = rate<S>(g.param_group);
    for (const auto& changed : {exp_avg_[i], exp_avg_sq_[i], g.data}) skip.keep(changed);
    exp_avg_[i].mul_(o.beta1).add_(g.grad, 1.0 - o.beta1);
    exp_avg_sq_[i].mul_(o.beta2).addcmul_(g.grad, g.grad, 1.0 - o.beta2);
    auto& update = update_[i];  // Adam's step, in a buffer kept between steps
    update.copy_(exp_avg_sq_[i]);
    if (o.bias_correction) divide_by(update, 1.0 - pow_of(o.beta2, t));
    update.sqrt_().add_(o.eps);
    at::div_out(update, exp_avg_[i], update);
    if (o.bias_correction) divide_by(update, 1.0 - pow_of(o.beta1, t));
    if (o.weight_decay != 0.0) update.add_(g.data, o.weight_decay);
    if (!trust_[i]) {
      add_scaled(g.data, update, -lr);
      return;
    }
    const auto norms = parameter_norms(*params_, g, {g.data, update});
    const auto ratio = ratio_or_one(norms[0] / norms[1], norms[0], norms[1]);
    scale_per_parameter(g, lengths_[i], update, ratio);
    add_scaled(g.data, update, -lr);
  }

  template <class F>
  void for_each_state(F&& f) const {
    for (size_t i = 0; i < exp_avg_.size(); ++i) {
      const auto n = std::to_string(i);
      f("exp_avg." + n, exp_avg_[i], i);
      f("exp_avg_sq." + n, exp_avg_sq_[i], i);
    }
  }

  static Options resolve(Options o, const GroupOptions& g, size_t param_group) {
    using detail::refuse_group_option;
    const char* accepted = "lr, lr_scale, weight_decay, beta1, beta2, eps, trust_ratio";
    refuse_group_option(g.amsgrad, param_group, "amsgrad", "optim::Lamb", accepted);
    refuse_group_option(g.momentum, param_group, "momentum", "optim::Lamb", accepted);
    refuse_group_option(g.dampening, param_group, "dampening", "optim::Lamb", accepted);
    refuse_group_option(g.nesterov, param_group, "nesterov", "optim::Lamb", accepted);
    refuse_group_option(g.muon, param_group, "muon", "optim::Lamb", accepted);
    o.lr = detail::group_lr(g, o.lr, param_group);
    o.weight_decay = g.weight_decay.value_or(o.weight_decay);
    o.beta1 = g.beta1.value_or(o.beta1);
    o.beta2 = g.beta2.value_or(o.beta2);
    o.eps = g.eps.value_or(o.eps);
    const auto prefix = detail::group_prefix(param_group);
    using detail::require_option;
    require_option(std::isfinite(o.lr) && o.lr >= 0.0, prefix + ".lr", o.lr,
                   "a finite number >= 0");
    require_option(o.beta1 >= 0.0 && o.beta1 < 1.0, prefix + ".beta1", o.beta1, "0 <= beta1 < 1");
    require_option(o.beta2 >= 0.0 && o.beta2 < 1.0, prefix + ".beta2", o.beta2, "0 <= beta2 < 1");
    require_option(o.eps > 0.0, prefix + ".eps", o.eps, "a number > 0");
    require_option(o.weight_decay >= 0.0, prefix + ".weight_decay", o.weight_decay,
                   "a number >= 0");
    return o;
  }

  std::vector<at::Tensor> exp_avg_, exp_avg_sq_, update_;
  std::vector<char> trust_;          ///< per flat buffer: its group's trust_ratio
  std::vector<at::Tensor> lengths_;  ///< per flat buffer: its parameters' lengths, on its device
};

}  // namespace trainkit::optim
