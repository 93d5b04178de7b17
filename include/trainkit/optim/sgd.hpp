#pragma once
// optim::SGD: stochastic gradient descent with momentum, dampening, Nesterov
// and L2 weight decay, as torch.optim.SGD, stepping the flat buffers at once;
// each parameter group with its own hyperparameters.
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"
#include "trainkit/optim/detail/fused_optim.hpp"
#include "trainkit/optim/detail/group_options.hpp"
#include "trainkit/optim/detail/sgd_kernel.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::optim {

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
  /// ATen's fused kernel (torch.optim's fused=True; LibTorch >= 2.4). Unset:
  /// fused on CUDA, trainkit's own kernel on CPUs; true: fused everywhere.
  std::optional<bool> fused{};
};

class SGD : public detail::GroupedOptions<SGDOptions> {
 public:
  static constexpr const char* stable_name(std::type_identity<SGD>) {
    return "trainkit::optim::SGD";
  }
  using Options = SGDOptions;

  SGD(FlatParams& params, const Options& options);

  void step();

  /// ATen's fused kernel steps the buffers (the `fused` option).
  bool fused() const { return fused_; }
  /// Whether a CUDA graph can capture step_unless_inf (after make_capturable;
  /// the first step with momentum makes the buffers, so it runs eagerly).
  bool capturable() const { return fused_; }
  /// The kernel reads the learning rate from the device from now on
  /// (detail::DeviceLr).
  void make_capturable();
  /// A step that changes nothing where `found_inf` is nonzero, without host
  /// reads. Needs fused().
  void step_unless_inf(const at::Tensor& found_inf);

  /// A captured step has the momentum baked in, and makes no buffer: not
  /// before every momentum buffer exists (the first step with momentum ran).
  bool ready_to_capture() const {
    const auto groups = params_->groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      if (group_[groups[i].param_group].momentum != 0.0 && !momentum_[i].defined()) return false;
    }
    return true;
  }

  double momentum() const { return group_.front().momentum; }
  /// A schedule's momentum cycling sets every group's.
  void set_momentum(double m) { set_all(&Options::momentum, m); }
  std::vector<at::Tensor>& momentum_buffers() { return momentum_; }

  StateDict state_dict() const;
  /// The state tensors that follow the flat parameters element by element
  /// (listed before the first step makes them, so a resume can shard them).
  ElementwiseState elementwise_state() const;
  void load_state_dict(const StateDict& d);
  /// Bytes held between steps besides the state (the unfused step's buffers).
  int64_t workspace_bytes() const {
    int64_t bytes = 0;
    for (const auto& t : scratch_) bytes += t.defined() ? int64_t(t.nbytes()) : 0;
    return bytes;
  }

 private:
  static std::string buffer_name(size_t group) {
    return "momentum_buffer." + std::to_string(group);
  }
  void fused_step(const at::Tensor& found_inf);
  static void check(const Options& o, const std::string& prefix);
  /// The optimizer's options with a group's overrides, checked.
  static Options resolve(Options o, const GroupOptions& g, size_t param_group);

  FlatParams* params_;
  bool fused_;
  std::vector<at::Tensor> momentum_;
  std::vector<at::Tensor> scratch_;
};

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE void SGD::check(const Options& o, const std::string& prefix) {
  using detail::require_option;
  require_option(o.lr >= 0.0, prefix + ".lr", o.lr, "a number >= 0");
  require_option(o.momentum >= 0.0, prefix + ".momentum", o.momentum, "a number >= 0");
  require_option(o.weight_decay >= 0.0, prefix + ".weight_decay", o.weight_decay, "a number >= 0");
  require_option(!o.nesterov || (o.momentum > 0.0 && o.dampening == 0.0), prefix + ".nesterov",
                 o.nesterov, "true only with momentum > 0 and dampening == 0");
}

TRAINKIT_INLINE SGD::Options SGD::resolve(Options o, const GroupOptions& g, size_t param_group) {
  const char* accepted = "lr, lr_scale, weight_decay, momentum, dampening, nesterov";
  detail::refuse_group_option(g.beta1, param_group, "beta1", "optim::SGD", accepted);
  detail::refuse_group_option(g.beta2, param_group, "beta2", "optim::SGD", accepted);
  detail::refuse_group_option(g.eps, param_group, "eps", "optim::SGD", accepted);
  detail::refuse_group_option(g.amsgrad, param_group, "amsgrad", "optim::SGD", accepted);
  detail::refuse_group_option(g.muon, param_group, "muon", "optim::SGD", accepted);
  detail::refuse_group_option(g.trust_ratio, param_group, "trust_ratio", "optim::SGD", accepted);
  o.lr = detail::group_lr(g, o.lr, param_group);
  o.weight_decay = g.weight_decay.value_or(o.weight_decay);
  o.momentum = g.momentum.value_or(o.momentum);
  o.dampening = g.dampening.value_or(o.dampening);
  o.nesterov = g.nesterov.value_or(o.nesterov);
  check(o, detail::group_prefix(param_group));
  return o;
}

TRAINKIT_INLINE SGD::SGD(FlatParams& params, const Options& options)
    : GroupedOptions(params, options, resolve),
      params_(&params) {  // group 0's resolve checks `optim`
  const auto groups = params.groups();
  fused_ = !groups.empty() && detail::resolve_fused(options.fused, groups.front().data.device());
  for (auto& g : groups) scratch_.push_back(fused_ ? at::Tensor() : at::empty_like(g.data));
  momentum_.resize(scratch_.size());
}

TRAINKIT_INLINE void SGD::make_capturable() {
  detail::require_fused(fused_, "a capturable step");
  make_rates_capturable(params_->groups().front().data);
}

TRAINKIT_INLINE void SGD::step_unless_inf(const at::Tensor& found_inf) {
  detail::require_fused(fused_, "a step without host reads");
  fused_step(found_inf);
}

TRAINKIT_INLINE void SGD::fused_step(const at::Tensor& found_inf) {
  const auto groups = params_->groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const size_t g = groups[i].param_group;
    if (params_->frozen(g)) continue;  // no step, no state change
    const auto& o = group_[g];
    const bool with_momentum = o.momentum != 0.0;
    const bool first = with_momentum && !momentum_[i].defined();
    if (first) momentum_[i] = at::empty_like(groups[i].data);  // the kernel copies the gradient in
    detail::fused_sgd_step(
        groups[i].data, groups[i].grad, with_momentum ? momentum_[i] : at::Tensor(),
        {o.lr, device_lr(g), at::Tensor(), found_inf},
        {o.momentum, o.dampening, o.weight_decay, o.nesterov, o.maximize, first});
  }
}

TRAINKIT_INLINE void SGD::step() {
  if (fused_) return fused_step(at::Tensor());
  const auto groups = params_->groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    // Like torch.optim.SGD, the buffer is born on the first step with momentum
    // (a schedule may switch momentum on later) as a copy of the gradient.
    if (params_->frozen(groups[i].param_group)) continue;  // no step, no state change
    const auto& o = group_[groups[i].param_group];
    const bool first = o.momentum != 0.0 && !momentum_[i].defined();
    if (first) momentum_[i] = at::empty_like(groups[i].data);
    detail::sgd_step(
        groups[i].data, groups[i].grad, momentum_[i], scratch_[i],
        {o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, o.maximize, first});
  }
}

TRAINKIT_INLINE StateDict SGD::state_dict() const {
  StateDict d;
  save_field(d, "momentum", &Options::momentum);  // may be cycled by a schedule
  for (size_t i = 0; i < momentum_.size(); ++i) {
    if (momentum_[i].defined()) d.tensors[buffer_name(i)] = momentum_[i];
  }
  return d;
}

TRAINKIT_INLINE ElementwiseState SGD::elementwise_state() const {
  ElementwiseState out;
  for (size_t i = 0; i < params_->groups().size(); ++i) out[buffer_name(i)] = i;
  return out;
}

TRAINKIT_INLINE void SGD::load_state_dict(const StateDict& d) {
  const auto groups = params_->groups();
  std::vector<at::Tensor> buffers(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto name = buffer_name(i);
    // A copy on the parameters' device: checkpoints (and finders' snapshots) hold CPU tensors.
    if (d.tensors.count(name))
      buffers[i] = d.tensor_like(name, groups[i].data)
                       .to(groups[i].data.device(), /*non_blocking=*/false, /*copy=*/true);
  }
  const auto momentum = read_field(d, "momentum", &Options::momentum);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers[i].defined() || !momentum_[i].defined()) {
      momentum_[i] = buffers[i];
    } else {
      momentum_[i].copy_(buffers[i]);  // in place: a captured step keeps its buffers
    }
  }
  assign_field(&Options::momentum, momentum);
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::optim
