#pragma once
// One Adam/AdamW step over a flat buffer. The float32 CPU path is a single
// fused pass over p, g, m, v (the memory-bandwidth bound of the step) whose
// arithmetic rounds exactly like torch.optim's sequence of ATen ops: ATen's
// add_(alpha) and addcmul_ are fused multiply-adds, addcdiv_ is not. Other
// dtypes and devices run that same sequence of in-place ATen ops on a reused
// scratch buffer, so no step allocates.
#include <ATen/Parallel.h>
#include <torch/types.h>

#include <cmath>
#include <cstdint>

#include "trainkit/detail/linkage.hpp"
#if TRAINKIT_DEFINITIONS  // <immintrin.h>: only where the kernels compile
#include "trainkit/optim/detail/cpu_features.hpp"
#endif

namespace trainkit::detail {

struct AdamHyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;  ///< AdamW: decay the weights, not the gradient
  bool amsgrad;
  int64_t step;  ///< 1 on the first step
};

/// Per-element scalars, rounded to float the way ATen rounds Scalar arguments.
struct AdamScalars {
  float decay, wd, b1, one_minus_b1, b2, one_minus_b2, bc2_sqrt, eps, neg_step_size;
  explicit AdamScalars(const AdamHyper& h)
      : decay(static_cast<float>(1.0 - h.lr * h.weight_decay)),
        wd(static_cast<float>(h.weight_decay)),
        b1(static_cast<float>(h.beta1)),
        one_minus_b1(static_cast<float>(1.0 - h.beta1)),
        b2(static_cast<float>(h.beta2)),
        one_minus_b2(static_cast<float>(1.0 - h.beta2)),
        bc2_sqrt(static_cast<float>(std::sqrt(1.0 - std::pow(h.beta2, double(h.step))))),
        eps(static_cast<float>(h.eps)),
        neg_step_size(static_cast<float>(-h.lr / (1.0 - std::pow(h.beta1, double(h.step))))) {}
};

struct AdamArrays {
  float* p;
  const float* g;
  float* m;
  float* v;
  float* vmax;  ///< amsgrad only
};

/// Steps `param` in place from `grad`; `max_exp_avg_sq` is used only with
/// amsgrad; `scratch` has param's shape and holds the denominator.
TRAINKIT_INLINE void adam_step(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg,
                               at::Tensor& exp_avg_sq, at::Tensor& max_exp_avg_sq,
                               at::Tensor& scratch, const AdamHyper& h);

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE void adam_scalar(const AdamArrays& a, int64_t begin, int64_t end,
                                 const AdamHyper& h, const AdamScalars& s) {
  const bool grad_wd = !h.decoupled && h.weight_decay != 0.0;
  for (int64_t i = begin; i < end; ++i) {
    float p = a.p[i], g = a.g[i];
    if (h.decoupled)
      p = p * s.decay;
    else if (grad_wd)
      g = std::fma(s.wd, p, g);
    const float m = std::fma(s.one_minus_b1, g, a.m[i] * s.b1);
    float v = std::fma(s.one_minus_b2 * g, g, a.v[i] * s.b2);
    a.m[i] = m;
    a.v[i] = v;
    if (h.amsgrad) {
      v = a.vmax[i] > v ? a.vmax[i] : v;
      a.vmax[i] = v;
    }
    const float denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
    a.p[i] = p + s.neg_step_size * m / denom;
  }
}

#if TRAINKIT_X86_DISPATCH
TRAINKIT_TARGET_AVX2_FMA TRAINKIT_INLINE void adam_avx2(const AdamArrays& a, int64_t begin,
                                                        int64_t end, const AdamHyper& h,
                                                        const AdamScalars& s) {
  const bool grad_wd = !h.decoupled && h.weight_decay != 0.0;
  const __m256 decay = _mm256_set1_ps(s.decay), wd = _mm256_set1_ps(s.wd),
               b1 = _mm256_set1_ps(s.b1), omb1 = _mm256_set1_ps(s.one_minus_b1),
               b2 = _mm256_set1_ps(s.b2), omb2 = _mm256_set1_ps(s.one_minus_b2),
               bc2 = _mm256_set1_ps(s.bc2_sqrt), eps = _mm256_set1_ps(s.eps),
               nss = _mm256_set1_ps(s.neg_step_size);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 p = _mm256_loadu_ps(a.p + i), g = _mm256_loadu_ps(a.g + i);
    if (h.decoupled)
      p = _mm256_mul_ps(p, decay);
    else if (grad_wd)
      g = _mm256_fmadd_ps(wd, p, g);
    const __m256 m = _mm256_fmadd_ps(omb1, g, _mm256_mul_ps(_mm256_loadu_ps(a.m + i), b1));
    __m256 v =
        _mm256_fmadd_ps(_mm256_mul_ps(omb2, g), g, _mm256_mul_ps(_mm256_loadu_ps(a.v + i), b2));
    _mm256_storeu_ps(a.m + i, m);
    _mm256_storeu_ps(a.v + i, v);
    if (h.amsgrad) {
      v = _mm256_max_ps(v, _mm256_loadu_ps(a.vmax + i));  // the scalar line's NaN rule
      _mm256_storeu_ps(a.vmax + i, v);
    }
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2), eps);
    _mm256_storeu_ps(a.p + i, _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(nss, m), denom)));
  }
  adam_scalar(a, i, end, h, s);
}
#endif

TRAINKIT_INLINE void adam_step(at::Tensor& param, const at::Tensor& grad, at::Tensor& exp_avg,
                               at::Tensor& exp_avg_sq, at::Tensor& max_exp_avg_sq,
                               at::Tensor& scratch, const AdamHyper& h) {
  torch::NoGradGuard no_grad;
  if (param.device().is_cpu() && param.scalar_type() == at::kFloat) {
    const AdamScalars s(h);
    const AdamArrays a{param.data_ptr<float>(), grad.data_ptr<float>(), exp_avg.data_ptr<float>(),
                       exp_avg_sq.data_ptr<float>(),
                       h.amsgrad ? max_exp_avg_sq.data_ptr<float>() : nullptr};
    at::parallel_for(0, param.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
#if TRAINKIT_X86_DISPATCH
      if (cpu_has_avx2_fma()) return adam_avx2(a, begin, end, h, s);
#endif
      adam_scalar(a, begin, end, h, s);
    });
    return;
  }
  const double bc1 = 1.0 - std::pow(h.beta1, double(h.step));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(h.beta2, double(h.step)));
  at::Tensor g = grad;
  if (h.decoupled) {
    param.mul_(1.0 - h.lr * h.weight_decay);
  } else if (h.weight_decay != 0.0) {
    g = at::add_out(scratch, grad, param, h.weight_decay);
  }
  exp_avg.mul_(h.beta1).add_(g, 1.0 - h.beta1);
  exp_avg_sq.mul_(h.beta2).addcmul_(g, g, 1.0 - h.beta2);
  if (h.amsgrad) {
    at::maximum_out(max_exp_avg_sq, max_exp_avg_sq, exp_avg_sq);
    at::sqrt_out(scratch, max_exp_avg_sq);
  } else {
    at::sqrt_out(scratch, exp_avg_sq);
  }
  scratch.div_(bc2_sqrt).add_(h.eps);
  param.addcdiv_(exp_avg, scratch, -h.lr / bc1);
}

#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
