#pragma once
// The callbacks of one fit, in a tuple dispatched with a fold: no virtual
// calls, and hooks nobody defines compile to nothing. An lvalue callback is
// held by reference (the caller's object sees every hook), an rvalue one is
// moved in and owned; std::ref(cb) is unwrapped like an lvalue.
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "trainkit/state.hpp"

namespace trainkit::detail {

template <class T>
T& unwrap(T& t) {
  return t;
}
template <class T>
T& unwrap(std::reference_wrapper<T> t) {
  return t.get();
}

/// The callback type behind `C` (a value, a reference or a std::reference_wrapper).
template <class C>
using callback_t = std::remove_cvref_t<std::unwrap_ref_decay_t<C>>;

/// `Callbacks` as `fit` deduced them: `T&` for an lvalue, `T` for an rvalue.
template <class... Callbacks>
class CallbackSet {
 public:
  template <class... Args>
  explicit CallbackSet(Args&&... callbacks) : callbacks_(std::forward<Args>(callbacks)...) {}

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
  static constexpr bool defines = (Hook::template callable<callback_t<Callbacks>> || ...);

  template <class Hook>
  void dispatch(TrainState& state) {
    std::apply([&](auto&... cb) { (Hook::call(unwrap(cb), state), ...); }, callbacks_);
  }

 private:
  std::tuple<Callbacks...> callbacks_;
};

}  // namespace trainkit::detail
