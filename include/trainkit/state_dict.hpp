#pragma once
// StateDict: what a policy or callback saves into a checkpoint: plain values
// (bool, integer, double, string) and tensors by name. Loading checks
// everything it needs before changing anything, so a bad checkpoint never
// leaves an object half-loaded. The values are a small closed type rather
// than JSON so that every Trainer does not compile a JSON library; the
// checkpoint file (io/checkpoint.hpp) writes them as JSON.
#include <torch/types.h>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"

namespace trainkit {

/// One plain value of a StateDict.
class StateValue {
 public:
  enum class Kind { kBool, kInt, kDouble, kString };

  StateValue() = default;
  StateValue(bool b) : kind_(Kind::kBool), int_(b) {}
  template <std::integral T>
  requires(!std::same_as<T, bool>) StateValue(T i)
      : kind_(Kind::kInt), int_(static_cast<int64_t>(i)) {}
  template <std::floating_point T>
  StateValue(T x) : kind_(Kind::kDouble), double_(static_cast<double>(x)) {}
  StateValue(std::string s) : kind_(Kind::kString), string_(std::move(s)) {}
  StateValue(const char* s) : kind_(Kind::kString), string_(s) {}

  Kind kind() const { return kind_; }
  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return double_; }
  const std::string& as_string() const { return string_; }

 private:
  Kind kind_ = Kind::kInt;
  int64_t int_ = 0;
  double double_ = 0.0;
  std::string string_;
};

struct StateDict {
  std::map<std::string, StateValue> values;
  std::map<std::string, at::Tensor> tensors;

  /// The tensor `name`, which must exist with `like`'s shape and dtype.
  const at::Tensor& tensor_like(const std::string& name, const at::Tensor& like) const;

  /// The value `key` as T (bool, an integer type, a floating type or
  /// std::string); an integer reads as a double, nothing else converts.
  template <class T>
  T value(const std::string& key) const;

  /// A double, infinities and NaN as the strings the checkpoint file holds
  /// them as. The file's writer does this for every double, so a plain
  /// double is enough; kept for callbacks written against JSON values.
  static StateValue number(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    return x;
  }
};

/// Optimizer state tensors that follow the flat parameters element by
/// element: state-dict name -> the flat group (FlatParams::groups()) they
/// follow. A Parallel policy that shards the parameters shards these with them.
using ElementwiseState = std::map<std::string, size_t>;

template <class T>
T StateDict::value(const std::string& key) const {
  const auto it = values.find(key);
  if (it == values.end()) throw Error("trainkit: checkpoint state has no value \"" + key + "\"");
  const StateValue& v = it->second;
  using K = StateValue::Kind;
  if constexpr (std::is_same_v<T, bool>) {
    if (v.kind() == K::kBool) return v.as_bool();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.kind() == K::kInt) return static_cast<T>(v.as_int());
  } else if constexpr (std::is_floating_point_v<T>) {
    if (v.kind() == K::kDouble) return static_cast<T>(v.as_double());
    if (v.kind() == K::kInt) return static_cast<T>(v.as_int());
    if (v.kind() == K::kString) {  // files hold infinities and NaN as strings
      if (v.as_string() == "inf") return std::numeric_limits<T>::infinity();
      if (v.as_string() == "-inf") return -std::numeric_limits<T>::infinity();
      if (v.as_string() == "nan") return std::numeric_limits<T>::quiet_NaN();
    }
  } else {
    static_assert(std::is_same_v<T, std::string>, "StateDict::value<T>: T is not a value type");
    if (v.kind() == K::kString) return v.as_string();
  }
  static constexpr const char* kKinds[] = {"a bool", "an integer", "a number", "a string"};
  throw Error("trainkit: checkpoint value \"" + key + "\" is " +
              kKinds[static_cast<int>(v.kind())] + " of the wrong type for this state");
}

#if TRAINKIT_EXTERN_TEMPLATES  // compiled once, in trainkit/src.hpp
extern template bool StateDict::value<bool>(const std::string&) const;
extern template int64_t StateDict::value<int64_t>(const std::string&) const;
extern template double StateDict::value<double>(const std::string&) const;
extern template std::string StateDict::value<std::string>(const std::string&) const;
#endif

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE const at::Tensor& StateDict::tensor_like(const std::string& name,
                                                         const at::Tensor& like) const {
  const auto it = tensors.find(name);
  if (it == tensors.end()) throw Error("trainkit: checkpoint state has no tensor \"" + name + "\"");
  if (it->second.sizes() != like.sizes() || it->second.scalar_type() != like.scalar_type()) {
    std::ostringstream msg;
    msg << "trainkit: checkpoint tensor \"" << name << "\" is " << it->second.scalar_type()
        << it->second.sizes() << ", expected " << like.scalar_type() << like.sizes();
    throw Error(msg.str());
  }
  return it->second;
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit
