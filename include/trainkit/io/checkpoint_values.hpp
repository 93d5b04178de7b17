#pragma once
// What both checkpoint forms (io/checkpoint.hpp, io/sharded_checkpoint.hpp)
// store alike: the parts' plain values as JSON, part by part (doubles that
// JSON has no number for, infinities and NaN, as strings), and the CRC-32
// that guards their bytes.
#include <zlib.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::io {

namespace detail {
inline uint32_t crc_of(std::string_view bytes) {
  return uint32_t(::crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size())));
}
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
