#pragma once
// GradScaler: dynamic loss scaling for fp16 with torch.cuda.amp.GradScaler's
// semantics. On CUDA it runs PyTorch's own `_amp_*` kernels; elsewhere the
// same algorithm in tensor ops, so its logic is testable on a CPU.
//   unscale: g *= 1/scale, found_inf = any(!isfinite(g))
//   update:  inf -> scale *= backoff, tracker = 0
//            else tracker += 1; tracker == interval -> scale *= growth (if finite), tracker = 0
#include <ATen/Parallel.h>
#include <torch/types.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>

#include "trainkit/error.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::precision {

class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
  };

  GradScaler() : GradScaler(Options{}) {}
  explicit GradScaler(const Options& o, torch::Device device = torch::kCPU) : options_(o) {
    using detail::require_option;
    require_option(o.init_scale > 0.0 && std::isfinite(o.init_scale), "precision.scaler.init_scale",
                   o.init_scale, "a finite number > 0");
    require_option(o.growth_factor > 1.0, "precision.scaler.growth_factor", o.growth_factor,
                   "a number > 1");
    require_option(o.backoff_factor > 0.0 && o.backoff_factor < 1.0,
                   "precision.scaler.backoff_factor", o.backoff_factor, "0 < backoff_factor < 1");
    require_option(o.growth_interval > 0, "precision.scaler.growth_interval", o.growth_interval,
                   "a number of steps > 0");
    const auto f32 = torch::TensorOptions().dtype(at::kFloat).device(device);
    scale_ = at::full({1}, o.init_scale, f32);
    found_inf_ = at::zeros({1}, f32);
    growth_tracker_ = at::zeros({1}, f32.dtype(at::kInt));
  }

  /// loss * scale, for backward.
  at::Tensor scale(const at::Tensor& loss) const { return loss * scale_; }

  /// Divides every gradient by the scale and records whether any is inf/NaN.
  /// Over a shard of gradients spread across ranks, any rank's inf counts for all.
  void unscale(FlatParams& params) {
    torch::NoGradGuard no_grad;
    found_inf_.zero_();
    if (scale_.is_cuda()) {  // PyTorch's rounding: scale.double().reciprocal().float()
      const auto inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
      for (auto& g : params.groups()) {
        std::vector<at::Tensor> grads{g.grad};
        at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
      }
    } else {
      // The same value read from host memory: no tensors made, nothing to wait for.
      const auto inv_scale = static_cast<float>(1.0 / double(*scale_.data_ptr<float>()));
      for (auto& g : params.groups()) {
        if (unscale_cpu(g.grad, inv_scale)) *found_inf_.data_ptr<float>() = 1.0f;
      }
    }
    params.reduce_across_ranks(found_inf_, FlatParams::Reduction::Max);
  }

  /// Whether the last unscale found inf/NaN (a host read on CUDA, as in PyTorch).
  bool found_inf() const { return found_inf_.item<float>() != 0.0f; }

  /// Adjusts the scale after a step (taken or skipped).
  void update() {
    if (scale_.is_cuda()) {
      at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor,
                             options_.backoff_factor, options_.growth_interval);
      return;
    }
    float& scale = *scale_.data_ptr<float>();
    int32_t& tracker = *growth_tracker_.data_ptr<int32_t>();
    if (*found_inf_.data_ptr<float>() != 0.0f) {
      scale = static_cast<float>(scale * options_.backoff_factor);
      tracker = 0;
    } else if (tracker + 1 == options_.growth_interval) {
      const auto grown = static_cast<float>(scale * options_.growth_factor);
      if (std::isfinite(grown)) scale = grown;
      tracker = 0;
    } else {
      ++tracker;
    }
  }

  double scale_value() const { return scale_.item<double>(); }
  int64_t growth_tracker() const { return growth_tracker_.item<int64_t>(); }
  const at::Tensor& scale_tensor() const { return scale_; }

  StateDict state_dict() const {
    StateDict d;
    d.tensors["scale"] = scale_;
    d.tensors["growth_tracker"] = growth_tracker_;
    return d;
  }
  void load_state_dict(const StateDict& d) {
    const auto scale = d.tensor_like("scale", scale_.cpu());
    const auto tracker = d.tensor_like("growth_tracker", growth_tracker_.cpu());
    scale_.copy_(scale);
    growth_tracker_.copy_(tracker);
  }
  const at::Tensor& found_inf_tensor() const { return found_inf_; }

 private:
  // One pass: multiply and test; returns true if any value is not finite.
  static bool unscale_cpu(at::Tensor& grad, float inv_scale) {
    if (grad.scalar_type() != at::kFloat) {
      grad.mul_(inv_scale);
      return !grad.isfinite().all().item<bool>();
    }
    float* g = grad.data_ptr<float>();
    std::atomic<bool> found{false};
    at::parallel_for(0, grad.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
      bool local = false;
      for (int64_t i = begin; i < end; ++i) {
        g[i] *= inv_scale;
        local |= !(std::fabs(g[i]) <= std::numeric_limits<float>::max());
      }
      if (local) found.store(true, std::memory_order_relaxed);
    });
    return found.load();
  }

  Options options_;
  at::Tensor scale_, found_inf_, growth_tracker_;
};

}  // namespace trainkit::precision
