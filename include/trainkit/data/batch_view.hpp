#pragma once
// A non-owning view of any range of batches (for validation data in
// FitOptions, which cannot be a template). It remembers the batch type, and
// whoever reads it names that type: another one is an error, not a cast.
#include <c10/util/Type.h>

#include <functional>
#include <iterator>
#include <type_traits>
#include <typeinfo>

#include "trainkit/data/batch.hpp"
#include "trainkit/data/batch_traits.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

namespace detail {
using std::begin;  // with argument-dependent lookup, as a range-for finds them
using std::end;
/// A range of batches trainkit can see into (without <ranges>, which costs
/// a file more to parse than all of trainkit's core).
template <class Range>
concept BatchRange = requires(Range& r) {
  begin(r);
  end(r);
}
&&has_tensors<batch_of_t<Range>>;
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
      : type_(&typeid(batch_of_t<Range>)),
  for_each_([&range](const std::function<void(const void*)>& f) {
    for (auto&& b : range) {
      const batch_of_t<Range>& batch = b;
      f(&batch);
    }
  }) {}

  explicit operator bool() const { return static_cast<bool>(for_each_); }
  /// Calls `f` on each batch, which must be of type B.
  template <class B>
  void for_each(const std::function<void(const B&)>& f) const {
    if (*type_ != typeid(B)) {
      throw Error("trainkit: validation data holds batches of type " +
                  c10::demangle(type_->name()) + ", but training uses " +
                  c10::demangle(typeid(B).name()) + "; give both the same batch type");
    }
    for_each_([&f](const void* batch) { f(*static_cast<const B*>(batch)); });
  }

 private:
  const std::type_info* type_ = nullptr;
  std::function<void(const std::function<void(const void*)>&)> for_each_;
};

}  // namespace trainkit::data
