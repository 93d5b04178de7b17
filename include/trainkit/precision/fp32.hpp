#pragma once
// precision::Fp32: full precision, no autocast, no loss scaling.
#include <torch/types.h>
#include <type_traits>

#include "trainkit/detail/scope.hpp"
#include "trainkit/precision/unscaled.hpp"

namespace trainkit::precision {

class Fp32 : public Unscaled {
 public:
  static constexpr const char* stable_name(std::type_identity<Fp32>) {
    return "trainkit::precision::Fp32";
  }
  struct Options {};
  Fp32() : Fp32(Options{}) {}
  explicit Fp32(const Options&, torch::Device = torch::kCPU) {}

  detail::NoScope autocast() const { return {}; }
};

}  // namespace trainkit::precision
