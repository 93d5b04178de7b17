#pragma once
// precision::Fp16: float16 autocast on CUDA with dynamic loss scaling. The
// scaler skips the optimizer step when a gradient is inf/NaN and backs off.
// On a CPU, set `.autocast = false` to train fp32 with loss scaling alone
// (how the scaler logic is tested without a GPU).
#include <torch/types.h>
#include <type_traits>

#include "trainkit/detail/compat.hpp"
#include "trainkit/precision/grad_scaler.hpp"

namespace trainkit::precision {

class Fp16 {
 public:
  static constexpr const char* stable_name(std::type_identity<Fp16>) {
    return "trainkit::precision::Fp16";
  }
  struct Options {
    bool autocast = true;
    GradScaler::Options scaler{};
  };

  Fp16() : Fp16(Options{}) {}
  explicit Fp16(const Options& o, torch::Device device = torch::kCPU)
      : device_(device.type()), autocast_(o.autocast), scaler_(o.scaler, device) {
    detail::require_option(!o.autocast || device.is_cuda(), "precision.autocast", o.autocast,
                           "true only on a CUDA device (fp16 autocast needs CUDA); on a CPU use "
                           "precision::Bf16, or false for loss scaling without autocast");
  }

  trainkit::detail::AutocastScope autocast() const { return {device_, at::kHalf, autocast_}; }
  void backward(const at::Tensor& loss) { scaler_.scale(loss).backward(); }
  void unscale(FlatParams& params) { scaler_.unscale(params); }
  template <class StepFn>
  void step(StepFn&& optimizer_step) {
    if (!scaler_.found_inf()) optimizer_step();
  }
  void update() { scaler_.update(); }

  const GradScaler& scaler() const { return scaler_; }
  StateDict state_dict() const { return scaler_.state_dict(); }
  void load_state_dict(const StateDict& d) { scaler_.load_state_dict(d); }
  /// Set by unscale when a gradient is inf/NaN (a device tensor).
  const at::Tensor& found_inf() const { return scaler_.found_inf_tensor(); }
  /// Current loss scale (a device tensor; read it only when logging).
  const at::Tensor& loss_scale() const { return scaler_.scale_tensor(); }

 private:
  c10::DeviceType device_;
  bool autocast_;
  GradScaler scaler_;
};

}  // namespace trainkit::precision
