#pragma once
// clip::None: gradients pass unchanged.
#include "trainkit/params.hpp"

namespace trainkit::clip {

struct None {
  static constexpr const char* stable_name(std::type_identity<None>) {
    return "trainkit::clip::None";
  }
  struct Options {};
  None() : None(Options{}) {}
  explicit None(const Options&) {}
  void clip(FlatParams&) {}
};

}  // namespace trainkit::clip
