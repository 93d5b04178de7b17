#pragma once
// The running mean of an epoch's micro-batch losses. A CPU loss is read from
// host memory (there is nothing to wait for, and no new tensor is made: a
// detach() per step cost the tiny-MLP benchmark 5%); a device loss is summed
// on the device and read once, at epoch end.
#include <ATen/Functions.h>
#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/types.h>

#include <cstdint>

#include "trainkit/detail/linkage.hpp"

namespace trainkit::detail {

/// Losses summed over micro-batches (and ranks), and their number.
struct LossTotals {
  double sum = 0.0;
  int64_t count = 0;
};

class LossMeter {
 public:
  void reset() {
    host_sum_ = 0.0;
    device_sum_ = at::Tensor();
    count_ = 0;
  }

  void add(const at::Tensor& loss);

  double sum() const {
    return host_sum_ + (device_sum_.defined() ? device_sum_.item<double>() : 0.0);
  }
  int64_t count() const { return count_; }
  /// Continues a sum saved in a checkpoint.
  void restore(double sum, int64_t count) {
    reset();
    host_sum_ = sum;
    count_ = count;
  }

 private:
  double host_sum_ = 0.0;
  at::Tensor device_sum_;
  int64_t count_ = 0;
};

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE void LossMeter::add(const at::Tensor& loss) {
  ++count_;
  if (loss.is_cpu() && loss.numel() == 1) {
    const void* p = loss.data_ptr();
    switch (loss.scalar_type()) {
      case at::kFloat:
        host_sum_ += *static_cast<const float*>(p);
        return;
      case at::kDouble:
        host_sum_ += *static_cast<const double*>(p);
        return;
      case at::kBFloat16:
        host_sum_ += float(*static_cast<const c10::BFloat16*>(p));
        return;
      case at::kHalf:
        host_sum_ += float(*static_cast<const c10::Half*>(p));
        return;
      default:
        break;
    }
  }
  torch::NoGradGuard no_grad;  // the sum records no graph
  const auto value = loss.to(at::kDouble).reshape({});
  device_sum_ = device_sum_.defined() ? device_sum_.add_(value) : value.clone();
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
