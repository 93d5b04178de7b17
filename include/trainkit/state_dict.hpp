#pragma once
// StateDict: what a policy or callback saves into a checkpoint: plain values
// as JSON and tensors by name. Loading checks everything it needs before
// changing anything, so a bad checkpoint never leaves an object half-loaded.
#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <map>
#include <sstream>
#include <string>

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
    return values.at(key).get<T>();
  }
};

}  // namespace trainkit
