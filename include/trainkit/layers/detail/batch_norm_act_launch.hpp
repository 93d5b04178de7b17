#pragma once
// The fused batch-norm kernels' entry points (defined in
// batch_norm_act_kernels.cuh, compiled by nvcc into trainkit_cuda_kernels).
// Plain pointers and sizes only: this header includes neither CUDA nor
// LibTorch, so the C++ side and the CUDA side agree on nothing else.
#include <cstdint>

namespace trainkit::layers::detail::cuda {

enum class Scalar : int { f32, f16, bf16 };

/// y = act(x * scale + shift [+ residual]) per channel, with scale = weight *
/// invstd and shift = bias - mean * scale; x is rows x channels, row-major
/// (an NHWC tensor). When running_mean is set, it and running_var move
/// toward (mean, var * unbias) by `momentum` (var recovered from invstd).
struct ForwardArgs {
  const void* x = nullptr;
  const void* residual = nullptr;  ///< optional, x's type and layout
  void* y = nullptr;
  const float* mean = nullptr;
  const float* invstd = nullptr;
  const float* weight = nullptr;  ///< optional (affine = false)
  const float* bias = nullptr;    ///< optional
  float* running_mean = nullptr;  ///< optional
  float* running_var = nullptr;
  float momentum = 0, eps = 0, unbias = 1;
  int64_t rows = 0, channels = 0;
  Scalar type = Scalar::f32;
  bool relu = true;
};

/// The gradients of ForwardArgs' y: g = dy (+ dy2) masked where y <= 0
/// (relu), then grad_bias = sum g, grad_weight = sum g * xhat, grad_residual
/// = g, and grad_x by batch norm's training-mode formula (eval mode: weight *
/// invstd * g). With no rows, grad_weight and grad_bias are zeros.
struct BackwardArgs {
  const void* grad_y = nullptr;
  const void* grad_y2 = nullptr;  ///< optional: the gradient from y's second consumer
  const void* y = nullptr;
  const void* x = nullptr;
  const float* mean = nullptr;
  const float* invstd = nullptr;
  const float* weight = nullptr;  ///< optional
  float* grad_weight = nullptr;   ///< optional
  float* grad_bias = nullptr;     ///< optional
  void* grad_x = nullptr;         ///< optional
  void* grad_residual = nullptr;  ///< optional
  float* workspace = nullptr;     ///< backward_workspace_floats(...) floats
  int64_t rows = 0, channels = 0;
  Scalar type = Scalar::f32;
  bool relu = true, training = true;
};

/// Training-mode statistics per channel of x (rows x channels, row-major):
/// mean and invstd = 1 / sqrt(biased variance + eps), as ATen's
/// batch_norm_stats gives them, by Welford's update per thread and Chan's
/// merge of the partials in a fixed order (the same bits on every run).
struct StatsArgs {
  const void* x = nullptr;
  float* mean = nullptr;
  float* invstd = nullptr;
  float* workspace = nullptr;  ///< stats_workspace_floats(...) floats
  float eps = 0;
  int64_t rows = 0, channels = 0;
  Scalar type = Scalar::f32;
};

/// Whether the kernels take this shape (else the caller uses the composite).
bool supports(int64_t channels, Scalar type);
int64_t backward_workspace_floats(int64_t rows, int64_t channels, Scalar type, int multiprocessors);
int64_t stats_workspace_floats(int64_t rows, int64_t channels, Scalar type, int multiprocessors);

/// Each launches on `stream` (a cudaStream_t) and returns nullptr, or the
/// CUDA error's text.
const char* launch_stats(const StatsArgs& args, int multiprocessors, void* stream);
const char* launch_forward(const ForwardArgs& args, int multiprocessors, void* stream);
const char* launch_backward(const BackwardArgs& args, int multiprocessors, void* stream);

}  // namespace trainkit::layers::detail::cuda
