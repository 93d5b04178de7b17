#pragma once
// optim::Adam: Adam with L2 weight decay added to the gradient (and amsgrad),
// as torch.optim.Adam, stepping the flat buffers in one fused pass.
#include <optional>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/optim/detail/adam_family.hpp"

namespace trainkit::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  /// ATen's fused kernel (torch.optim's fused=True; LibTorch >= 2.4). Unset:
  /// fused on CUDA, trainkit's own kernel on CPUs; true: fused everywhere.
  std::optional<bool> fused{};
};

class Adam : public detail::AdamFamily<AdamOptions, /*decoupled=*/false> {
 public:
  static constexpr const char* stable_name(std::type_identity<Adam>) {
    return "trainkit::optim::Adam";
  }
  using Options = AdamOptions;
  using AdamFamily::AdamFamily;
};

}  // namespace trainkit::optim

#if TRAINKIT_EXTERN_TEMPLATES  // compiled once, in trainkit/src.hpp
extern template class trainkit::detail::AdamFamily<trainkit::optim::AdamOptions, false>;
#endif
