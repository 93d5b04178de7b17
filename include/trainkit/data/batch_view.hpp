#pragma once
// A non-owning view of any range of batches (for validation data in
// FitOptions, which cannot be a template).
#include <concepts>
#include <functional>
#include <iterator>
#include <type_traits>

#include "trainkit/data/batch.hpp"

namespace trainkit::data {

namespace detail {
using std::begin;  // with argument-dependent lookup, as a range-for finds begin()
/// A range whose elements convert to Batch (without <ranges>, which costs
/// a file more to parse than all of trainkit's core).
template <class Range>
concept BatchRange = requires(Range& r) {
  { *begin(r) } -> std::convertible_to<Batch>;
};
}  // namespace detail

class BatchView {
 public:
  BatchView() = default;
  /// `Range` may be const (TensorBatches) or not (a data::Loader's begin()
  /// restarts its pipeline).
  template <class Range>
  requires(!std::is_same_v<std::remove_cvref_t<Range>, BatchView>) &&
      detail::BatchRange<Range> BatchView(
          Range& range)  // NOLINT(google-explicit-constructor): designated init
      : for_each_([&range](const std::function<void(const Batch&)>& f) {
          for (auto&& b : range) f(b);
        }) {}

  explicit operator bool() const { return static_cast<bool>(for_each_); }
  void for_each(const std::function<void(const Batch&)>& f) const { for_each_(f); }

 private:
  std::function<void(const std::function<void(const Batch&)>&)> for_each_;
};

}  // namespace trainkit::data
