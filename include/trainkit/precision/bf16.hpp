#pragma once
// precision::Bf16: bfloat16 autocast (CPU or CUDA) around the forward pass;
// bf16 has fp32's range, so no loss scaling. Weights and grads stay fp32.
#include <torch/types.h>
#include <type_traits>

#include "trainkit/detail/compat.hpp"
#include "trainkit/precision/unscaled.hpp"

namespace trainkit::precision {

class Bf16 : public Unscaled {
 public:
  static constexpr const char* stable_name(std::type_identity<Bf16>) {
    return "trainkit::precision::Bf16";
  }
  struct Options {};
  Bf16() : Bf16(Options{}) {}
  explicit Bf16(const Options&, torch::Device device = torch::kCPU) : device_(device.type()) {}

  trainkit::detail::AutocastScope autocast() const { return {device_, at::kBFloat16}; }

 private:
  c10::DeviceType device_;
};

}  // namespace trainkit::precision
