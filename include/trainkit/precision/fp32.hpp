#pragma once
// precision::Fp32: full precision, no autocast, no loss scaling.
#include <torch/types.h>

#include "trainkit/detail/scope.hpp"
#include "trainkit/params.hpp"

namespace trainkit::precision {

class Fp32 {
 public:
  struct Options {};
  Fp32() : Fp32(Options{}) {}
  explicit Fp32(const Options&, torch::Device = torch::kCPU) {}

  detail::NoScope autocast() const { return {}; }
  void backward(const at::Tensor& loss) { loss.backward(); }
  void unscale(FlatParams&) {}
  template <class StepFn>
  void step(StepFn&& optimizer_step) {
    optimizer_step();
  }
  void update() {}
};

}  // namespace trainkit::precision
