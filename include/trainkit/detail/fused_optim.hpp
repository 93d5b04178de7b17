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
#include <vector>

#include "trainkit/detail/compat.hpp"
#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"

namespace trainkit::detail {

/// An optimizer's `fused` option for parameters on `device`: unset means the
/// fused kernel on CUDA where LibTorch has it (trainkit's own CPU kernels are
/// faster there and bit-identical to torch.optim's default), true asks for it
/// everywhere, false never.
TRAINKIT_INLINE bool resolve_fused(std::optional<bool> fused, const at::Device& device);

/// The per-step values a fused kernel reads besides the buffers.
struct FusedStepInputs {
  double lr;             ///< used when lr_tensor is undefined (as torch.optim with a float lr)
  at::Tensor lr_tensor;  ///< a 1-element float tensor on the device: capturable
  at::Tensor step;       ///< float step count, already incremented
  at::Tensor found_inf;  ///< when defined and nonzero, the kernel changes nothing
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
  std::vector<at::Tensor> vmax;
  if (h.amsgrad) vmax.push_back(max_exp_avg_sq);
  const std::optional<at::Tensor> no_scale;
  const auto inf = in.found_inf.defined() ? std::optional<at::Tensor>(in.found_inf) : std::nullopt;
  using L = at::TensorList;  // one flat buffer each
  const auto run = [&](auto kernel) {
    if (in.lr_tensor.defined()) {
      kernel(L(param), L(grad), L(exp_avg), L(exp_avg_sq), L(vmax), L(in.step), in.lr_tensor,
             h.beta1, h.beta2, h.weight_decay, h.eps, h.amsgrad, /*maximize=*/false, no_scale, inf);
    } else {
      kernel(L(param), L(grad), L(exp_avg), L(exp_avg_sq), L(vmax), L(in.step), in.lr, h.beta1,
             h.beta2, h.weight_decay, h.eps, h.amsgrad, /*maximize=*/false, no_scale, inf);
    }
  };
  if (h.decoupled) {
    run([](auto&&... a) { at::_fused_adamw_(a...); });
  } else {
    run([](auto&&... a) { at::_fused_adam_(a...); });
  }
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
  std::vector<at::Tensor> buffers;
  if (momentum_buffer.defined()) buffers.push_back(momentum_buffer);
  const std::optional<at::Tensor> no_scale;
  const auto inf = in.found_inf.defined() ? std::optional<at::Tensor>(in.found_inf) : std::nullopt;
  using L = at::TensorList;
  if (in.lr_tensor.defined()) {
    at::_fused_sgd_(L(param), L(grad), buffers, h.weight_decay, h.momentum, in.lr_tensor,
                    h.dampening, h.nesterov, h.maximize, h.first_step, no_scale, inf);
  } else {
    at::_fused_sgd_(L(param), L(grad), buffers, h.weight_decay, h.momentum, in.lr, h.dampening,
                    h.nesterov, h.maximize, h.first_step, no_scale, inf);
  }
#else
  throw Error("trainkit: fused optimizer kernels need LibTorch >= 2.4");
#endif
}

#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
