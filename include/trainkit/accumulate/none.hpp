#pragma once
// accumulate::None: one micro-batch per optimizer step.
#include <cstdint>
#include <type_traits>

namespace trainkit::accumulate {

struct None {
  static constexpr const char* stable_name(std::type_identity<None>) {
    return "trainkit::accumulate::None";
  }
  struct Options {};
  None() : None(Options{}) {}
  explicit None(const Options&) {}
  static constexpr int64_t steps() { return 1; }
};

}  // namespace trainkit::accumulate
