#pragma once
// LibTorch's CPU allocator does not cache: every large temporary of a step is
// a fresh mmap and a burst of page faults. Telling glibc to serve large blocks
// from the heap and never trim it lets freed activations be reused instead.
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace trainkit::detail {

/// Process-wide and idempotent; a no-op away from glibc.
inline void keep_freed_cpu_memory() {
#if defined(__GLIBC__)
  static const bool done = [] {
    mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);  // glibc's largest heap-served block
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  (void)done;
#endif
}

}  // namespace trainkit::detail
