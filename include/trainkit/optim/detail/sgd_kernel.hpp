#pragma once
// One SGD step over a flat buffer, with torch.optim.SGD's momentum, dampening,
// Nesterov and weight-decay semantics. The float32 CPU path is one fused pass
// that rounds like ATen's add_(alpha) (a fused multiply-add).
#include <ATen/Parallel.h>
#include <torch/types.h>

#include <cmath>
#include <cstdint>

#include "trainkit/detail/linkage.hpp"
#if TRAINKIT_DEFINITIONS  // <immintrin.h>: only where the kernels compile
#include "trainkit/optim/detail/cpu_features.hpp"
#endif

namespace trainkit::detail {

struct SgdHyper {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
  bool first_step;  ///< the momentum buffer starts as a copy of the gradient
};

struct SgdScalars {
  float wd, mom, damp, neg_lr;
  bool has_wd, has_momentum;
  explicit SgdScalars(const SgdHyper& h)
      : wd(static_cast<float>(h.weight_decay)),
        mom(static_cast<float>(h.momentum)),
        damp(static_cast<float>(1.0 - h.dampening)),
        neg_lr(static_cast<float>(-h.lr)),
        has_wd(h.weight_decay != 0.0),
        has_momentum(h.momentum != 0.0) {}
};

TRAINKIT_INLINE void sgd_step(at::Tensor& param, const at::Tensor& grad, at::Tensor& buf,
                              at::Tensor& scratch, const SgdHyper& h);

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE void sgd_scalar(float* p, const float* g_in, float* buf, int64_t begin, int64_t end,
                                const SgdHyper& h, const SgdScalars& s) {
  for (int64_t i = begin; i < end; ++i) {
    float g = h.maximize ? -g_in[i] : g_in[i];
    if (s.has_wd) g = std::fma(s.wd, p[i], g);
    if (s.has_momentum) {
      const float b = h.first_step ? g : std::fma(s.damp, g, buf[i] * s.mom);
      buf[i] = b;
      g = h.nesterov ? std::fma(s.mom, b, g) : b;
    }
    p[i] = std::fma(s.neg_lr, g, p[i]);
  }
}

#if TRAINKIT_X86_DISPATCH
TRAINKIT_TARGET_AVX2_FMA TRAINKIT_INLINE void sgd_avx2(float* p, const float* g_in, float* buf,
                                                       int64_t begin, int64_t end,
                                                       const SgdHyper& h, const SgdScalars& s) {
  const __m256 wd = _mm256_set1_ps(s.wd), mom = _mm256_set1_ps(s.mom),
               damp = _mm256_set1_ps(s.damp), neg_lr = _mm256_set1_ps(s.neg_lr),
               sign = _mm256_set1_ps(-0.0f);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 g = _mm256_loadu_ps(g_in + i);
    const __m256 pv = _mm256_loadu_ps(p + i);
    if (h.maximize) g = _mm256_xor_ps(g, sign);
    if (s.has_wd) g = _mm256_fmadd_ps(wd, pv, g);
    if (s.has_momentum) {
      const __m256 b =
          h.first_step ? g : _mm256_fmadd_ps(damp, g, _mm256_mul_ps(_mm256_loadu_ps(buf + i), mom));
      _mm256_storeu_ps(buf + i, b);
      g = h.nesterov ? _mm256_fmadd_ps(mom, b, g) : b;
    }
    _mm256_storeu_ps(p + i, _mm256_fmadd_ps(neg_lr, g, pv));
  }
  sgd_scalar(p, g_in, buf, i, end, h, s);
}
#endif

TRAINKIT_INLINE void sgd_step(at::Tensor& param, const at::Tensor& grad, at::Tensor& buf,
                              at::Tensor& scratch, const SgdHyper& h) {
  torch::NoGradGuard no_grad;
  const bool has_momentum = h.momentum != 0.0;
  if (param.device().is_cpu() && param.scalar_type() == at::kFloat) {
    const SgdScalars s(h);
    float* p = param.data_ptr<float>();
    const float* g = grad.data_ptr<float>();
    float* b = has_momentum ? buf.data_ptr<float>() : nullptr;
    at::parallel_for(0, param.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
#if TRAINKIT_X86_DISPATCH
      if (cpu_has_avx2_fma()) return sgd_avx2(p, g, b, begin, end, h, s);
#endif
      sgd_scalar(p, g, b, begin, end, h, s);
    });
    return;
  }
  at::Tensor g = grad;
  if (h.maximize) g = at::neg_out(scratch, grad);
  if (h.weight_decay != 0.0) g = at::add_out(scratch, g, param, h.weight_decay);
  if (has_momentum) {
    if (h.first_step)
      buf.copy_(g);
    else
      buf.mul_(h.momentum).add_(g, 1.0 - h.dampening);
    g = h.nesterov ? at::add_out(scratch, g, buf, h.momentum) : buf;
  }
  param.add_(g, -h.lr);
}

#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
