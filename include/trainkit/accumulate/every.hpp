#pragma once
// accumulate::Every<N>: N micro-batches per optimizer step, fixed at compile
// time (lets the trainer drop the loss division when N == 1).
#include <cstdint>
#include <string>
#include <type_traits>

namespace trainkit::accumulate {

template <int64_t N>
struct Every {
  static_assert(N >= 1,
                "accumulate::Every<N>: N is the number of micro-batches per step; "
                "it must be >= 1");
  static std::string stable_name(std::type_identity<Every>) {
    return "trainkit::accumulate::Every<" + std::to_string(N) + ">";
  }
  struct Options {};
  Every() : Every(Options{}) {}
  explicit Every(const Options&) {}
  static constexpr int64_t steps() { return N; }
};

}  // namespace trainkit::accumulate
