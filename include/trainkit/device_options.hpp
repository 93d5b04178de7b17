#pragma once
// Device settings users of PyTorch set by hand (torch.backends.*,
// channels_last), as Trainer options: each has a default, and the run's
// configuration reports the value in effect.
#include <ATen/Context.h>

#include <optional>

#include "trainkit/detail/linkage.hpp"

namespace trainkit {

struct DeviceOptions {
  /// TF32 tensor cores for float32 matmuls and cuDNN convolutions (Ampere and
  /// later). Unset keeps PyTorch's defaults (matmuls off, convolutions on);
  /// true or false sets both (torch.backends.cuda.matmul / cudnn.allow_tf32).
  std::optional<bool> tf32{};
  /// cuDNN's autotuner picks each convolution's fastest algorithm for the
  /// shapes it sees (torch.backends.cudnn.benchmark). Unset: on, unless
  /// deterministic algorithms were asked for (set_deterministic).
  std::optional<bool> cudnn_benchmark{};
  /// 4-d parameters (convolution weights) and 4-d inputs in channels-last
  /// (NHWC) memory format, which tensor-core convolutions prefer.
  bool channels_last = false;
};

namespace detail {

/// What DeviceOptions resolved to.
struct DeviceSettings {
  bool tf32_matmul, tf32_cudnn, cudnn_benchmark, channels_last;
};

/// Applies the process-wide settings (as torch.backends does) and returns
/// what is in effect.
TRAINKIT_INLINE DeviceSettings apply_device_options(DeviceOptions o);

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE DeviceSettings apply_device_options(DeviceOptions o) {
  auto& ctx = at::globalContext();
  if (o.tf32.has_value()) {
    ctx.setAllowTF32CuBLAS(o.tf32.value());
    ctx.setAllowTF32CuDNN(o.tf32.value());
  }
  const bool deterministic = ctx.deterministicAlgorithms() || ctx.deterministicCuDNN();
  ctx.setBenchmarkCuDNN(o.cudnn_benchmark.has_value() ? o.cudnn_benchmark.value() : !deterministic);
  return {ctx.allowTF32CuBLAS(), ctx.allowTF32CuDNN(), ctx.benchmarkCuDNN(), o.channels_last};
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace detail
}  // namespace trainkit
