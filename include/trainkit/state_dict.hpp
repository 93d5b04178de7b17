#pragma once
// StateDict: what a policy or callback saves into a checkpoint: plain values
// as JSON and tensors by name. Loading checks everything it needs before
// changing anything, so a bad checkpoint never leaves an object half-loaded.
#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>

#include "trainkit/error.hpp"

namespace trainkit {

struct StateDict {
  nlohmann::json values = nlohmann::json::object();
  std::map<std::string, at::Tensor> tensors;

  /// The tensor `name`, which must exist with `like`'s shape and dtype.
  const at::Tensor& tensor_like(const std::string& name, const at::Tensor& like) const {
    const auto it = tensors.find(name);
    if (it == tensors.end())
      throw Error("trainkit: checkpoint state has no tensor \"" + name + "\"");
    if (it->second.sizes() != like.sizes() || it->second.scalar_type() != like.scalar_type()) {
      std::ostringstream msg;
      msg << "trainkit: checkpoint tensor \"" << name << "\" is " << it->second.scalar_type()
          << it->second.sizes() << ", expected " << like.scalar_type() << like.sizes();
      throw Error(msg.str());
    }
    return it->second;
  }
  template <class T>
  T value(const std::string& key) const {
    if (!values.contains(key))
      throw Error("trainkit: checkpoint state has no value \"" + key + "\"");
    const auto& v = values.at(key);
    if constexpr (std::is_floating_point_v<T>) {
      if (v.is_string()) {  // see number(): JSON has no infinity or NaN
        const auto text = v.get<std::string>();
        if (text == "inf") return std::numeric_limits<T>::infinity();
        if (text == "-inf") return -std::numeric_limits<T>::infinity();
        if (text == "nan") return std::numeric_limits<T>::quiet_NaN();
      }
    }
    return v.get<T>();
  }

  /// A double as JSON, infinities and NaN as strings (JSON would make them null).
  static nlohmann::json number(double x) {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    return x;
  }
};

}  // namespace trainkit
