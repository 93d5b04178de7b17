#pragma once
// optim::Lars: SGD with momentum whose step is rescaled per parameter by a
// trust ratio (You, Gitman and Ginsburg, 2017, "Large Batch Training of
// Convolutional Networks", Algorithm 1), for large batches of convolutional
// nets. Per parameter tensor W with gradient G:
//   r = trust_coefficient |W| / (|G| + weight_decay |W| + eps)
//       (1 where |W| or |G| is 0; with trust_clip, min(r / lr, 1): LARC)
//   D = r (G + weight_decay W)
//   B = momentum B + (1 - dampening) D  (B = D at the first step)
//   W = W - lr (nesterov ? D + momentum B : B)
// The learning rate stays outside the momentum, as in torch.optim.SGD and
// timm's Lars (the paper puts it inside; the two agree while it is
// constant). Groups marked trust_ratio = false step by SGD with weight
// decay (params::no_trust_ratio(): biases and norms, as the paper).
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

struct LarsOptions {
  double lr = 0.1;
  double momentum = 0.9;
  double dampening = 0.0;
  double weight_decay = 1e-4;
  bool nesterov = false;
  double trust_coefficient = 1e-3;  ///< the paper's eta
  double eps = 1e-8;
  bool trust_clip = false;  ///< LARC's clipping: the ratio over lr, at most 1
};

class Lars : public detail::CapturableOptimizer<Lars, LarsOptions> {
 public:
  static constexpr const char* stable_name(std::type_identity<Lars>) {
    return "trainkit::optim::Lars";
  }
  using Options = LarsOptions;

  Lars(FlatParams& params, const Options& options) : CapturableOptimizer(params, options, resolve) {
    for (const auto& g : params.groups()) {
      momentum_.push_back(at::zeros_like(g.data));
      update_.push_back(at::empty_like(g.data));
      trust_.push_back(params.param_groups()[g.param_group].options.trust_ratio.value_or(true));
      lengths_.push_back(trust_.back() ? detail::lengths_on_device(g) : at::Tensor());
    }
  }

  /// A buffer's first step copies its momentum in on the host's word: the
  /// step is recorded once every trainable buffer has taken it.
  bool ready_to_capture() const {
    const auto groups = params_->groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const size_t p = groups[i].param_group;
      if (!params_->frozen(p) && group_[p].momentum != 0.0 && !steps_.stepped(i)) return false;
    }
    return true;
  }

  /// OneCycle's momentum cycling drives every group's.
  double momentum() const { return group_.front().momentum; }
  void set_momentum(double m) { set_all(&Options::momentum, m); }

  StateDict state_dict() const {
    StateDict d;
    steps_.counts().save(d);
    save_field(d, "momentum", &Options::momentum);  // may be cycled by a schedule
    for (size_t i = 0; i < momentum_.size(); ++i)
      d.tensors["momentum_buffer." + std::to_string(i)] = momentum_[i];
    return d;
  }
  /// The state tensors that follow the flat parameters element by element.
  ElementwiseState elementwise_state() const {
    ElementwiseState out;
    for (size_t i = 0; i < momentum_.size(); ++i) out["momentum_buffer." + std::to_string(i)] = i;
    return out;
  }
  std::vector<std::string> per_group_values() const { return {"steps"}; }
  void load_state_dict(const StateDict& d) {
    std::vector<at::Tensor> buffers;  // check all, then assign
    for (size_t i = 0; i < momentum_.size(); ++i)
      buffers.push_back(d.tensor_like("momentum_buffer." + std::to_string(i), momentum_[i]));
    const auto steps = detail::StepCounts::read(d, steps_.buffers());
    const auto momentum = read_field(d, "momentum", &Options::momentum);
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < buffers.size(); ++i) momentum_[i].copy_(buffers[i]);
    steps_.assign(steps);
    assign_field(&Options::momentum, momentum);
  }

 private:
  friend CapturableOptimizer;

  /// Flat buffer i's step, with scalars S: double on the host, 0-d
  /// tensors on the device (called for each buffer not frozen).
  template <class S>
  void step_buffer(size_t i, FlatGroup& g, detail::InfSkip& skip) {
    using namespace detail;
    const auto& o = group_[g.param_group];
    const S lr = rate<S>(g.param_group);
    auto& d = update_[i];  // kept between steps: no allocation per step
    at::add_out(d, g.grad, g.data, o.weight_decay);
    if (trust_[i]) {
      const auto norms = parameter_norms(*params_, g, {g.data, g.grad});
      const auto& w = norms[0];
      auto ratio = o.trust_coefficient * w / (norms[1] + w * o.weight_decay + o.eps);
      ratio = ratio_or_one(ratio, w, norms[1]);
      if (o.trust_clip) ratio = at::clamp_max(ratio / lr, 1.0);
      scale_per_parameter(g, lengths_[i], d, ratio);
    }
    auto& buffer = momentum_[i];
    if (o.momentum != 0.0) {
      skip.keep(buffer);
      if (!steps_.stepped(i)) {
        buffer.copy_(d);
      } else {
        buffer.mul_(o.momentum).add_(d, 1.0 - o.dampening);
      }
      if (o.nesterov) d.add_(buffer, o.momentum);
    }
    steps_.advance<S>(i, skip);
    skip.keep(g.data);
    add_scaled(g.data, o.momentum != 0.0 && !o.nesterov ? buffer : d, -lr);
  }

  static Options resolve(Options o, const GroupOptions& g, size_t param_group) {
    using detail::refuse_group_option;
    const char* accepted = "lr, lr_scale, weight_decay, momentum, dampening, nesterov, trust_ratio";
    refuse_group_option(g.beta1, param_group, "beta1", "optim::Lars", accepted);
    refuse_group_option(g.beta2, param_group, "beta2", "optim::Lars", accepted);
    refuse_group_option(g.eps, param_group, "eps", "optim::Lars", accepted);
    refuse_group_option(g.amsgrad, param_group, "amsgrad", "optim::Lars", accepted);
    refuse_group_option(g.muon, param_group, "muon", "optim::Lars", accepted);
    o.lr = detail::group_lr(g, o.lr, param_group);
    o.weight_decay = g.weight_decay.value_or(o.weight_decay);
    o.momentum = g.momentum.value_or(o.momentum);
    o.dampening = g.dampening.value_or(o.dampening);
    o.nesterov = g.nesterov.value_or(o.nesterov);
    const auto prefix = detail::group_prefix(param_group);
    using detail::require_option;
    require_option(std::isfinite(o.lr) && o.lr >= 0.0, prefix + ".lr", o.lr,
                   "a finite number >= 0");
    require_option(o.momentum >= 0.0 && o.momentum < 1.0, prefix + ".momentum", o.momentum,
                   "0 <= momentum < 1");
    require_option(o.weight_decay >= 0.0, prefix + ".weight_decay", o.weight_decay,
                   "a number >= 0");
    require_option(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), prefix + ".nesterov",
                   "true", "false unless momentum > 0 and dampening = 0 (as torch.optim.SGD)");
    require_option(o.trust_coefficient > 0.0, prefix + ".trust_coefficient", o.trust_coefficient,
                   "a number > 0");
    require_option(o.eps >= 0.0, prefix + ".eps", o.eps, "a number >= 0");
    return o;
  }

  std::vector<at::Tensor> momentum_, update_;
  std::vector<char> trust_;          ///< per flat buffer: its group's trust_ratio
  std::vector<at::Tensor> lengths_;  ///< per flat buffer: its parameters' lengths, on its device
};

}  // namespace trainkit::optim
