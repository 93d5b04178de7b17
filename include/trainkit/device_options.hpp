#pragma once
// Device settings users of PyTorch set by hand (torch.backends.*,
// channels_last) and the whole-step CUDA graph, as Trainer options: each has
// a default, and the run's configuration reports the value in effect.
#include <ATen/Context.h>

#include <cstdint>
#include <optional>

#include "trainkit/error.hpp"

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

/// The whole optimizer step as one CUDA graph (docs/design.md, "captured
/// steps"): after `warmup_steps` eager steps, the N micro-batches' forward and
/// backward, unscale and inf check, clipping, the optimizer step, the scale
/// update and gradient zeroing are captured once and replayed each step,
/// with the batch copied into static buffers first. Where a policy, callback
/// or the device cannot be captured, steps stay eager and the run's
/// configuration (and one line on stderr) says why.
struct CudaGraphOptions {
  bool enabled = false;
  int64_t warmup_steps = 3;
  /// Replay by running the recorded step body again instead of a graph, on
  /// any device: the captured path's data flow (static buffers, device-side
  /// learning rate, step count and inf skip) without a GPU. For tests.
  bool emulate = false;
};

namespace detail {

/// What DeviceOptions resolved to.
struct DeviceSettings {
  bool tf32_matmul, tf32_cudnn, cudnn_benchmark, channels_last;
};

/// Applies the process-wide settings (as torch.backends does) and returns
/// what is in effect.
inline DeviceSettings apply_device_options(DeviceOptions o) {
  auto& ctx = at::globalContext();
  if (o.tf32.has_value()) {
    ctx.setAllowTF32CuBLAS(o.tf32.value());
    ctx.setAllowTF32CuDNN(o.tf32.value());
  }
  const bool deterministic = ctx.deterministicAlgorithms() || ctx.deterministicCuDNN();
  ctx.setBenchmarkCuDNN(o.cudnn_benchmark.has_value() ? o.cudnn_benchmark.value() : !deterministic);
  return {ctx.allowTF32CuBLAS(), ctx.allowTF32CuDNN(), ctx.benchmarkCuDNN(), o.channels_last};
}

inline void check_graph_options(const CudaGraphOptions& o) {
  require_option(o.warmup_steps >= 1, "cuda_graph.warmup_steps", o.warmup_steps,
                 "a number of eager steps >= 1 (the first steps make lazy state)");
}

}  // namespace detail
}  // namespace trainkit
