#pragma once
// Tensor sizes read from a file, checked the way ATen checks them before it
// allocates: a shape a reader accepts must never reach a c10::Error (or
// wrap around to a small byte count) in at::empty.
#include <c10/util/safe_numerics.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace trainkit::detail {

/// The number of elements of `dims`, or nothing when ATen could refuse the
/// shape: a size beyond int64, or the sizes' product with zeros counted as
/// ones beyond int64. That is at least what at::empty refuses (strides
/// beyond int64: [0, 2^32, 2^32]; an element count that overflows), and a
/// little more: ATen leaves the first size out of the strides, so it takes
/// a few empty shapes with absurd sizes that no real file holds.
inline std::optional<uint64_t> checked_numel(const std::vector<uint64_t>& dims) {
  constexpr uint64_t max = uint64_t(std::numeric_limits<int64_t>::max());
  uint64_t strides = 1, numel = 1;
  for (const auto d : dims) {
    if (d > max || c10::mul_overflows(strides, std::max<uint64_t>(d, 1), &strides) ||
        strides > max) {
      return std::nullopt;
    }
    numel *= d;  // <= strides: cannot overflow
  }
  return numel;
}

/// "a, b, c" (or with another separator) for error messages.
inline std::string join_sizes(const std::vector<uint64_t>& dims, const char* separator = ", ") {
  std::string out;
  for (const auto d : dims) out += (out.empty() ? "" : separator) + std::to_string(d);
  return out;
}

}  // namespace trainkit::detail
