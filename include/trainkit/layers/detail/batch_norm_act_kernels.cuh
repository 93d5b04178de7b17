#pragma once
// The fused batch-norm kernels (nvcc only). Exactly one CUDA file of a
// program includes this (trainkit's own is src/cuda_kernels.cu, built as
// trainkit_cuda_kernels): it defines the launch functions. Layout: x is rows x channels, row-major
// (NHWC). A block is channel groups (x) by rows (y): each thread owns V
// consecutive channels for the whole launch, so its per-channel constants
// live in registers, and a warp reads consecutive rows, i.e. contiguous
// memory, 16 bytes per thread. Reductions go through per-block partial sums
// added in a fixed order: the gradients are the same on every run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "trainkit/layers/detail/batch_norm_act_launch.hpp"

namespace trainkit::layers::detail::cuda {
namespace kernels {

constexpr int kThreads = 256;
// Channel groups per block, at most: its reduction's shared memory stays
// within the default 48 KB (2 x 512 threads x 8 floats).
constexpr int kMaxGroups = 512;
constexpr int kBlocksPerSm = 8;
// The per-block partials are merged per channel by 32-channel by kLanes
// blocks: each lane takes every kLanes-th partial, then a tree over the lanes.
constexpr int kLanes = 16;
// The finalize kernels' shared memory: up to three [kLanes][32] float arrays.
constexpr size_t kFinalizeShared = 3 * kLanes * 32 * sizeof(float);

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <class T, int V>
__device__ __forceinline__ void load(const T* p, float (&out)[V]) {
  const Pack<T, V> pack = *reinterpret_cast<const Pack<T, V>*>(p);
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = to_float(pack.v[i]);
}

template <class T, int V>
__device__ __forceinline__ void store(T* p, const float (&in)[V]) {
  Pack<T, V> pack;
#pragma unroll
  for (int i = 0; i < V; ++i) pack.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Pack<T, V>*>(p) = pack;
}

// Chan's merge of (n, mean, m2) with (nb, mb, m2b): the moments of the union.
__device__ __forceinline__ void merge(float& n, float& mean, float& m2, float nb, float mb,
                                      float m2b) {
  if (nb == 0.f) return;
  const float total = n + nb, d = mb - mean, f = nb / total;
  mean += d * f;
  m2 += m2b + d * d * n * f;
  n = total;
}

// Per block: each thread runs Welford's update over its rows, then one
// thread per channel merges the block's rows of partials in order.
// Workspace: [mean | m2 | n] x blocks x channels.
template <class T, int V>
__global__ void __launch_bounds__(kMaxGroups) stats_reduce(StatsArgs a) {
  extern __shared__ float shared[];  // [2][blockDim.y][blockDim.x * V], then [blockDim.y]
  const int64_t c0 = int64_t(threadIdx.x) * V;
  float n = 0.f, mean[V] = {}, m2[V] = {};
  const T* x = static_cast<const T*>(a.x);
  const int64_t stride = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < a.rows; row += stride) {
    float v[V];
    load<T, V>(x + row * a.channels + c0, v);
    n += 1.f;
    const float inv = __frcp_rn(n);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float d = v[i] - mean[i];
      mean[i] += d * inv;
      m2[i] += d * (v[i] - mean[i]);
    }
  }
  const int width = blockDim.x * V, rows = blockDim.y;
  float* counts = shared + 2 * rows * width;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    shared[threadIdx.y * width + c0 + i] = mean[i];
    shared[(rows + threadIdx.y) * width + c0 + i] = m2[i];
  }
  if (threadIdx.x == 0) counts[threadIdx.y] = n;
  __syncthreads();
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int c = tid; c < width; c += blockDim.x * blockDim.y) {
    float total = 0.f, m = 0.f, s = 0.f;
    for (int k = 0; k < rows; ++k)
      merge(total, m, s, counts[k], shared[k * width + c], shared[(rows + k) * width + c]);
    const int64_t at = int64_t(blockIdx.x) * a.channels + c, part = int64_t(gridDim.x) * a.channels;
    a.workspace[at] = m;
    a.workspace[part + at] = s;
    a.workspace[2 * part + at] = total;
  }
}

// Per channel: the blocks' partials merged (lanes, then a tree), mean and invstd.
__global__ void stats_finalize(StatsArgs a, int blocks) {
  extern __shared__ float shared[];  // kFinalizeShared
  float(*sn)[32] = reinterpret_cast<float(*)[32]>(shared);
  float(*sm)[32] = sn + kLanes;
  float(*s2)[32] = sm + kLanes;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = int64_t(blockIdx.x) * 32 + tx, part = int64_t(blocks) * a.channels;
  float n = 0.f, m = 0.f, m2 = 0.f;
  if (c < a.channels)
    for (int b = ty; b < blocks; b += kLanes) {
      const int64_t at = int64_t(b) * a.channels + c;
      merge(n, m, m2, a.workspace[2 * part + at], a.workspace[at], a.workspace[part + at]);
    }
  sn[ty][tx] = n, sm[ty][tx] = m, s2[ty][tx] = m2;
  __syncthreads();
  for (int half = kLanes / 2; half > 0; half /= 2) {
    if (ty < half) {
      merge(n, m, m2, sn[ty + half][tx], sm[ty + half][tx], s2[ty + half][tx]);
      sn[ty][tx] = n, sm[ty][tx] = m, s2[ty][tx] = m2;
    }
    __syncthreads();
  }
  if (ty == 0 && c < a.channels) {
    a.mean[c] = m;
    a.invstd[c] = 1.f / sqrtf(m2 / n + a.eps);
  }
}

template <class T, int V, bool Residual, bool Relu>
__global__ void __launch_bounds__(kMaxGroups) forward(ForwardArgs a) {
  const int64_t c0 = int64_t(threadIdx.x) * V;
  float scale[V], shift[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t c = c0 + i;
    const float w = a.weight ? a.weight[c] : 1.f, b = a.bias ? a.bias[c] : 0.f;
    scale[i] = w * a.invstd[c];
    shift[i] = b - a.mean[c] * scale[i];
  }
  if (a.running_mean && blockIdx.x == 0 && threadIdx.y == 0) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t c = c0 + i;
      const float var = 1.f / (a.invstd[c] * a.invstd[c]) - a.eps;
      a.running_mean[c] = (1.f - a.momentum) * a.running_mean[c] + a.momentum * a.mean[c];
      a.running_var[c] = (1.f - a.momentum) * a.running_var[c] + a.momentum * var * a.unbias;
    }
  }
  const T* x = static_cast<const T*>(a.x);
  const T* r = static_cast<const T*>(a.residual);
  T* y = static_cast<T*>(a.y);
  const int64_t stride = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < a.rows; row += stride) {
    const int64_t at = row * a.channels + c0;
    float v[V], res[V];
    load<T, V>(x + at, v);
    if constexpr (Residual) load<T, V>(r + at, res);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      v[i] = v[i] * scale[i] + shift[i];
      if constexpr (Residual) v[i] += res[i];
      if constexpr (Relu) v[i] = v[i] > 0.f ? v[i] : 0.f;
    }
    store<T, V>(y + at, v);
  }
}

// The gradient through the activation: dy (+ dy2, rounded to T as
// autograd's sum of the two would be) where the output is positive (relu).
template <class T, int V, bool Relu>
__device__ __forceinline__ void masked_grad(const BackwardArgs& a, int64_t at, float (&g)[V]) {
  load<T, V>(static_cast<const T*>(a.grad_y) + at, g);
  if (a.grad_y2) {
    float g2[V];
    load<T, V>(static_cast<const T*>(a.grad_y2) + at, g2);
#pragma unroll
    for (int i = 0; i < V; ++i) g[i] = to_float(from_float<T>(g[i] + g2[i]));
  }
  if constexpr (Relu) {
    float out[V];
    load<T, V>(static_cast<const T*>(a.y) + at, out);
#pragma unroll
    for (int i = 0; i < V; ++i) g[i] = out[i] > 0.f ? g[i] : 0.f;
  }
}

// Where backward_reduce leaves g for backward_elementwise, or nullptr (then
// the latter recomputes it): the residual's gradient, which is g, else dx's
// buffer when dy comes in two parts. Reading g back costs one pass; making it
// again costs two or three (dy, dy2, y).
__host__ __device__ inline void* staged_grad(const BackwardArgs& a) {
  if (a.grad_residual) return a.grad_residual;
  return a.grad_y2 ? a.grad_x : nullptr;
}

// g = relu's mask applied to dy; per block: sum g and sum g * (x - mean);
// g itself to staged_grad(a) where that is set.
template <class T, int V, bool Relu>
__global__ void __launch_bounds__(kMaxGroups) backward_reduce(BackwardArgs a) {
  extern __shared__ float shared[];  // [2][blockDim.y][blockDim.x * V]
  const int64_t c0 = int64_t(threadIdx.x) * V;
  float mean[V], sum_g[V] = {}, sum_gx[V] = {};
#pragma unroll
  for (int i = 0; i < V; ++i) mean[i] = a.mean[c0 + i];
  const T* x = static_cast<const T*>(a.x);
  T* stage = static_cast<T*>(staged_grad(a));
  const int64_t stride = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < a.rows; row += stride) {
    const int64_t at = row * a.channels + c0;
    float g[V], in[V];
    masked_grad<T, V, Relu>(a, at, g);
    if (stage) store<T, V>(stage + at, g);  // exact: g is already T's value
    load<T, V>(x + at, in);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      sum_g[i] += g[i];
      sum_gx[i] += g[i] * (in[i] - mean[i]);
    }
  }
  const int width = blockDim.x * V, rows = blockDim.y;
  float* sg = shared + threadIdx.y * width + c0;
  float* sgx = shared + (rows + threadIdx.y) * width + c0;
#pragma unroll
  for (int i = 0; i < V; ++i) sg[i] = sum_g[i], sgx[i] = sum_gx[i];
  __syncthreads();
  // Each thread of the block adds one channel's column, rows in order.
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int c = tid; c < width; c += blockDim.x * blockDim.y) {
    float total_g = 0.f, total_gx = 0.f;
    for (int k = 0; k < rows; ++k) total_g += shared[k * width + c];
    for (int k = 0; k < rows; ++k) total_gx += shared[(rows + k) * width + c];
    a.workspace[int64_t(blockIdx.x) * a.channels + c] = total_g;
    a.workspace[int64_t(gridDim.x + blockIdx.x) * a.channels + c] = total_gx;
  }
}

// Per channel: the blocks' partial sums (lanes, then a tree, a fixed order),
// the parameter gradients, and dx's coefficients: dx = A g + B (x - mean) + D.
__global__ void backward_finalize(BackwardArgs a, int blocks) {
  extern __shared__ float shared[];  // kFinalizeShared
  float(*sg)[32] = reinterpret_cast<float(*)[32]>(shared);
  float(*sgx)[32] = sg + kLanes;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = int64_t(blockIdx.x) * 32 + tx, part = int64_t(blocks) * a.channels;
  float sum_g = 0.f, sum_gx = 0.f;
  if (c < a.channels)
    for (int b = ty; b < blocks; b += kLanes) {
      sum_g += a.workspace[int64_t(b) * a.channels + c];
      sum_gx += a.workspace[part + int64_t(b) * a.channels + c];
    }
  sg[ty][tx] = sum_g, sgx[ty][tx] = sum_gx;
  __syncthreads();
  for (int half = kLanes / 2; half > 0; half /= 2) {
    if (ty < half) {
      sum_g += sg[ty + half][tx], sum_gx += sgx[ty + half][tx];
      sg[ty][tx] = sum_g, sgx[ty][tx] = sum_gx;
    }
    __syncthreads();
  }
  if (ty != 0 || c >= a.channels) return;
  const float invstd = a.invstd[c], w = a.weight ? a.weight[c] : 1.f;
  if (a.grad_bias) a.grad_bias[c] = sum_g;
  if (a.grad_weight) a.grad_weight[c] = sum_gx * invstd;
  const float A = w * invstd, n = float(a.rows);
  float* coef = a.workspace + 2 * part;
  coef[c] = A;
  coef[a.channels + c] = a.training ? -A * invstd * invstd * sum_gx / n : 0.f;
  coef[2 * a.channels + c] = a.training ? -A * sum_g / n : 0.f;
}

// dx from g (staged, or made again) and the per-channel coefficients.
template <class T, int V, bool Relu>
__global__ void __launch_bounds__(kMaxGroups) backward_elementwise(BackwardArgs a, int blocks) {
  const int64_t c0 = int64_t(threadIdx.x) * V;
  const float* coef = a.workspace + int64_t(2 * blocks) * a.channels;
  float A[V], B[V], D[V], mean[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    A[i] = coef[c0 + i], B[i] = coef[a.channels + c0 + i], D[i] = coef[2 * a.channels + c0 + i];
    mean[i] = a.mean[c0 + i];
  }
  const T* x = static_cast<const T*>(a.x);
  const T* stage = static_cast<const T*>(staged_grad(a));
  T* dx = static_cast<T*>(a.grad_x);
  const int64_t stride = int64_t(gridDim.x) * blockDim.y;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < a.rows; row += stride) {
    const int64_t at = row * a.channels + c0;
    float g[V], in[V];
    if (stage)
      load<T, V>(stage + at, g);  // where stage is dx, this thread reads it before writing
    else
      masked_grad<T, V, Relu>(a, at, g);
    load<T, V>(x + at, in);
#pragma unroll
    for (int i = 0; i < V; ++i) in[i] = A[i] * g[i] + B[i] * (in[i] - mean[i]) + D[i];
    store<T, V>(dx + at, in);
  }
}

struct Shape {
  dim3 block;
  int blocks;
};

// The vector width: 16 bytes when the channels split into whole vectors.
inline int vector_width(int64_t channels, Scalar type) {
  const int v = type == Scalar::f32 ? 4 : 8;
  return channels % v == 0 ? v : 1;
}

inline Shape shape(int64_t rows, int64_t channels, Scalar type, int multiprocessors) {
  const int groups = int(channels / vector_width(channels, type));
  const int per_block = std::max(1, kThreads / groups);
  const int64_t needed = (rows + per_block - 1) / per_block;
  const int64_t most = int64_t(std::max(multiprocessors, 1)) * kBlocksPerSm;
  return {dim3(unsigned(groups), unsigned(per_block)),
          int(std::max<int64_t>(1, std::min(needed, most)))};
}

// The launch's error, as text, or nullptr.
inline const char* launch_error() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

// kernel<<<grid, block, shared, stream>>>(args...), written as the runtime
// call it stands for: plain C++ compiles it too, so that the tests run these
// kernels on CPUs (tests/cuda_emulation).
template <class... P>
const char* launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                   std::type_identity_t<P>... args) {
  void* pointers[] = {static_cast<void*>(&args)...};
  const cudaError_t e = cudaLaunchKernel(kernel, grid, block, pointers, shared, stream);
  if (e == cudaSuccess) return launch_error();
  (void)cudaGetLastError();  // the launch's error is returned, not left for the next check
  return cudaGetErrorString(e);
}

inline dim3 finalize_grid(int64_t channels) {
  return dim3(unsigned((channels + 31) / 32));
}
inline const dim3 kFinalizeBlock(32, kLanes);

template <class T, int V>
const char* stats_as(const StatsArgs& a, Shape s, cudaStream_t stream) {
  const size_t shared = (size_t(2) * s.block.x * V + 1) * s.block.y * sizeof(float);
  if (const char* e = launch(stats_reduce<T, V>, s.blocks, s.block, shared, stream, a)) return e;
  return launch(stats_finalize, finalize_grid(a.channels), kFinalizeBlock, kFinalizeShared, stream,
                a, s.blocks);
}

template <class T, int V>
const char* forward_as(const ForwardArgs& a, Shape s, cudaStream_t stream) {
  const bool res = a.residual != nullptr;
  const auto kernel = res && a.relu ? forward<T, V, true, true>
                      : res         ? forward<T, V, true, false>
                      : a.relu      ? forward<T, V, false, true>
                                    : forward<T, V, false, false>;
  return launch(kernel, s.blocks, s.block, 0, stream, a);
}

template <class T, int V>
const char* backward_as(const BackwardArgs& a, Shape s, cudaStream_t stream) {
  const size_t shared = size_t(2) * s.block.x * s.block.y * V * sizeof(float);
  const auto reduce = a.relu ? backward_reduce<T, V, true> : backward_reduce<T, V, false>;
  if (const char* e = launch(reduce, s.blocks, s.block, shared, stream, a)) return e;
  if (const char* e = launch(backward_finalize, finalize_grid(a.channels), kFinalizeBlock,
                             kFinalizeShared, stream, a, s.blocks))
    return e;
  if (!a.grad_x) return nullptr;  // the residual's gradient is the staged g
  const auto elementwise =
      a.relu ? backward_elementwise<T, V, true> : backward_elementwise<T, V, false>;
  return launch(elementwise, s.blocks, s.block, 0, stream, a, s.blocks);
}

// No rows (an empty batch in eval mode): the parameters' gradients are sums
// over nothing, zero; there is no input to take a gradient of.
inline const char* zero_parameter_gradients(const BackwardArgs& a, cudaStream_t stream) {
  for (float* grad : {a.grad_weight, a.grad_bias}) {
    if (!grad) continue;
    const cudaError_t e = cudaMemsetAsync(grad, 0, size_t(a.channels) * sizeof(float), stream);
    if (e != cudaSuccess) return cudaGetErrorString(e);
  }
  return nullptr;
}

// Calls f.template operator()<T, V>(shape) for the arguments' type, width
// and launch shape (nothing for no rows).
template <class Args, class F>
const char* dispatch(const Args& a, int multiprocessors, F&& f) {
  if (a.rows == 0) return nullptr;
  const Shape s = shape(a.rows, a.channels, a.type, multiprocessors);
  const bool vectors = vector_width(a.channels, a.type) > 1;
  switch (a.type) {
    case Scalar::f32:
      return vectors ? f.template operator()<float, 4>(s) : f.template operator()<float, 1>(s);
    case Scalar::f16:
      return vectors ? f.template operator()<__half, 8>(s) : f.template operator()<__half, 1>(s);
    case Scalar::bf16:
      return vectors ? f.template operator()<__nv_bfloat16, 8>(s)
                     : f.template operator()<__nv_bfloat16, 1>(s);
  }
  return "trainkit: unknown scalar type";
}

}  // namespace kernels

bool supports(int64_t channels, Scalar type) {
  return channels > 0 && channels / kernels::vector_width(channels, type) <= kernels::kMaxGroups;
}

int64_t backward_workspace_floats(int64_t rows, int64_t channels, Scalar type,
                                  int multiprocessors) {
  return (2 * int64_t(kernels::shape(rows, channels, type, multiprocessors).blocks) + 3) * channels;
}

int64_t stats_workspace_floats(int64_t rows, int64_t channels, Scalar type, int multiprocessors) {
  return 3 * int64_t(kernels::shape(rows, channels, type, multiprocessors).blocks) * channels;
}

const char* launch_stats(const StatsArgs& a, int multiprocessors, void* stream) {
  return kernels::dispatch(a, multiprocessors, [&]<class T, int V>(kernels::Shape s) {
    return kernels::stats_as<T, V>(a, s, cudaStream_t(stream));
  });
}

const char* launch_forward(const ForwardArgs& a, int multiprocessors, void* stream) {
  return kernels::dispatch(a, multiprocessors, [&]<class T, int V>(kernels::Shape s) {
    return kernels::forward_as<T, V>(a, s, cudaStream_t(stream));
  });
}

const char* launch_backward(const BackwardArgs& a, int multiprocessors, void* stream) {
  if (a.rows == 0) return kernels::zero_parameter_gradients(a, cudaStream_t(stream));
  return kernels::dispatch(a, multiprocessors, [&]<class T, int V>(kernels::Shape s) {
    return kernels::backward_as<T, V>(a, s, cudaStream_t(stream));
  });
}

}  // namespace trainkit::layers::detail::cuda
