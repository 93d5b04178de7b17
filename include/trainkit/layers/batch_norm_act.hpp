#pragma once
// Batch norm fused with ReLU, and with the residual add before the ReLU
// (opt-in): relu(batch_norm(x) [+ residual]) with the normalisation, the add
// and the ReLU in one pass over memory forward (after the statistics pass)
// and two passes backward, where the unfused modules take more. Drop-in for
// torch::nn::BatchNorm2d: the same options, the same state-dict names
// (weight, bias, running_mean, running_var, num_batches_tracked), the running
// statistics updated as it updates them, so weights load either way.
//
// On CUDA, channels-last fp32/fp16/bf16 tensors run trainkit's own kernels
// when the program links trainkit::cuda_kernels (nvcc-compiled; it defines
// TRAINKIT_HAS_FUSED_KERNELS). Everything else, CPUs included, runs the same
// formulas as ATen operations: correct everywhere, fast where the kernels are.
#include <torch/autograd.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/common.h>
#include <torch/nn/modules/container/any_value.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "trainkit/detail/norm_tag.hpp"
#include "trainkit/error.hpp"
#ifndef TRAINKIT_HAS_FUSED_KERNELS
#define TRAINKIT_HAS_FUSED_KERNELS 0
#endif
#if TRAINKIT_HAS_FUSED_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "trainkit/layers/detail/batch_norm_act_launch.hpp"
#endif

namespace trainkit::layers {
namespace detail {

/// What backward needs, beside the saved tensors.
struct BatchNormActConfig {
  bool training = true;
  bool relu = true;
  bool residual = false;
  bool weight = true;  ///< which gradients backward returns
  bool bias = true;
};

/// The reduced dimensions: all but the channels (dimension 1).
inline std::vector<int64_t> reduced_dims(const at::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

/// A per-channel vector shaped to broadcast against x.
inline at::Tensor per_channel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<int64_t> shape(size_t(x.dim()), 1);
  shape[1] = -1;
  return v.view(shape);
}

inline at::ScalarType compute_type(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

/// The kernels' statistics: batch mean and 1/sqrt(var + eps), in the compute type.
inline std::pair<at::Tensor, at::Tensor> composite_stats(const at::Tensor& x, double eps) {
  auto [var, mean] = at::var_mean(x.to(compute_type(x)), reduced_dims(x), /*unbiased=*/false);
  return {mean, (var + eps).rsqrt()};
}

inline void update_running(const at::Tensor& running_mean, const at::Tensor& running_var,
                           const at::Tensor& mean, const at::Tensor& invstd, double momentum,
                           double eps, int64_t count) {
  if (!running_mean.defined()) return;
  at::NoGradGuard no_grad;
  const double unbias = count > 1 ? double(count) / double(count - 1) : 1.0;
  const auto var = (invstd.pow(-2) - eps) * unbias;
  running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
  running_var.mul_(1 - momentum).add_(var.to(running_var.scalar_type()), momentum);
}

inline at::Tensor composite_forward(const at::Tensor& x, const at::Tensor& residual,
                                    const at::Tensor& weight, const at::Tensor& bias,
                                    const at::Tensor& mean, const at::Tensor& invstd, bool relu) {
  const auto type = compute_type(x);
  auto scale = invstd.to(type);
  if (weight.defined()) scale = scale * weight.to(type);
  auto shift = -mean.to(type) * scale;
  if (bias.defined()) shift = shift + bias.to(type);
  auto y = x.to(type) * per_channel(scale, x) + per_channel(shift, x);
  if (residual.defined()) y = y + residual.to(type);
  if (relu) y = y.relu();
  return y.to(x.scalar_type());
}

/// Returns {grad_x, grad_weight, grad_bias, grad_residual}. grad_y2, when
/// defined, is the gradient from the output's second consumer (a fork).
inline std::vector<at::Tensor> composite_backward(const at::Tensor& grad_y,
                                                  const at::Tensor& grad_y2, const at::Tensor& y,
                                                  const at::Tensor& x, const at::Tensor& weight,
                                                  const at::Tensor& mean, const at::Tensor& invstd,
                                                  const BatchNormActConfig& config) {
  const auto type = compute_type(x);
  // the two parts added in the gradient's type, as autograd adds them
  auto g = (grad_y2.defined() ? grad_y + grad_y2 : grad_y).to(type);
  if (config.relu) g = g * (y > 0);
  const auto dims = reduced_dims(x);
  const auto centred = x.to(type) - per_channel(mean.to(type), x);
  const auto is = invstd.to(type);
  const auto sum_g = g.sum(dims), sum_gx = (g * centred).sum(dims);
  const auto a = weight.defined() ? weight.to(type) * is : is;
  auto dx = g * per_channel(a, x);
  if (config.training) {
    const double n = double(x.numel() / x.size(1));
    dx = dx - per_channel(a * sum_g / n, x) - centred * per_channel(a * is * is * sum_gx / n, x);
  }
  return {dx.to(x.scalar_type()),
          config.weight ? sum_gx * is : at::Tensor(),  // autograd casts to the parameter's type
          config.bias ? sum_g : at::Tensor(),
          config.residual ? g.to(x.scalar_type()) : at::Tensor()};
}

#if TRAINKIT_HAS_FUSED_KERNELS
inline bool aligned(const at::Tensor& t) {
  return !t.defined() || reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

inline std::optional<cuda::Scalar> kernel_type(at::ScalarType t) {
  if (t == at::kFloat) return cuda::Scalar::f32;
  if (t == at::kHalf) return cuda::Scalar::f16;
  if (t == at::kBFloat16) return cuda::Scalar::bf16;
  return std::nullopt;
}

/// NHWC (or N x C) in memory, so that it is rows x channels, row-major.
inline bool rows_by_channels(const at::Tensor& t) {
  return t.dim() == 2 ? t.is_contiguous()
                      : t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

// Read a float at a time: no alignment needed (FlatParams packs them unpadded).
inline bool float_vector(const at::Tensor& t, const at::Tensor& x) {
  return !t.defined() ||
         (t.scalar_type() == at::kFloat && t.is_contiguous() && t.device() == x.device());
}

inline const float* float_data(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<float>() : nullptr;
}

inline void check_launch(const char* error, const char* what, const at::Tensor& x) {
  if (!error) return;
  throw Error(std::string("trainkit: ") + what + " kernel failed on " +
              c10::toString(x.scalar_type()) + " " + c10::str(x.sizes()) + ": " + error +
              " (if it is \"no kernel image\": build trainkit::cuda_kernels with "
              "CMAKE_CUDA_ARCHITECTURES naming it)");
}

inline int multiprocessors() {
  return at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
}

/// The training forward's statistics by trainkit's kernels (mean, invstd),
/// for a tensor that fused_kernels_apply accepts.
inline std::pair<at::Tensor, at::Tensor> fused_stats(const at::Tensor& x, double eps) {
  const int64_t rows = x.numel() / x.size(1), channels = x.size(1);
  const auto type = *kernel_type(x.scalar_type());
  const int sms = multiprocessors();
  const auto floats = x.options().dtype(at::kFloat);
  auto mean = at::empty({channels}, floats), invstd = at::empty({channels}, floats);
  if (rows == 0) return {mean.fill_(NAN), invstd.fill_(NAN)};  // as the mean of nothing
  auto workspace = at::empty({cuda::stats_workspace_floats(rows, channels, type, sms)}, floats);
  cuda::StatsArgs a;
  a.x = x.data_ptr(), a.mean = mean.data_ptr<float>(), a.invstd = invstd.data_ptr<float>();
  a.workspace = workspace.data_ptr<float>(), a.eps = float(eps);
  a.rows = rows, a.channels = channels, a.type = type;
  check_launch(cuda::launch_stats(a, sms, at::cuda::getCurrentCUDAStream().stream()),
               "batch norm statistics", x);
  return {mean, invstd};
}
#endif

/// Whether trainkit's CUDA kernels run for these tensors (never without
/// TRAINKIT_HAS_FUSED_KERNELS): CUDA, rows x channels in memory (NHWC or
/// N x C), fp32/fp16/bf16 with fp32 parameters and statistics, 16-byte aligned.
inline bool fused_kernels_apply([[maybe_unused]] const at::Tensor& x,
                                [[maybe_unused]] const at::Tensor& residual,
                                [[maybe_unused]] const at::Tensor& weight,
                                [[maybe_unused]] const at::Tensor& bias,
                                [[maybe_unused]] const at::Tensor& running_mean,
                                [[maybe_unused]] const at::Tensor& running_var) {
#if TRAINKIT_HAS_FUSED_KERNELS
  const auto type = kernel_type(x.scalar_type());
  if (!x.is_cuda() || !type || !rows_by_channels(x) || !aligned(x) ||
      !cuda::supports(x.size(1), *type))
    return false;
  if (residual.defined() &&
      (residual.scalar_type() != x.scalar_type() || residual.sizes() != x.sizes() ||
       residual.device() != x.device() || !rows_by_channels(residual) || !aligned(residual)))
    return false;
  return float_vector(weight, x) && float_vector(bias, x) && float_vector(running_mean, x) &&
         float_vector(running_var, x);
#else
  return false;
#endif
}

/// relu(batch_norm(x) + residual) as one autograd node; backward uses the
/// saved input, output and statistics (the output is what the next layer
/// keeps anyway). With `fork`, the output is returned as two views: each
/// consumer's gradient reaches backward apart, which adds them.
struct BatchNormActFunction : torch::autograd::Function<BatchNormActFunction> {
  // The optional tensors as c10::optional: LibTorch 1.13's Function takes
  // no undefined tensor as an input.
  using Optional = c10::optional<at::Tensor>;
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x, const Optional& weight_,
                                                const Optional& bias_, const Optional& residual_,
                                                const Optional& running_mean_,
                                                const Optional& running_var_, bool training,
                                                double momentum, double eps, bool relu, bool fork) {
    const auto weight = weight_.value_or(at::Tensor()), bias = bias_.value_or(at::Tensor());
    const auto residual = residual_.value_or(at::Tensor());
    const auto running_mean = running_mean_.value_or(at::Tensor());
    const auto running_var = running_var_.value_or(at::Tensor());
    const BatchNormActConfig config{training, relu, residual.defined(), weight.defined(),
                                    bias.defined()};
    const int64_t count = x.numel() / x.size(1);
    at::Tensor mean, invstd, y;
#if TRAINKIT_HAS_FUSED_KERNELS
    if (fused_kernels_apply(x, residual, weight, bias, running_mean, running_var)) {
      const c10::cuda::CUDAGuard guard(x.device());
      if (training) {
        std::tie(mean, invstd) = fused_stats(x, eps);
      } else {
        // a copy: a training forward before this backward moves the buffer
        mean = running_mean.clone(), invstd = (running_var + eps).rsqrt();
      }
      y = at::empty_like(x);
      cuda::ForwardArgs a;
      a.x = x.data_ptr(), a.residual = residual.defined() ? residual.data_ptr() : nullptr;
      a.y = y.data_ptr(), a.mean = mean.data_ptr<float>(), a.invstd = invstd.data_ptr<float>();
      a.weight = float_data(weight), a.bias = float_data(bias);
      if (training && running_mean.defined()) {
        a.running_mean = running_mean.data_ptr<float>();
        a.running_var = running_var.data_ptr<float>();
      }
      a.momentum = float(momentum), a.eps = float(eps);
      a.unbias = count > 1 ? float(double(count) / double(count - 1)) : 1.f;
      a.rows = count, a.channels = x.size(1), a.type = *kernel_type(x.scalar_type());
      a.relu = relu;
      check_launch(
          cuda::launch_forward(a, multiprocessors(), at::cuda::getCurrentCUDAStream().stream()),
          "batch norm forward", x);
      ctx->saved_data["fused"] = true;
    }
#endif
    if (!y.defined()) {
      if (training) {
        std::tie(mean, invstd) = composite_stats(x, eps);
        update_running(running_mean, running_var, mean, invstd, momentum, eps, count);
      } else {
        mean = running_mean.to(compute_type(x), /*non_blocking=*/false, /*copy=*/true);
        invstd = (running_var.to(compute_type(x)) + eps).rsqrt();
      }
      y = composite_forward(x, residual, weight, bias, mean, invstd, relu);
      ctx->saved_data["fused"] = false;
    }
    // the output only for the ReLU's mask (a plain batch norm saves none)
    ctx->save_for_backward({x, weight, mean, invstd, relu ? y : at::Tensor()});
    ctx->saved_data["training"] = training;
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["residual"] = config.residual;
    ctx->saved_data["weight"] = config.weight;
    ctx->saved_data["bias"] = config.bias;
    // an output nobody differentiates gets no gradient, not a tensor of zeros
    ctx->set_materialize_grads(false);
    // a fork: two views of y, so that autograd refuses an in-place change to either
    if (fork) return {y.alias(), y.alias()};
    return {y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3],
               &y = saved[4];
    // Second derivatives would treat the statistics as constants: refused.
    if (torch::GradMode::is_enabled())
      throw Error(
          "trainkit: batch_norm_relu has no double backward (create_graph = true); "
          "accepted: first-order gradients, or the unfused modules");
    const BatchNormActConfig config{
        ctx->saved_data["training"].toBool(), ctx->saved_data["relu"].toBool(),
        ctx->saved_data["residual"].toBool(), ctx->saved_data["weight"].toBool(),
        ctx->saved_data["bias"].toBool()};
    // the gradients of the output's uses (one, or a fork's two), the defined ones first
    std::vector<at::Tensor> dy;
    for (const auto& grad : grads)
      if (grad.defined()) dy.push_back(grad);
    constexpr size_t inputs = 11;
    if (dy.empty()) return torch::autograd::variable_list(inputs);
    const at::Tensor dy2 = dy.size() > 1 ? dy[1] : at::Tensor();
    std::vector<at::Tensor> g;
#if TRAINKIT_HAS_FUSED_KERNELS
    if (ctx->saved_data["fused"].toBool())
      g = fused_backward(dy[0], dy2, y, x, weight, mean, invstd, config);
#endif
    if (g.empty()) g = composite_backward(dy[0], dy2, y, x, weight, mean, invstd, config);
    g.resize(inputs);  // none for the running statistics and the options
    return g;
  }

#if TRAINKIT_HAS_FUSED_KERNELS
  static std::vector<at::Tensor> fused_backward(const at::Tensor& grad_y, const at::Tensor& grad_y2,
                                                const at::Tensor& y, const at::Tensor& x,
                                                const at::Tensor& weight, const at::Tensor& mean,
                                                const at::Tensor& invstd,
                                                const BatchNormActConfig& config) {
    const c10::cuda::CUDAGuard guard(x.device());
    // The incoming gradients may have any layout or offset: the kernels read
    // them as x's, 16 bytes at a time.
    const auto readable = [&](const at::Tensor& g) {
      if (!g.defined() || (rows_by_channels(g) && aligned(g) && g.scalar_type() == x.scalar_type()))
        return g;
      return at::empty_like(x).copy_(g);
    };
    const auto dy = readable(grad_y), dy2 = readable(grad_y2);
    const int64_t rows = x.numel() / x.size(1), channels = x.size(1);
    const int sms = multiprocessors();
    const auto type = *kernel_type(x.scalar_type());
    const auto floats = x.options().dtype(at::kFloat);
    auto workspace =
        at::empty({cuda::backward_workspace_floats(rows, channels, type, sms)}, floats);
    at::Tensor dx = at::empty_like(x), dw, db, dr;
    if (config.weight) dw = at::empty({channels}, floats);
    if (config.bias) db = at::empty({channels}, floats);
    if (config.residual) dr = at::empty_like(x);
    cuda::BackwardArgs a;
    a.grad_y = dy.data_ptr(), a.grad_y2 = dy2.defined() ? dy2.data_ptr() : nullptr;
    a.y = y.defined() ? y.data_ptr() : nullptr, a.x = x.data_ptr();
    a.mean = mean.data_ptr<float>(), a.invstd = invstd.data_ptr<float>();
    a.weight = float_data(weight), a.grad_weight = dw.defined() ? dw.data_ptr<float>() : nullptr;
    a.grad_bias = db.defined() ? db.data_ptr<float>() : nullptr;
    a.grad_x = dx.data_ptr(), a.grad_residual = dr.defined() ? dr.data_ptr() : nullptr;
    a.workspace = workspace.data_ptr<float>();
    a.rows = rows, a.channels = channels, a.type = type;
    a.relu = config.relu, a.training = config.training;
    check_launch(cuda::launch_backward(a, sms, at::cuda::getCurrentCUDAStream().stream()),
                 "batch norm backward", x);
    return {dx, dw, db, dr};
  }
#endif
};

}  // namespace detail

namespace functional {
namespace detail {

/// batch_norm_relu's checks, then its autograd node (one output, or a fork's two).
inline torch::autograd::variable_list checked_batch_norm_relu(
    const at::Tensor& input, const at::Tensor& running_mean, const at::Tensor& running_var,
    const at::Tensor& weight, const at::Tensor& bias, bool training, double momentum, double eps,
    const at::Tensor& residual, bool relu, bool fork) {
  const auto refuse = [](const std::string& what, const std::string& accepted) {
    throw Error("trainkit: batch_norm_relu: " + what + "; accepted: " + accepted);
  };
  if (input.dim() < 2 || input.size(1) == 0)
    refuse("input of shape " + c10::str(input.sizes()), "(N, C, ...) with C > 0");
  const int64_t channels = input.size(1);
  const std::pair<const char*, const at::Tensor*> vectors[] = {{"weight", &weight},
                                                               {"bias", &bias},
                                                               {"running_mean", &running_mean},
                                                               {"running_var", &running_var}};
  for (const auto& [name, t] : vectors) {
    if (t->defined() && (t->numel() != channels || t->device() != input.device()))
      refuse(
          std::string(name) + " of shape " + c10::str(t->sizes()) + " on " + t->device().str(),
          std::to_string(channels) + " values (the input's channels) on " + input.device().str());
  }
  if (running_mean.defined() != running_var.defined())
    refuse("running_mean without running_var or the reverse", "both or neither");
  if (!training && !running_mean.defined())
    refuse("training is false and the running statistics are missing",
           "running_mean and running_var, or training = true");
  if (residual.defined() && residual.sizes() != input.sizes())
    refuse("residual's shape " + c10::str(residual.sizes()) + " differs from the input's " +
               c10::str(input.sizes()),
           "a residual of the input's shape");
  if (training && input.numel() / channels < 2)
    refuse("one value per channel in training mode (input " + c10::str(input.sizes()) + ")",
           "more than one");
  const auto optional = [](const at::Tensor& t) {
    return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
  };
  return layers::detail::BatchNormActFunction::apply(
      input, optional(weight), optional(bias), optional(residual), optional(running_mean),
      optional(running_var), training, momentum, eps, relu, fork);
}

}  // namespace detail

/// relu(batch_norm(input) + residual), residual optional, as
/// torch::nn::functional::batch_norm takes its arguments: in training mode
/// the batch's statistics normalise and the running ones (when given) move
/// by `momentum`; otherwise the running statistics normalise.
inline at::Tensor batch_norm_relu(const at::Tensor& input, const at::Tensor& running_mean,
                                  const at::Tensor& running_var, const at::Tensor& weight,
                                  const at::Tensor& bias, bool training, double momentum,
                                  double eps, const at::Tensor& residual = {}, bool relu = true) {
  return detail::checked_batch_norm_relu(input, running_mean, running_var, weight, bias, training,
                                         momentum, eps, residual, relu, /*fork=*/false)[0];
}

/// batch_norm_relu's output twice, for an output with two consumers (a
/// residual block's input: its first convolution and its shortcut). The two
/// tensors share memory; their gradients reach the backward apart, and it
/// adds them in its own pass over memory, where autograd would add them in a
/// kernel of their own. Neither may be modified in place (autograd refuses).
inline std::pair<at::Tensor, at::Tensor> batch_norm_relu_fork(
    const at::Tensor& input, const at::Tensor& running_mean, const at::Tensor& running_var,
    const at::Tensor& weight, const at::Tensor& bias, bool training, double momentum, double eps,
    const at::Tensor& residual = {}, bool relu = true) {
  auto out = detail::checked_batch_norm_relu(input, running_mean, running_var, weight, bias,
                                             training, momentum, eps, residual, relu,
                                             /*fork=*/true);
  return {std::move(out[0]), std::move(out[1])};
}

}  // namespace functional

/// BatchNorm2d followed by ReLU, with an optional residual added before the
/// ReLU: `bn_relu(x)` or `bn_relu(x, shortcut)`. Parameters, buffers, options
/// and state-dict names are torch::nn::BatchNorm2d's.
/// (NormImplBase, not BatchNormImplBase: LibTorch compiles the latter's
/// members for its own modules only.)
class BatchNormReLU2dImpl
    : public torch::nn::NormImplBase<2, BatchNormReLU2dImpl, torch::nn::BatchNormOptions>,
      public trainkit::detail::NormLayerTag {
 public:
  using NormImplBase::NormImplBase;

  at::Tensor forward(const at::Tensor& input, const at::Tensor& residual = {}) {
    return apply(input, residual, /*fork=*/false)[0];
  }

  /// forward's output twice, for two consumers whose gradients the backward
  /// adds itself (functional::batch_norm_relu_fork): a residual block's input.
  std::pair<at::Tensor, at::Tensor> forward_fork(const at::Tensor& input,
                                                 const at::Tensor& residual = {}) {
    auto out = apply(input, residual, /*fork=*/true);
    return {std::move(out[0]), std::move(out[1])};
  }

  void pretty_print(std::ostream& stream) const override {
    stream << "trainkit::layers::BatchNormReLU2d(" << options.num_features()
           << ", eps=" << options.eps() << ")";
  }

 protected:
  FORWARD_HAS_DEFAULT_ARGS({1, torch::nn::AnyValue(at::Tensor())})

  void _check_input_dim(const at::Tensor& input) override {
    if (input.dim() != 4)
      throw Error("trainkit: BatchNormReLU2d: expected a 4-D input (N, C, H, W), got " +
                  std::to_string(input.dim()) + " dimensions");
  }

 private:
  torch::autograd::variable_list apply(const at::Tensor& input, const at::Tensor& residual,
                                       bool fork) {
    _check_input_dim(input);
    double factor = options.momentum().value_or(0.0);
    const bool update = is_training() && options.track_running_stats();
    if (update && num_batches_tracked.defined()) {
      num_batches_tracked += 1;
      // as torch::nn::BatchNorm2d: a cumulative average reads the count
      if (!options.momentum()) factor = 1.0 / num_batches_tracked.item<double>();
    }
    return functional::detail::checked_batch_norm_relu(
        input, running_mean, running_var, weight, bias,
        is_training() || !options.track_running_stats(), factor, options.eps(), residual,
        /*relu=*/true, fork);
  }
};
TORCH_MODULE(BatchNormReLU2d);

}  // namespace trainkit::layers
