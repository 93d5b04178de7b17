#pragma once
// How a study's values sit in Optuna's tables, both ways: numbers exact
// (the shortest text that reads back to the same bits), states and
// directions by Optuna's enum names, infinities and NaN as Optuna's value
// types, attributes as Python's json writes them, and every cell another
// program may have written read back as a value or a trainkit::Error.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <variant>

#include <nlohmann/json.hpp>

#include "trainkit/error.hpp"
#include "trainkit/tune/detail/sql_dialect.hpp"
#include "trainkit/tune/storage.hpp"

namespace trainkit::tune::detail {

/// Exact text of a double: the shortest that reads back to the same bits,
/// and PostgreSQL's spelling of NaN and the infinities.
inline std::string format_double(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

/// The whole of `s` as a T, else a trainkit::Error that calls it a stored
/// `noun` and says it is not `kind`.
template <class T>
T parse_stored(const std::string& s, std::string_view noun, std::string_view kind) {
  T x{};
  const auto r = std::from_chars(s.data(), s.data() + s.size(), x);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) {
    throw Error("trainkit: stored " + std::string(noun) + " \"" + s + "\" is not " +
                std::string(kind));
  }
  return x;
}
inline double parse_double(const std::string& s) {
  return parse_stored<double>(s, "number", "a double");
}
inline int64_t parse_int(const std::string& s) {
  return parse_stored<int64_t>(s, "integer", "an integer");
}

/// Where Python's json writes NaN, Infinity and -Infinity (nlohmann has no
/// such tokens): a string no attribute holds, swapped for the token after
/// writing and before parsing.
inline constexpr std::string_view kNonFiniteTokens[] = {"NaN", "Infinity", "-Infinity"};
inline std::string non_finite_stand_in(std::string_view token) {
  return "\x01trainkit:" + std::string(token) + "\x01";
}

/// An attribute as Optuna stores it (`json.dumps`): JSON with Python's
/// tokens for non-finite numbers, and text that is not UTF-8 with U+FFFD,
/// so every attribute reads back as written.
inline std::string attr_text(const nlohmann::json& v) {
  const auto encode = [](const auto& self, const nlohmann::json& x) -> nlohmann::json {
    if (x.is_number_float() && !std::isfinite(x.get<double>()))
      return non_finite_stand_in(std::isnan(x.get<double>()) ? "NaN"
                                 : x.get<double>() > 0       ? "Infinity"
                                                             : "-Infinity");
    if (!x.is_structured()) return x;
    auto out = x;
    for (auto& [key, item] : out.items()) item = self(self, item);
    return out;
  };
  auto text = encode(encode, v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (const auto token : kNonFiniteTokens) {
    const auto quoted = nlohmann::json(non_finite_stand_in(token)).dump();
    for (size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at)) {
      text.replace(at, quoted.size(), token);
    }
  }
  return text;
}

/// `message` without its leading "trainkit: ", to nest it in another.
inline std::string without_prefix(const std::string& message) {
  return message.rfind("trainkit: ", 0) == 0 ? message.substr(10) : message;
}

/// JSON a study database holds: its own text parsed, or a trainkit::Error
/// that names `what` (a cell another program may have written).
inline nlohmann::json stored_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("trainkit: " + what + " is not JSON: " + e.what());
  }
}

/// A trial's parameter as stored: a distribution the study could have
/// suggested from and a value it can give back (a storage keeps a finite
/// float as it was given, in range or not, so only what `Param::value()`
/// could not convert or a sampler could not order is refused), else a
/// trainkit::Error naming the parameter.
inline Param stored_param(const std::string& name, const std::string& distribution,
                          const std::string& internal) {
  const std::string where = "the study database's parameter \"" + name + "\"";
  const auto named = [&](auto&& read) {  // the reader's error, naming the parameter
    try {
      return read();
    } catch (const Error& e) {
      throw Error("trainkit: " + where + ": " + without_prefix(e.what()));
    }
  };
  Param p{
      named([&] { return distribution_from_json(stored_json(distribution, "its distribution")); }),
      named([&] { return parse_double(internal); })};
  named([&] {
    try {
      validate(name, p.distribution);
    } catch (const Error& e) {
      throw Error("trainkit: it has a bad distribution: " + without_prefix(e.what()));
    }
    return 0;
  });
  const auto convertible = [&] {
    if (std::holds_alternative<FloatDistribution>(p.distribution)) return std::isfinite(p.internal);
    if (std::holds_alternative<IntDistribution>(p.distribution)) {
      return p.internal == std::round(p.internal) && std::abs(p.internal) <= 0x1p53;
    }
    return contains(p.distribution, p.internal);  // an index of a choice
  };
  if (!convertible()) {
    throw Error("trainkit: " + where + " holds " + internal + ", which its distribution " +
                distribution + " cannot take");
  }
  return p;
}

/// An attribute as `attr_text` (or Python's json.dumps) wrote it.
inline nlohmann::json attr_from_text(const std::string& text, const std::string& key) {
  std::string strict;  // Python's tokens outside strings -> their stand-ins
  strict.reserve(text.size());
  for (size_t k = 0; k < text.size();) {
    if (text[k] == '"') {  // a string, copied whole
      size_t end = k + 1;
      while (end < text.size() && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, text.size());
      strict.append(text, k, end - k);
      k = end;
      continue;
    }
    bool replaced = false;
    for (const auto token : kNonFiniteTokens) {
      if (text.compare(k, token.size(), token) != 0) continue;
      strict += nlohmann::json(non_finite_stand_in(token)).dump();
      k += token.size();
      replaced = true;
      break;
    }
    if (!replaced) strict += text[k++];
  }
  const auto decode = [](const auto& self, nlohmann::json& x) -> void {
    if (x.is_string()) {
      for (const auto token : kNonFiniteTokens) {
        if (x.get_ref<const std::string&>() != non_finite_stand_in(token)) continue;
        x = parse_double(std::string(token));
        break;
      }
    } else if (x.is_structured()) {
      for (auto& [name, item] : x.items()) self(self, item);
    }
  };
  auto v = stored_json(strict, "the study database's attribute \"" + key + "\"");
  decode(decode, v);
  return v;
}

/// Optuna's names of trainkit's states and directions: its enum member
/// names, trainkit's upper-cased ("complete" -> "COMPLETE").
template <class E>
std::string optuna_name(E e) {
  std::string name = tune::to_string(e);
  for (char& c : name) c = static_cast<char>(c - 'a' + 'A');
  return name;
}
inline TrialState trial_state_from_optuna(const std::string& name) {
  std::string accepted;
  for (const auto s : trial_states) {
    if (name == optuna_name(s)) return s;
    accepted += (accepted.empty() ? "" : ", ") + optuna_name(s);
  }
  throw Error("trainkit: stored trial state \"" + name + "\" is unknown; accepted: " + accepted);
}

/// A value's type column (Optuna's TrialValueType and
/// TrialIntermediateValueType): the value itself is stored only when finite.
inline std::string value_type(double x) {
  if (std::isnan(x)) return "NAN";
  if (std::isinf(x)) return x > 0 ? "INF_POS" : "INF_NEG";
  return "FINITE";
}

/// A cell that must not be NULL, as text and as an integer.
inline const std::string& cell_text(const std::optional<std::string>& cell) {
  if (!cell) throw Error("trainkit: the study database holds NULL where a value must be");
  return *cell;
}
inline int64_t cell_integer(const std::optional<std::string>& cell) {
  return parse_int(cell_text(cell));
}
/// A value column's cell: the value when finite, else NULL (its type says which).
inline SqlParam finite_or_null(double x) {
  return std::isfinite(x) ? SqlParam(x) : SqlParam(nullptr);
}
/// A value and its type column as `value_type` wrote them, as a double.
inline double typed_value(const std::optional<std::string>& value, const std::string& type) {
  if (type == value_type(0)) return parse_double(cell_text(value));
  std::string accepted = value_type(0);
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (const double x : {inf, -inf, std::numeric_limits<double>::quiet_NaN()}) {
    if (type == value_type(x)) return x;
    accepted += ", " + value_type(x);
  }
  throw Error("trainkit: stored value type \"" + type + "\" is unknown; accepted: " + accepted);
}

}  // namespace trainkit::tune::detail
