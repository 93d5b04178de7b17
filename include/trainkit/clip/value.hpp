#pragma once
// clip::Value: clamp every gradient element to [-clip_value, clip_value]
// (torch.nn.utils.clip_grad_value_), one clamp per flat buffer.
#include <cmath>
#include <type_traits>

#include "trainkit/error.hpp"
#include "trainkit/params.hpp"

namespace trainkit::clip {

class Value {
 public:
  static constexpr const char* stable_name(std::type_identity<Value>) {
    return "trainkit::clip::Value";
  }
  struct Options {
    double clip_value = 1.0;
  };
  Value() : Value(Options{}) {}
  explicit Value(const Options& o) : value_(o.clip_value) {
    detail::require_option(o.clip_value > 0.0 && std::isfinite(o.clip_value), "clip.clip_value",
                           o.clip_value, "a finite number > 0");
  }
  void clip(FlatParams& params) {
    torch::NoGradGuard no_grad;
    for (auto& g : params.groups()) g.grad.clamp_(-value_, value_);
  }

 private:
  double value_;
};

}  // namespace trainkit::clip
