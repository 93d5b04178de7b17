#pragma once
// optim::ScheduleFreeAdamW: AdamW without a learning-rate schedule (Defazio
// et al., 2024, "The Road Less Scheduled"), as the authors'
// AdamWScheduleFree steps it. Three sequences per parameter: z (the base
// iterate), x (an average of the z's) and y = (1 - beta1) z + beta1 x, at
// which gradients are taken. The parameters hold y while training; z and
// v (Adam's second moment) are the state. Per step, with k steps before it:
//   lr_k = lr min(1, (k + 1) / warmup_steps) sqrt(1 - beta2^(k + 1))
//   lr_max = max(lr_max, lr_k);  w = (k + 1)^r lr_max^weight_lr_power
//   c = w / (sum of the w's so far)   (0 while that sum is 0)
//   v = beta2 v + (1 - beta2) G^2;  D = G / (sqrt(v) + eps) + weight_decay y
//   y = lerp(y, z, c) + lr_k (beta1 (1 - c) - 1) D;  z = z - lr_k D
// The weights to evaluate and save are x = lerp(y, z, 1 - 1 / beta1): the
// Trainer puts them in the model for validation, checkpoints and after fit
// (use_evaluation_weights), and y back before the next step, from a copy,
// so switching changes no bit of the run.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/optim/detail/device_step.hpp"
#include "trainkit/optim/detail/group_options.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::optim {

struct ScheduleFreeAdamWOptions {
  double lr = 0.0025;  ///< the authors' default (higher than AdamW's: no decay follows)
  double beta1 = 0.9;  ///< the interpolation between z and x, in place of momentum
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;     ///< decoupled, taken at y
  int64_t warmup_steps = 0;      ///< the built-in linear warm-up (use sched::Constant)
  double r = 0.0;                ///< the average's weights grow as step^r
  double weight_lr_power = 2.0;  ///< ... and as lr_max^weight_lr_power
};

class ScheduleFreeAdamW
    : public detail::CapturableOptimizer<ScheduleFreeAdamW, ScheduleFreeAdamWOptions> {
 public:
  static constexpr const char* stable_name(std::type_identity<ScheduleFreeAdamW>) {
    return "trainkit::optim::ScheduleFreeAdamW";
  }
  using Options = ScheduleFreeAdamWOptions;

  ScheduleFreeAdamW(FlatParams& params, const Options& options)
      : CapturableOptimizer(params, options, resolve),
        average_(params.param_groups().size(), Average{0.0, -1.0, 0.0}) {
    for (const auto& g : params.groups()) {
      z_.push_back(at::zeros_like(g.data));  // y's value at the buffer's first step
      exp_avg_sq_.push_back(at::zeros_like(g.data));
      scratch_.push_back(at::empty_like(g.data));
    }
  }

  /// A buffer's first step sets z on the host's word: the step is recorded
  /// once every trainable buffer has taken it.
  bool ready_to_capture() const {
    const auto groups = params_->groups();
    for (size_t i = 0; i < groups.size(); ++i)
      if (!params_->frozen(groups[i].param_group) && !steps_.stepped(i)) return false;
    return true;
  }

  /// The parameters to x, the weights to evaluate and save; y kept aside.
  /// Buffers that have not stepped are their own average.
  void use_evaluation_weights() {
    if (evaluating_) return;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < z_.size(); ++i) {
      auto& g = params_->groups()[i];
      if (!steps_.stepped(i)) continue;
      scratch_[i].copy_(g.data);
      g.data.lerp_(z_[i], 1.0 - 1.0 / group_[g.param_group].beta1);
    }
    evaluating_ = true;
  }
  /// The parameters back to y, as they were before use_evaluation_weights.
  void use_training_weights() {
    if (!evaluating_) return;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < z_.size(); ++i)
      if (steps_.stepped(i)) params_->groups()[i].data.copy_(scratch_[i]);
    evaluating_ = false;
  }
  bool evaluating() const { return evaluating_; }

  /// OneCycle's momentum cycling drives beta1, as for Adam.
  double momentum() const { return group_.front().beta1; }
  void set_momentum(double beta1) { set_all(&Options::beta1, beta1); }

  /// z, v and y (the training weights, so a resumed run is bitwise an
  /// unbroken one whichever weights the model's part holds), the average's
  /// sums per parameter group, and which weights the parameters hold.
  StateDict state_dict() const {
    StateDict d;
    steps_.counts().save(d);
    d.values["evaluation_weights"] = evaluating_;
    const auto average = average_values();
    for (size_t p = 0; p < average.size(); ++p) {
      const auto n = p == 0 ? std::string() : "." + std::to_string(p);
      d.values["average_steps" + n] = static_cast<int64_t>(average[p].k);
      d.values["lr_max" + n] = average[p].lr_max;
      d.values["weight_sum" + n] = average[p].weight_sum;
    }
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
    std::vector<std::pair<at::Tensor, at::Tensor>> assign;  // check all, then assign
    for (size_t i = 0; i < z_.size(); ++i) {
      const auto n = std::to_string(i);
      assign.emplace_back(z_[i], d.tensor_like("z." + n, z_[i]));
      assign.emplace_back(exp_avg_sq_[i], d.tensor_like("exp_avg_sq." + n, exp_avg_sq_[i]));
      assign.emplace_back(scratch_[i], d.tensor_like("y." + n, scratch_[i]));
    }
    const auto steps = detail::StepCounts::read(d, steps_.buffers());
    const bool evaluating = d.value<bool>("evaluation_weights");
    std::vector<Average> average(average_.size());
    for (size_t p = 0; p < average.size(); ++p) {
      const auto n = p == 0 ? std::string() : "." + std::to_string(p);
      average[p] = {double(d.value<int64_t>("average_steps" + n)), d.value<double>("lr_max" + n),
                    d.value<double>("weight_sum" + n)};
    }
    const auto beta1 = read_field(d, "beta1", &Options::beta1);
    torch::NoGradGuard no_grad;
    for (auto& [target, source] : assign) target.copy_(source);
    steps_.assign(steps);
    average_ = average;
    for (size_t p = 0; p < device_average_.size(); ++p) {
      device_average_[p].k.fill_(average[p].k);
      device_average_[p].lr_max.fill_(average[p].lr_max);
      device_average_[p].weight_sum.fill_(average[p].weight_sum);
    }
    assign_field(&Options::beta1, beta1);
    // y went to the copy use_training_weights restores: where the model's
    // part holds y (saved while training), restoring it changes nothing.
    evaluating_ = true;
    if (!evaluating) use_training_weights();
  }

 private:
  friend CapturableOptimizer;

  /// make_capturable's part here: the averages' sums to the device.
  void move_to_device(const at::Tensor& like) {
    const auto o = like.options().dtype(at::kDouble);
    for (const auto& a : average_)
      device_average_.push_back(
          {at::full({}, a.k, o), at::full({}, a.lr_max, o), at::full({}, a.weight_sum, o)});
  }

  /// Per parameter group: the average's steps and sums (the authors' k,
  /// lr_max and weight_sum), in S (see step_as).
  template <class S>
  struct AverageOf {
    S k, lr_max, weight_sum;
  };
  using Average = AverageOf<double>;

  template <class S>
  std::vector<AverageOf<S>>& averages() {
    if constexpr (std::is_same_v<S, double>) {
      return average_;
    } else {
      return device_average_;
    }
  }
  /// The averages' sums (read from the device, which waits for it, once capturable).
  std::vector<Average> average_values() const {
    if (device_average_.empty()) return average_;
    std::vector<Average> out;
    for (const auto& a : device_average_)
      out.push_back({a.k.item<double>(), a.lr_max.item<double>(), a.weight_sum.item<double>()});
    return out;
  }

  /// The step, with scalars S: double on the host, 0-d tensors on the device.
  template <class S>
  void step_as(const at::Tensor& found_inf) {
    using namespace detail;
    if (evaluating_) {
      throw Error(
          "trainkit: optim::ScheduleFreeAdamW::step: the parameters hold the evaluation weights "
          "(x); call use_training_weights() first (the Trainer does)");
    }
    torch::NoGradGuard no_grad;
    InfSkip skip(found_inf);
    steps_.advance_total<S>(skip);
    std::vector<S> lr(group_.size()), ckp1(group_.size());
    for (size_t p = 0; p < group_.size(); ++p) {
      if (params_->frozen(p)) continue;
      const auto& o = group_[p];
      auto& a = averages<S>()[p];
      if constexpr (!std::is_same_v<S, double>) {
        for (const auto& changed : {a.k, a.lr_max, a.weight_sum}) skip.keep(changed);
      }
      const S k1 = a.k + 1.0;  // this step's, from 1
      lr[p] = rate<S>(p);
      if (o.warmup_steps > 0) lr[p] = lr[p] * min_of(k1 / double(o.warmup_steps), 1.0);
      lr[p] = lr[p] * sqrt_of(1.0 - pow_of(o.beta2, k1));
      assign(a.lr_max, max_of(lr[p], a.lr_max));
      const S weight = pow_of(k1, o.r) * pow_of(a.lr_max, o.weight_lr_power);
      assign(a.weight_sum, a.weight_sum + weight);
      ckp1[p] = ratio_or_zero(weight, a.weight_sum);
      assign(a.k, k1);
    }
    auto groups = params_->groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      auto& g = groups[i];
      const size_t p = g.param_group;
      if (params_->frozen(p)) continue;
      const auto& o = group_[p];
      for (const auto& changed : {z_[i], exp_avg_sq_[i], g.data}) skip.keep(changed);
      if (!steps_.stepped(i)) z_[i].copy_(g.data);
      steps_.advance<S>(i, skip);
      exp_avg_sq_[i].mul_(o.beta2).addcmul_(g.grad, g.grad, 1.0 - o.beta2);
      auto& d = scratch_[i];  // the normalised gradient, kept between steps
      at::sqrt_out(d, exp_avg_sq_[i]).add_(o.eps);
      at::div_out(d, g.grad, d);
      if (o.weight_decay != 0.0) d.add_(g.data, o.weight_decay);
      lerp_towards(g.data, z_[i], ckp1[p]);
      add_scaled(g.data, d, lr[p] * (o.beta1 * (1.0 - ckp1[p]) - 1.0));
      add_scaled(z_[i], d, -lr[p]);
    }
    skip.finish();
  }

  /// f(state-dict name, tensor, flat buffer) for each per-element state
  /// tensor; y is the parameters themselves while they hold it.
  template <class F>
  void for_each_state(F&& f) const {
    for (size_t i = 0; i < z_.size(); ++i) {
      const auto n = std::to_string(i);
      f("z." + n, z_[i], i);
      f("exp_avg_sq." + n, exp_avg_sq_[i], i);
      f("y." + n, evaluating_ ? scratch_[i] : params_->groups()[i].data, i);
    }
  }

  static Options resolve(Options o, const GroupOptions& g, size_t param_group) {
    using detail::refuse_group_option;
    const char* accepted = "lr, lr_scale, weight_decay, beta1, beta2, eps";
    refuse_group_option(g.amsgrad, param_group, "amsgrad", "optim::ScheduleFreeAdamW", accepted);
    refuse_group_option(g.momentum, param_group, "momentum", "optim::ScheduleFreeAdamW", accepted);
    refuse_group_option(g.dampening, param_group, "dampening", "optim::ScheduleFreeAdamW",
                        accepted);
    refuse_group_option(g.nesterov, param_group, "nesterov", "optim::ScheduleFreeAdamW", accepted);
    refuse_group_option(g.muon, param_group, "muon", "optim::ScheduleFreeAdamW", accepted);
    refuse_group_option(g.trust_ratio, param_group, "trust_ratio", "optim::ScheduleFreeAdamW",
                        accepted);
    o.lr = detail::group_lr(g, o.lr, param_group);
    o.weight_decay = g.weight_decay.value_or(o.weight_decay);
    o.beta1 = g.beta1.value_or(o.beta1);
    o.beta2 = g.beta2.value_or(o.beta2);
    o.eps = g.eps.value_or(o.eps);
    const auto prefix = detail::group_prefix(param_group);
    using detail::require_option;
    require_option(std::isfinite(o.lr) && o.lr >= 0.0, prefix + ".lr", o.lr,
                   "a finite number >= 0");
    // x = lerp(y, z, 1 - 1 / beta1) divides by beta1
    require_option(o.beta1 > 0.0 && o.beta1 < 1.0, prefix + ".beta1", o.beta1, "0 < beta1 < 1");
    require_option(o.beta2 >= 0.0 && o.beta2 < 1.0, prefix + ".beta2", o.beta2, "0 <= beta2 < 1");
    require_option(o.eps > 0.0, prefix + ".eps", o.eps, "a number > 0");
    require_option(o.weight_decay >= 0.0, prefix + ".weight_decay", o.weight_decay,
                   "a number >= 0");
    require_option(o.warmup_steps >= 0, prefix + ".warmup_steps", o.warmup_steps,
                   "an integer >= 0");
    require_option(o.r >= 0.0, prefix + ".r", o.r, "a number >= 0");
    require_option(o.weight_lr_power >= 0.0, prefix + ".weight_lr_power", o.weight_lr_power,
                   "a number >= 0");
    return o;
  }

  std::vector<Average> average_;                       ///< per parameter group; until capturable
  std::vector<AverageOf<at::Tensor>> device_average_;  ///< once capturable
  std::vector<at::Tensor> z_, exp_avg_sq_;
  /// Per flat buffer: the normalised gradient during a step; y while the
  /// parameters hold x.
  std::vector<at::Tensor> scratch_;
  bool evaluating_ = false;
};

}  // namespace trainkit::optim
