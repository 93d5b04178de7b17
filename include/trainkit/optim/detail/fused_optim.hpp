#pragma once
// ATen's fused optimizer kernels, the ones torch.optim's `fused=True` calls,
// on trainkit's flat buffers: one launch per buffer on CUDA. They exist from
// LibTorch 2.4 (TRAINKIT_HAS_FUSED_OPTIMIZERS), on CUDA and on CPUs. Given
// the learning rate as a device tensor, a step count on the device and a
// device flag that skips the update (found_inf), a step reads nothing from
// the host, so a CUDA graph can capture it.
#include <torch/types.h>
#include <torch/version.h>

#include <optional>
#include <string>
#include <string_view>

#include "trainkit/detail/compat.hpp"
#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"

namespace trainkit::detail {

/// An optimizer's `fused` option for parameters on `device`: unset means the
/// fused kernel on CUDA where LibTorch has it (trainkit's own CPU kernels are
/// faster there and bit-identical to torch.optim's default), true asks for it
/// everywhere, false never.
TRAINKIT_INLINE bool resolve_fused(std::optional<bool> fused, const at::Device& device);

/// A fused optimizer's capturable calls need its `fused` option on.
inline void require_fused(bool fused, std::string_view what) {
  if (!fused) require_option(false, "optim.fused", false, "true for " + std::string(what));
}

/// The learning rate as a fused kernel reads it once the step is capturable:
/// a float32 tensor on the parameters' device that each set() keeps current,
/// so a captured step sees every new value. Until make_capturable() the
/// kernel takes the number, which is what makes eager steps bitwise
/// torch.optim's fused=True with a float lr.
class DeviceLr {
 public:
  void make_capturable(double lr, const at::Tensor& like) {
    if (!tensor_.defined()) tensor_ = at::full({}, lr, like.options().dtype(at::kFloat));
  }
  void set(double lr) {
    if (tensor_.defined()) tensor_.fill_(lr);
  }
  const at::Tensor& tensor() const { return tensor_; }

 private:
  at::Tensor tensor_;
};

/// The per-step values a fused kernel reads besides the buffers.
struct FusedStepInputs {
  double lr;             ///< used when lr_tensor is undefined (as torch.optim with a float lr)
  at::Tensor lr_tensor;  ///< a 1-element float tensor on the device: capturable
  at::Tensor step;       ///< float step count, already incremented
  at::Tensor found_inf;  ///< when defined and nonzero, the kernel changes nothing

  /// Calls `kernel(lr, found_inf)` with both as the ATen kernels take them.
  template <class Kernel>
  void call(Kernel&& kernel) const {
    const auto inf = found_inf.defined() ? std::optional<at::Tensor>(found_inf) : std::nullopt;
    if (lr_tensor.defined()) {
      kernel(lr_tensor, inf);
    } else {
      kernel(lr, inf);
    }
  }
};

struct FusedAdamHyper {
  double beta1, beta2, eps, weight_decay;
  bool decoupled, amsgrad;
};

/// One fused Adam (or AdamW) step of one flat buffer.
TRAINKIT_INLINE void fused_adam_step(const at::Tensor& param, const at::Tensor& grad,
                                     const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                                     const at::Tensor& max_exp_avg_sq, const FusedStepInputs& in,
                                     const FusedAdamHyper& h);

struct FusedSgdHyper {
  double momentum, dampening, weight_decay;
  bool nesterov, maximize, first_step;
};

/// One fused SGD step of one flat buffer; `momentum_buffer` is undefined
/// without momentum.
TRAINKIT_INLINE void fused_sgd_step(const at::Tensor& param, const at::Tensor& grad,
                                    const at::Tensor& momentum_buffer, const FusedStepInputs& in,
                                    const FusedSgdHyper& h);

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE bool resolve_fused(std::optional<bool> fused, const at::Device& device) {
  if (!fused.has_value()) return TRAINKIT_HAS_FUSED_OPTIMIZERS && device.is_cuda();
  require_option(!*fused || TRAINKIT_HAS_FUSED_OPTIMIZERS, "optim.fused", *fused,
                 "false or unset with LibTorch " TORCH_VERSION
                 " (ATen's fused optimizer kernels need LibTorch >= 2.4)");
  return *fused;
}

TRAINKIT_INLINE void fused_adam_step([[maybe_unused]] const at::Tensor& param,
                                     [[maybe_unused]] const at::Tensor& grad,
                                     [[maybe_unused]] const at::Tensor& exp_avg,
                                     [[maybe_unused]] const at::Tensor& exp_avg_sq,
                                     [[maybe_unused]] const at::Tensor& max_exp_avg_sq,
                                     [[maybe_unused]] const FusedStepInputs& in,
                                     [[maybe_unused]] const FusedAdamHyper& h) {
#if TRAINKIT_HAS_FUSED_OPTIMIZERS
  using L = at::TensorList;  // one flat buffer each, or none
  const L vmax = h.amsgrad ? L(max_exp_avg_sq) : L();
  in.call([&](const auto& lr, const std::optional<at::Tensor>& inf) {
    const auto step = [&](auto kernel) {
      kernel(L(param), L(grad), L(exp_avg), L(exp_avg_sq), vmax, L(in.step), lr, h.beta1, h.beta2,
             h.weight_decay, h.eps, h.amsgrad, /*maximize=*/false, /*grad_scale=*/std::nullopt,
             inf);
    };
    if (h.decoupled) {
      step([](auto&&... a) { at::_fused_adamw_(a...); });
    } else {
      step([](auto&&... a) { at::_fused_adam_(a...); });
    }
  });
#else
  throw Error("trainkit: fused optimizer kernels need LibTorch >= 2.4");
#endif
}

TRAINKIT_INLINE void fused_sgd_step([[maybe_unused]] const at::Tensor& param,
                                    [[maybe_unused]] const at::Tensor& grad,
                                    [[maybe_unused]] const at::Tensor& momentum_buffer,
                                    [[maybe_unused]] const FusedStepInputs& in,
                                    [[maybe_unused]] const FusedSgdHyper& h) {
#if TRAINKIT_HAS_FUSED_OPTIMIZERS
  using L = at::TensorList;
  const L buffers = momentum_buffer.defined() ? L(momentum_buffer) : L();
  in.call([&](const auto& lr, const std::optional<at::Tensor>& inf) {
    at::_fused_sgd_(L(param), L(grad), buffers, h.weight_decay, h.momentum, lr, h.dampening,
                    h.nesterov, h.maximize, h.first_step, /*grad_scale=*/std::nullopt, inf);
  });
#else
  throw Error("trainkit: fused optimizer kernels need LibTorch >= 2.4");
#endif
}

#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
