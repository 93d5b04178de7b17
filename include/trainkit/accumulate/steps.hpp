#pragma once
// accumulate::Steps: N micro-batches per optimizer step, chosen at run time.
#include <cstdint>
#include <type_traits>

#include "trainkit/error.hpp"

namespace trainkit::accumulate {

class Steps {
 public:
  static constexpr const char* stable_name(std::type_identity<Steps>) {
    return "trainkit::accumulate::Steps";
  }
  struct Options {
    int64_t steps = 1;
  };
  Steps() : Steps(Options{}) {}
  explicit Steps(const Options& o) : steps_(o.steps) {
    detail::require_option(o.steps >= 1, "accumulate.steps", o.steps,
                           "a number of micro-batches per optimizer step >= 1");
  }
  int64_t steps() const { return steps_; }

 private:
  int64_t steps_;
};

}  // namespace trainkit::accumulate
