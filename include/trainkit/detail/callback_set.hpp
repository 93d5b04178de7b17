#pragma once
// Callbacks stored by value in a tuple and dispatched with a fold: no virtual
// calls, and hooks nobody defines compile to nothing. std::ref(cb) keeps a
// callback owned by the caller.
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "trainkit/state.hpp"

namespace trainkit::detail {

template <class T>
struct unwrap_ref {
  using type = T;
};
template <class T>
struct unwrap_ref<std::reference_wrapper<T>> {
  using type = T;
};
template <class T>
using unwrap_ref_t = typename unwrap_ref<std::remove_cvref_t<T>>::type;

template <class T>
T& unwrap(T& t) {
  return t;
}
template <class T>
T& unwrap(std::reference_wrapper<T> t) {
  return t.get();
}

template <class... Callbacks>
class CallbackSet {
 public:
  explicit CallbackSet(Callbacks... callbacks) : callbacks_(std::move(callbacks)...) {}

  /// Calls f(index, callback) for each callback.
  template <class F>
  void for_each(F&& f) {
    std::apply(
        [&](auto&... cb) {
          size_t i = 0;
          (f(i++, unwrap(cb)), ...);
        },
        callbacks_);
  }

  static constexpr size_t size = sizeof...(Callbacks);

  /// Whether any callback has the hook (known at compile time).
  template <class Hook>
  static constexpr bool defines = (Hook::template callable<unwrap_ref_t<Callbacks>> || ...);

  template <class Hook>
  void dispatch(TrainState& state) {
    std::apply([&](auto&... cb) { (Hook::call(unwrap(cb), state), ...); }, callbacks_);
  }

 private:
  std::tuple<Callbacks...> callbacks_;
};

}  // namespace trainkit::detail
