#pragma once
// capture::None, the default: every step runs eagerly, as written, and the
// Trainer compiles none of the capture code.
namespace trainkit::capture {

struct None {
  struct Options {};
  static constexpr bool records = false;
  explicit None(const Options& = {}) {}
};

}  // namespace trainkit::capture
