#pragma once
// clip::None: gradients pass unchanged.
#include "trainkit/params.hpp"

namespace trainkit::clip {

struct None {
  struct Options {};
  None() : None(Options{}) {}
  explicit None(const Options&) {}
  void clip(FlatParams&) {}
};

}  // namespace trainkit::clip
