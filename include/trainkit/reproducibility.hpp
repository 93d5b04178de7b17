#pragma once
// Seeding and determinism switches, in one place.
//   seed_everything(seed): LibTorch's CPU and CUDA generators (dropout,
//     init, randn...). Loaders and samplers take their own explicit seeds,
//     so a run's data order never depends on what else drew numbers.
//   set_deterministic(true): deterministic algorithms (an op without one
//     throws), cuDNN deterministic and not benchmarking, no TF32.
//   set_deterministic(false): the speed mode: cuDNN benchmark and TF32 on.
#include <ATen/Context.h>
#include <torch/utils.h>

#include <cstdint>
#include <cstdlib>

namespace trainkit {

inline void seed_everything(uint64_t seed) {
  torch::manual_seed(seed);
}

inline void set_deterministic(bool deterministic) {
  auto& ctx = at::globalContext();
  if (deterministic) {
    // cuBLAS needs this set before its first use to be deterministic.
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  }
  ctx.setDeterministicAlgorithms(deterministic, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(deterministic);
  ctx.setBenchmarkCuDNN(!deterministic);
  ctx.setAllowTF32CuBLAS(!deterministic);
  ctx.setAllowTF32CuDNN(!deterministic);
}

}  // namespace trainkit
