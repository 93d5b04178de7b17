#pragma once
// A checkpoint's plain values as JSON, part by part, as both checkpoint
// forms store them (io/checkpoint.hpp, io/sharded_checkpoint.hpp). Doubles
// that JSON has no number for (infinities, NaN) are strings.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::io {

namespace detail {
inline nlohmann::json to_json(const StateValue& v) {
  switch (v.kind()) {
    case StateValue::Kind::kBool:
      return v.as_bool();
    case StateValue::Kind::kInt:
      return v.as_int();
    case StateValue::Kind::kDouble: {
      const auto x = StateDict::number(v.as_double());  // inf and NaN as strings
      return x.kind() == StateValue::Kind::kString ? nlohmann::json(x.as_string())
                                                   : nlohmann::json(v.as_double());
    }
    case StateValue::Kind::kString:
      return v.as_string();
  }
  return nullptr;
}
inline StateValue from_json(const std::string& key, const nlohmann::json& j) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    throw Error("value \"" + key + "\" is " + j.dump() + ", beyond a 64-bit integer");
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  throw Error("value \"" + key + "\" is " + j.type_name() + ", not a bool, number or string");
}
}  // namespace detail

/// {part: {key: value}} of every part's values.
inline nlohmann::json values_to_json(const Checkpoint& ckpt) {
  nlohmann::json values = nlohmann::json::object();
  for (const auto& [part, dict] : ckpt.parts) {
    auto& out = values[part] = nlohmann::json::object();
    for (const auto& [key, v] : dict.values) out[key] = detail::to_json(v);
  }
  return values;
}

/// The parts' values from values_to_json's form; an Error names what is not.
inline Checkpoint values_from_json(const nlohmann::json& values) {
  if (!values.is_object()) throw Error("the values are not an object");
  Checkpoint ckpt;
  for (const auto& [part, v] : values.items()) {
    if (!v.is_object()) throw Error("part \"" + part + "\" is not an object");
    auto& out = ckpt.parts[part].values;
    for (const auto& [key, x] : v.items()) out[key] = detail::from_json(key, x);
  }
  return ckpt;
}

}  // namespace trainkit::io
