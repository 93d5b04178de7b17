#pragma once
// Just enough of the CUDA runtime, in plain C++, to run trainkit's kernels
// on CPUs (tests/kernels_emulated_test.cpp): each launch runs its blocks one
// after another on the calling thread (last block first), a block's threads
// as fibers that take turns, switching at __syncthreads, so that every thread
// reaches a barrier before any passes it. Each turn goes through the threads
// in the other order than the last (a missing barrier shows one way or the
// other), and a barrier that some threads skip (they end while others wait)
// fails the launch, as does shared memory used past the launch's size.
// Found before the real header by the include path of the one test source
// that uses it.
#include <ucontext.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Dynamic shared memory only (extern __shared__ T name[]): the emulating
// test defines the array in the kernels' namespace; blocks run one at a time.
#define __shared__

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// The running thread's coordinates (one OS thread runs every fiber).
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace cuda_emulation {
/// The limits a launch is checked against, as a GPU checks them.
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr size_t kMaxDynamicShared = 48 * 1024;
constexpr size_t kStackBytes = 64 * 1024;  // the kernels keep a few small arrays
/// Set by the emulating test to the size of its shared array.
inline size_t shared_bytes_available = 0;
/// Called before each block with the launch's dynamic shared size (poisons
/// it), and after it: false when the block wrote past that size.
inline void (*before_block)(size_t shared_bytes) = nullptr;
inline bool (*after_block)(size_t shared_bytes) = nullptr;

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  bool done = false;
};
inline ucontext_t scheduler;
inline Fiber* running = nullptr;
inline void (*body)() = nullptr;  // the block's kernel call, for fiber_main

inline void fiber_main() {
  body();
  running->done = true;  // then uc_link returns to the scheduler
}

// A fresh start of fiber_main on f's stack. Not inlined: getcontext returns
// twice, which would make the launch loop's variables suspect.
[[gnu::noinline]] inline void restart(Fiber& f) {
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack.get();
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = &scheduler;
  makecontext(&f.context, fiber_main, 0);
  f.done = false;
}
}  // namespace cuda_emulation

/// The fiber's turn ends here; it resumes once every other thread got here.
inline void __syncthreads() {
  swapcontext(&cuda_emulation::running->context, &cuda_emulation::scheduler);
}

inline float __frcp_rn(float v) {
  return 1.f / v;
}

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719
};
using cudaStream_t = struct CUstream_emulated*;

inline cudaError_t cuda_emulation_last_error = cudaSuccess;

inline cudaError_t cudaGetLastError() {
  return std::exchange(cuda_emulation_last_error, cudaSuccess);
}

inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered (emulated: shared memory past the "
             "launch's size)";
    default:
      return "unspecified launch failure (emulated: a __syncthreads some threads skipped)";
  }
}

inline cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}

namespace cuda_emulation {
template <class... P, size_t... I>
void call(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
  kernel(*static_cast<P*>(args[I])...);
}
}  // namespace cuda_emulation

/// The runtime's typed cudaLaunchKernel, run here and now (synchronously).
template <class... P>
cudaError_t cudaLaunchKernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args,
                             size_t shared, cudaStream_t) {
  namespace emu = cuda_emulation;
  const unsigned threads = block.x * block.y * block.z;
  if (threads == 0 || threads > emu::kMaxThreadsPerBlock || grid.x * grid.y * grid.z == 0 ||
      shared > emu::kMaxDynamicShared || shared > emu::shared_bytes_available)
    return cuda_emulation_last_error = cudaErrorInvalidConfiguration;
  // one kernel call per fiber; fiber_main takes no arguments, so it reads these
  static void (*launched)(P...);
  static void** launched_args;
  launched = kernel, launched_args = args;
  emu::body = [] { emu::call(launched, launched_args, std::index_sequence_for<P...>{}); };
  // Stacks are kept between launches and not zeroed: a fresh, zero-filled
  // 64 KiB per thread was most of a launch's time (page faults, memset).
  static std::vector<emu::Fiber> fibers;
  for (size_t i = fibers.size(); i < threads; ++i)
    fibers.emplace_back().stack = std::make_unique_for_overwrite<char[]>(emu::kStackBytes);
  const unsigned blocks = grid.x * grid.y * grid.z;
  for (unsigned b = 0; b < blocks; ++b) {
    const unsigned id = blocks - 1 - b;  // the last block first
    blockIdx = dim3(id % grid.x, id / grid.x % grid.y, id / (grid.x * grid.y));
    blockDim = block, gridDim = grid;
    if (emu::before_block) emu::before_block(shared);
    for (unsigned t = 0; t < threads; ++t) emu::restart(fibers[t]);
    // rounds: each live fiber runs to its next __syncthreads or its end
    for (unsigned round = 0;; ++round) {
      unsigned paused = 0, ended = 0;
      for (unsigned i = 0; i < threads; ++i) {
        const unsigned t = (round + b) % 2 ? threads - 1 - i : i;
        if (fibers[t].done) continue;
        threadIdx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
        emu::running = &fibers[t];
        swapcontext(&emu::scheduler, &fibers[t].context);
        ++(fibers[t].done ? ended : paused);
      }
      if (paused == 0) break;
      if (ended > 0) return cuda_emulation_last_error = cudaErrorLaunchFailure;
    }
    if (emu::after_block && !emu::after_block(shared))
      return cuda_emulation_last_error = cudaErrorIllegalAddress;
  }
  return cudaSuccess;
}
