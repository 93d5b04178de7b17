#pragma once
// A capturable step (capture::CudaGraph) for optimizers that ATen has no
// fused kernel for (Muon, Lamb, Lars, ScheduleFreeAdamW): once
// make_capturable() ran, every step, eager or replayed, reads its rates and
// step counts from the device and nothing from the host, and a GradScaler's
// skipped step leaves everything as it was. Their steps are written once,
// over a scalar type S: double (host values, the eager step as the
// references check it) or a 0-d at::Tensor (device values); the helpers
// below do each operation for both.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/optim/detail/group_options.hpp"
#include "trainkit/params.hpp"

namespace trainkit::detail {

/// One step's inf flag: a GradScaler's found_inf (nonzero: skip the step),
/// or undefined, when no step is skipped on the device.
class InfSkip {
 public:
  explicit InfSkip(const at::Tensor& found_inf = at::Tensor()) {
    if (found_inf.defined()) found_ = found_inf.reshape({});
  }
  /// Before the step changes `t` in place: a copy, to put back if skipped.
  void keep(const at::Tensor& t) {
    if (found_.defined()) kept_.emplace_back(t, t.clone());
  }
  /// A step count advanced now (the step reads it), and back at finish()
  /// if skipped: a skipped step is not a step.
  const at::Tensor& advance(const at::Tensor& count) {
    count.add_(1);
    if (found_.defined()) counts_.push_back(count);
    return count;
  }
  /// After the step: what keep() and advance() saw, as it was where skipped.
  void finish() {
    if (!found_.defined()) return;
    const auto skipped = found_.ne(0);
    for (auto& [t, copy] : kept_) at::where_out(t, skipped, copy, t);
    for (auto& count : counts_) count.sub_(found_);
    kept_.clear();
    counts_.clear();
  }

 private:
  at::Tensor found_;
  std::vector<std::pair<at::Tensor, at::Tensor>> kept_;
  std::vector<at::Tensor> counts_;
};

/// An optimizer's StepCounts: on the host, and once capturable on the
/// device (float64 0-d tensors: exact to 2^53 steps), where each step
/// advances them unless skipped.
class Steps {
 public:
  explicit Steps(size_t buffers) : host_(buffers), stepped_(buffers, 0) {}

  size_t buffers() const { return stepped_.size(); }
  bool on_device() const { return total_.defined(); }
  void to_device(const at::Tensor& like) {
    if (on_device()) return;
    const auto o = like.options().dtype(at::kDouble);
    total_ = at::full({}, double(host_.total), o);
    for (const auto n : host_.per_buffer) per_buffer_.push_back(at::full({}, double(n), o));
  }
  /// The counts (read from the device, which waits for it, once capturable).
  StepCounts counts() const {
    if (!on_device()) return host_;
    StepCounts out(per_buffer_.size());
    out.total = static_cast<int64_t>(total_.item<double>());
    for (size_t i = 0; i < per_buffer_.size(); ++i)
      out.per_buffer[i] = static_cast<int64_t>(per_buffer_[i].item<double>());
    return out;
  }
  void assign(const StepCounts& c) {
    host_ = c;
    for (size_t i = 0; i < stepped_.size(); ++i) stepped_[i] = c.per_buffer[i] > 0;
    if (!on_device()) return;
    total_.fill_(double(c.total));
    for (size_t i = 0; i < per_buffer_.size(); ++i) per_buffer_[i].fill_(double(c.per_buffer[i]));
  }
  /// Whether buffer i has stepped, known on the host: a step the device
  /// skipped is a replayed one, and only buffers that stepped are recorded
  /// (the optimizers' ready_to_capture).
  bool stepped(size_t i) const { return stepped_[i] != 0; }

  /// Counts a step in S (see the file's comment); returns the new count.
  template <class S>
  S advance_total(InfSkip& skip) {
    if constexpr (std::is_same_v<S, double>) {
      return double(++host_.total);
    } else {
      return skip.advance(total_);
    }
  }
  template <class S>
  S advance(size_t i, InfSkip& skip) {
    stepped_[i] = 1;
    if constexpr (std::is_same_v<S, double>) {
      return double(++host_.per_buffer[i]);
    } else {
      return skip.advance(per_buffer_[i]);
    }
  }

 private:
  StepCounts host_;  ///< until capturable; then as they were then
  std::vector<char> stepped_;
  at::Tensor total_;
  std::vector<at::Tensor> per_buffer_;
};

/// The operations a step does on its scalars, for S = double and 0-d tensors.
inline double pow_of(double base, double exponent) {
  return std::pow(base, exponent);
}
inline at::Tensor pow_of(double base, const at::Tensor& exponent) {
  return at::pow(base, exponent);
}
inline at::Tensor pow_of(const at::Tensor& base, double exponent) {
  return base.pow(exponent);
}
inline double sqrt_of(double x) {
  return std::sqrt(x);
}
inline at::Tensor sqrt_of(const at::Tensor& x) {
  return x.sqrt();
}
inline double max_of(double a, double b) {
  return std::max(a, b);
}
inline at::Tensor max_of(const at::Tensor& a, const at::Tensor& b) {
  return at::maximum(a, b);
}
inline double min_of(double a, double b) {
  return std::min(a, b);
}
inline at::Tensor min_of(const at::Tensor& a, double b) {
  return a.clamp_max(b);
}
/// numerator / denominator, 0 where the denominator is 0
inline double ratio_or_zero(double numerator, double denominator) {
  return denominator != 0.0 ? numerator / denominator : 0.0;
}
inline at::Tensor ratio_or_zero(const at::Tensor& numerator, const at::Tensor& denominator) {
  return at::where(denominator.ne(0), numerator / denominator, at::zeros_like(numerator));
}
/// target = value: a new number, or the device tensor overwritten in place
/// (InfSkip puts kept tensors back in place)
inline void assign(double& target, double value) {
  target = value;
}
inline void assign(const at::Tensor& target, const at::Tensor& value) {
  target.copy_(value);
}
/// target += scale * x
inline void add_scaled(const at::Tensor& target, const at::Tensor& x, double scale) {
  target.add_(x, scale);
}
inline void add_scaled(const at::Tensor& target, const at::Tensor& x, const at::Tensor& scale) {
  target.addcmul_(x, scale.to(target.scalar_type()));
}
/// target /= divisor
inline void divide_by(const at::Tensor& target, double divisor) {
  target.div_(divisor);
}
inline void divide_by(const at::Tensor& target, const at::Tensor& divisor) {
  target.div_(divisor.to(target.scalar_type()));
}
/// target *= scale
inline void scale_by(const at::Tensor& target, double scale) {
  target.mul_(scale);
}
inline void scale_by(const at::Tensor& target, const at::Tensor& scale) {
  target.mul_(scale.to(target.scalar_type()));
}
/// target = lerp(target, end, weight)
inline void lerp_towards(const at::Tensor& target, const at::Tensor& end, double weight) {
  target.lerp_(end, weight);
}
inline void lerp_towards(const at::Tensor& target, const at::Tensor& end,
                         const at::Tensor& weight) {
  target.lerp_(end, weight.to(target.scalar_type()));
}

/// One AdamW step (decoupled weight decay) with the rate and step count on
/// the device: adam_step's ATen path with tensors for its host numbers
/// (optim::Muon's AdamW groups once capturable).
inline void adamw_step_on_device(const at::Tensor& param, const at::Tensor& grad,
                                 const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                                 at::Tensor max_exp_avg_sq, at::Tensor scratch,
                                 const at::Tensor& lr, const at::Tensor& step, double beta1,
                                 double beta2, double eps, double weight_decay) {
  const auto bc1 = 1.0 - at::pow(beta1, step);
  const auto bc2_sqrt = (1.0 - at::pow(beta2, step)).sqrt();
  scale_by(param, 1.0 - lr * weight_decay);
  exp_avg.mul_(beta1).add_(grad, 1.0 - beta1);
  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1.0 - beta2);
  if (max_exp_avg_sq.defined()) {
    at::maximum_out(max_exp_avg_sq, max_exp_avg_sq, exp_avg_sq);
    at::sqrt_out(scratch, max_exp_avg_sq);
  } else {
    at::sqrt_out(scratch, exp_avg_sq);
  }
  scale_by(scratch, 1.0 / bc2_sqrt);
  scratch.add_(eps);
  // param += (-lr / bc1) exp_avg / scratch
  scratch.reciprocal_();
  scale_by(scratch, -lr / bc1);
  param.addcmul_(exp_avg, scratch);
}

/// The public step of an optimizer `Derived` (options O) whose step is
/// written once over scalars S (see the file's comment): host numbers until
/// make_capturable(), device tensors after. Derived defines
/// `template <class S> void step_buffer(size_t i, FlatGroup& g, InfSkip&)`,
/// one flat buffer's step, or, when a step does more than its buffers',
/// `template <class S> void step_as(const at::Tensor& found_inf)` (see
/// below). A Derived with more state to move (ScheduleFreeAdamW's sums)
/// defines `move_to_device(like)`.
template <class Derived, class O>
class CapturableOptimizer : public GroupedOptions<O> {
 public:
  void step() {
    if (steps_.on_device()) return self().template step_as<at::Tensor>(at::Tensor());
    self().template step_as<double>(at::Tensor());
  }
  /// A step a CUDA graph captures: after make_capturable() the rates and
  /// step counts live on the device, and step_unless_inf(found_inf)
  /// changes nothing where the flag is set.
  bool capturable() const { return true; }
  void make_capturable() {
    if (steps_.on_device()) return;
    const auto& like = params_->groups().front().data;
    this->make_rates_capturable(like);
    steps_.to_device(like);
    if constexpr (requires { self().move_to_device(like); }) self().move_to_device(like);
  }
  void step_unless_inf(const at::Tensor& found_inf) {
    if (!steps_.on_device()) {
      throw Error(std::string("trainkit: ") + Derived::stable_name(std::type_identity<Derived>{}) +
                  "::step_unless_inf: call make_capturable() first (capture::CudaGraph does)");
    }
    self().template step_as<at::Tensor>(found_inf);
  }
  int64_t steps_taken() const { return steps_.counts().total; }

 protected:
  /// The step over scalars S: Derived's step_buffer for each buffer.
  template <class S>
  void step_as(const at::Tensor& found_inf) {
    step_buffers<S>(found_inf, [this](size_t i, FlatGroup& g, InfSkip& skip) {
      self().template step_buffer<S>(i, g, skip);
    });
  }
  /// One step over scalars S: `buffer_step(i, flat buffer i, skip)` for
  /// each buffer whose group is not frozen (no step, no state change), then
  /// the skip applied.
  template <class S, class BufferStep>
  void step_buffers(const at::Tensor& found_inf, BufferStep&& buffer_step) {
    torch::NoGradGuard no_grad;
    InfSkip skip(found_inf);
    steps_.template advance_total<S>(skip);
    auto groups = params_->groups();
    for (size_t i = 0; i < groups.size(); ++i)
      if (!params_->frozen(groups[i].param_group)) buffer_step(i, groups[i], skip);
    skip.finish();
  }

  template <class Resolve>
  CapturableOptimizer(FlatParams& params, const O& options, Resolve&& resolve)
      : GroupedOptions<O>(params, options, resolve),
        params_(&params),
        steps_(params.groups().size()) {}

  FlatParams* params_;
  Steps steps_;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

}  // namespace trainkit::detail
