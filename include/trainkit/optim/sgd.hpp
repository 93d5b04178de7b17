#pragma once
// optim::SGD: stochastic gradient descent with momentum, dampening, Nesterov
// and L2 weight decay, as torch.optim.SGD, stepping the flat buffers at once.
#include <optional>
#include <type_traits>
#include <vector>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"
#include "trainkit/optim/detail/fused_optim.hpp"
#include "trainkit/optim/detail/sgd_kernel.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::optim {

class SGD {
 public:
  static constexpr const char* stable_name(std::type_identity<SGD>) {
    return "trainkit::optim::SGD";
  }
  struct Options {
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

  double lr() const { return options_.lr; }
  void set_lr(double lr) {
    options_.lr = lr;
    lr_.set(lr);
  }
  /// A captured step has the momentum baked in, and makes no buffer: not
  /// before every momentum buffer exists (the first step with momentum ran).
  bool ready_to_capture() const {
    if (options_.momentum == 0.0) return true;
    for (const auto& b : momentum_) {
      if (!b.defined()) return false;
    }
    return true;
  }

  double momentum() const { return options_.momentum; }
  void set_momentum(double m) { options_.momentum = m; }
  const Options& options() const { return options_; }
  std::vector<at::Tensor>& momentum_buffers() { return momentum_; }

  StateDict state_dict() const;
  /// The state tensors that follow the flat parameters element by element
  /// (listed before the first step makes them, so a resume can shard them).
  ElementwiseState elementwise_state() const;
  void load_state_dict(const StateDict& d);

 private:
  static std::string buffer_name(size_t group) {
    return "momentum_buffer." + std::to_string(group);
  }
  void fused_step(const at::Tensor& found_inf);

  FlatParams* params_;
  Options options_;
  bool fused_;
  std::vector<at::Tensor> momentum_;
  std::vector<at::Tensor> scratch_;
  detail::DeviceLr lr_;
};

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE SGD::SGD(FlatParams& params, const Options& options)
    : params_(&params), options_(options) {
  using detail::require_option;
  require_option(options.lr >= 0.0, "optim.lr", options.lr, "a number >= 0");
  require_option(options.momentum >= 0.0, "optim.momentum", options.momentum, "a number >= 0");
  require_option(options.weight_decay >= 0.0, "optim.weight_decay", options.weight_decay,
                 "a number >= 0");
  require_option(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
                 "optim.nesterov", options.nesterov,
                 "true only with momentum > 0 and dampening == 0");
  const auto groups = params.groups();
  fused_ = !groups.empty() && detail::resolve_fused(options.fused, groups.front().data.device());
  for (auto& g : groups) scratch_.push_back(fused_ ? at::Tensor() : at::empty_like(g.data));
  momentum_.resize(scratch_.size());
}

TRAINKIT_INLINE void SGD::make_capturable() {
  detail::require_fused(fused_, "a capturable step");
  lr_.make_capturable(options_.lr, params_->groups().front().data);
}

TRAINKIT_INLINE void SGD::step_unless_inf(const at::Tensor& found_inf) {
  detail::require_fused(fused_, "a step without host reads");
  fused_step(found_inf);
}

TRAINKIT_INLINE void SGD::fused_step(const at::Tensor& found_inf) {
  const auto groups = params_->groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    const bool with_momentum = options_.momentum != 0.0;
    const bool first = with_momentum && !momentum_[i].defined();
    if (first) momentum_[i] = at::empty_like(groups[i].data);  // the kernel copies the gradient in
    detail::fused_sgd_step(groups[i].data, groups[i].grad,
                           with_momentum ? momentum_[i] : at::Tensor(),
                           {options_.lr, lr_.tensor(), at::Tensor(), found_inf},
                           {options_.momentum, options_.dampening, options_.weight_decay,
                            options_.nesterov, options_.maximize, first});
  }
}

TRAINKIT_INLINE void SGD::step() {
  if (fused_) return fused_step(at::Tensor());
  const auto groups = params_->groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    // Like torch.optim.SGD, the buffer is born on the first step with momentum
    // (a schedule may switch momentum on later) as a copy of the gradient.
    const bool first = options_.momentum != 0.0 && !momentum_[i].defined();
    if (first) momentum_[i] = at::empty_like(groups[i].data);
    detail::sgd_step(groups[i].data, groups[i].grad, momentum_[i], scratch_[i],
                     {options_.lr, options_.momentum, options_.dampening, options_.weight_decay,
                      options_.nesterov, options_.maximize, first});
  }
}

TRAINKIT_INLINE StateDict SGD::state_dict() const {
  StateDict d;
  d.values["momentum"] = options_.momentum;  // may be cycled by a schedule
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
  const auto momentum = d.value<double>("momentum");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers[i].defined() || !momentum_[i].defined()) {
      momentum_[i] = buffers[i];
    } else {
      momentum_[i].copy_(buffers[i]);  // in place: a captured step keeps its buffers
    }
  }
  options_.momentum = momentum;
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::optim
