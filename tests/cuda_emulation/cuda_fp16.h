#pragma once
// CUDA's __half and __nv_bfloat16 (cuda_bf16.h includes this), emulated by
// c10::Half and c10::BFloat16: the same formats, rounded to nearest even as
// the device's _rn conversions are. See cuda_runtime.h here.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

using __half = c10::Half;
using __nv_bfloat16 = c10::BFloat16;

inline float __half2float(__half v) {
  return static_cast<float>(v);
}
inline __half __float2half_rn(float v) {
  return __half(v);
}
inline float __bfloat162float(__nv_bfloat16 v) {
  return static_cast<float>(v);
}
inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  return __nv_bfloat16(v);
}
