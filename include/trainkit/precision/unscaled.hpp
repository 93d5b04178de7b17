#pragma once
// The backward half of every precision policy without loss scaling: plain
// backward, nothing to unscale, never skip a step, nothing to update.
#include <torch/types.h>

#include "trainkit/params.hpp"

namespace trainkit::precision {

struct Unscaled {
  void backward(const at::Tensor& loss) { loss.backward(); }
  void unscale(FlatParams&) {}
  template <class StepFn>
  void step(StepFn&& optimizer_step) {
    optimizer_step();
  }
  void update() {}
};

}  // namespace trainkit::precision
