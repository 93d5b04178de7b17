#pragma once
// A batch: inputs and targets, moved to the device together.
#include <torch/types.h>

namespace trainkit::data {

struct Batch {
  at::Tensor input;
  at::Tensor target;

  int64_t size() const { return input.size(0); }
  Batch to(const torch::Device& device, bool non_blocking = true) const {
    if (input.device() == device && target.device() == device) return *this;
    return {input.to(device, non_blocking), target.to(device, non_blocking)};
  }
};

}  // namespace trainkit::data
