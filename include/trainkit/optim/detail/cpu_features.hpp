#pragma once
// Run-time CPU dispatch for the fused float32 kernels. ATen's own CPU kernels
// use AVX2 with FMA where the CPU has them; ours do the same so their
// rounding, and therefore their results, are bit-identical to torch.optim's.
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TRAINKIT_X86_DISPATCH 1
#include <immintrin.h>
#define TRAINKIT_TARGET_AVX2_FMA __attribute__((target("avx2,fma")))
#else
#define TRAINKIT_X86_DISPATCH 0
#endif

namespace trainkit::detail {

inline bool cpu_has_avx2_fma() {
#if TRAINKIT_X86_DISPATCH
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

}  // namespace trainkit::detail
