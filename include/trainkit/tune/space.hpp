#pragma once
// Search spaces: the three kinds of parameter a trial can suggest. Every
// value has an internal form, a double (an int as itself, a categorical as
// the index of its choice), which is what samplers and storages work on;
// `external` turns it back into the value the objective sees.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/error.hpp"

namespace trainkit::tune {

/// A real parameter in [low, high]; on a log scale, or on the grid
/// low, low + step, ... (not both).
struct FloatDistribution {
  double low = 0;
  double high = 1;
  bool log = false;
  std::optional<double> step;
  bool operator==(const FloatDistribution&) const = default;
};

/// An integer parameter in [low, high] on the grid low, low + step, ...;
/// on a log scale when `log` (then step is 1).
struct IntDistribution {
  int64_t low = 0;
  int64_t high = 1;
  int64_t step = 1;
  bool log = false;
  bool operator==(const IntDistribution&) const = default;
};

/// One of a list of values (strings, numbers, booleans, null).
struct CategoricalDistribution {
  std::vector<nlohmann::json> choices;
  bool operator==(const CategoricalDistribution&) const = default;
};

using Distribution = std::variant<FloatDistribution, IntDistribution, CategoricalDistribution>;

namespace detail {

/// Whether `v` is a value a study can store and give back: a string in
/// UTF-8, a finite number, a boolean or null.
inline bool storable(const nlohmann::json& v) {
  if (!v.is_primitive()) return false;
  if (v.is_number_float()) return std::isfinite(v.get<double>());
  try {
    (void)v.dump();  // throws on text that is not UTF-8
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

/// `v` as an error message shows it (NaN as "nan", bad UTF-8 replaced).
inline std::string shown(const nlohmann::json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>()))
    return std::to_string(v.get<double>());
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// The highest grid point not above `high`: low + k * step.
inline double grid_top(double low, double high, double step) {
  return low + std::floor((high - low) / step + 1e-9) * step;
}

}  // namespace detail

/// `dist` as Optuna stores it: an integer range whose width the step does
/// not divide ends at its last grid point (0..10 step 3 is 0..9), as
/// IntDistribution's constructor makes it (Optuna warns on every load of
/// one that does not).
inline Distribution normalized(Distribution dist) {
  if (auto* i = std::get_if<IntDistribution>(&dist))
    i->high = i->low + (i->high - i->low) / i->step * i->step;
  return dist;
}

/// Throws trainkit::Error naming the parameter and the bad bound.
inline void validate(const std::string& name, const Distribution& dist) {
  using trainkit::detail::require_option;
  const std::string where = "suggest(\"" + name + "\")";
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) {
    require_option(
        std::isfinite(f->low) && std::isfinite(f->high) && f->low <= f->high &&
            std::isfinite(f->high - f->low),
        where + ".low", f->low,
        "finite bounds with low <= high = " + std::to_string(f->high) + " and a finite width");
    require_option(!f->log || f->low > 0, where + ".low", f->low, "> 0 on a log scale");
    require_option(!(f->log && f->step), where + ".step", f->step.value_or(0),
                   "no step on a log scale (log = true)");
    require_option(!f->step || (std::isfinite(*f->step) && *f->step > 0), where + ".step",
                   f->step.value_or(0), "a positive number");
  } else if (const auto* i = std::get_if<IntDistribution>(&dist)) {
    // Values travel as doubles: exact up to 2^53.
    constexpr int64_t exact = int64_t{1} << 53;
    require_option(-exact <= i->low && i->low <= i->high && i->high <= exact, where + ".low",
                   i->low, "low <= high = " + std::to_string(i->high) + ", both within +-2^53");
    require_option(i->step >= 1, where + ".step", i->step, "an integer >= 1");
    require_option(!i->log || i->low >= 1, where + ".low", i->low, ">= 1 on a log scale");
    require_option(!i->log || i->step == 1, where + ".step", i->step, "1 on a log scale");
  } else {
    const auto& c = std::get<CategoricalDistribution>(dist);
    require_option(!c.choices.empty(), where + ".choices", std::string("[]"),
                   "at least one choice");
    for (const auto& choice : c.choices) {
      require_option(detail::storable(choice), where + ".choices", detail::shown(choice),
                     "strings in UTF-8, finite numbers, booleans or null");
    }
  }
}

/// Whether `internal` is a value `dist` can take.
inline bool contains(const Distribution& dist, double internal) {
  if (!std::isfinite(internal)) return false;
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) {
    if (!f->step) return f->low <= internal && internal <= f->high;
    const double k = (internal - f->low) / *f->step;
    return internal >= f->low && internal <= f->high + 1e-9 * *f->step &&
           std::abs(k - std::round(k)) < 1e-6;
  }
  if (const auto* i = std::get_if<IntDistribution>(&dist)) {
    return internal == std::round(internal) && i->low <= internal && internal <= i->high &&
           (static_cast<int64_t>(internal) - i->low) % i->step == 0;
  }
  const auto n = std::get<CategoricalDistribution>(dist).choices.size();
  return internal == std::round(internal) && internal >= 0 && internal < static_cast<double>(n);
}

/// The number of values of a discrete distribution; nullopt for a continuous one.
inline std::optional<int64_t> cardinality(const Distribution& dist) {
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) {
    if (!f->step) return std::nullopt;
    return static_cast<int64_t>(std::floor((f->high - f->low) / *f->step + 1e-9)) + 1;
  }
  if (const auto* i = std::get_if<IntDistribution>(&dist)) return (i->high - i->low) / i->step + 1;
  return static_cast<int64_t>(std::get<CategoricalDistribution>(dist).choices.size());
}

/// The highest value of a numerical distribution: `high`, or the last grid
/// point at or below it.
inline double highest(const Distribution& dist) {
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) {
    return f->step ? detail::grid_top(f->low, f->high, *f->step) : f->high;
  }
  const auto& i = std::get<IntDistribution>(dist);
  return static_cast<double>(i.low + (i.high - i.low) / i.step * i.step);
}

/// The value of a distribution that has one value, if it has one (nothing
/// for a sampler to model).
inline std::optional<double> single_value(const Distribution& dist) {
  if (const auto* c = std::get_if<CategoricalDistribution>(&dist)) {
    return c->choices.size() == 1 ? std::optional(0.0) : std::nullopt;
  }
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) {
    const bool one = f->step ? *cardinality(dist) == 1 : f->low == f->high;
    return one ? std::optional(f->low) : std::nullopt;
  }
  const auto& i = std::get<IntDistribution>(dist);
  return *cardinality(dist) == 1 ? std::optional(static_cast<double>(i.low)) : std::nullopt;
}

/// `space` without its single-value distributions: what a sampler models.
inline std::map<std::string, Distribution> varying(std::map<std::string, Distribution> space) {
  std::erase_if(space, [](const auto& entry) { return single_value(entry.second).has_value(); });
  return space;
}

/// Rounds a real number to the nearest value `dist` can take (grids, ints,
/// categorical indices), clamped to the bounds.
inline double snap(const Distribution& dist, double x) {
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) {
    if (!f->step) return std::clamp(x, f->low, f->high);
    return std::clamp(f->low + std::round((x - f->low) / *f->step) * *f->step, f->low,
                      highest(dist));
  }
  if (const auto* i = std::get_if<IntDistribution>(&dist)) {
    const double k = std::round((x - static_cast<double>(i->low)) / static_cast<double>(i->step));
    return std::clamp(static_cast<double>(i->low) + k * static_cast<double>(i->step),
                      static_cast<double>(i->low), highest(dist));
  }
  const auto n = std::get<CategoricalDistribution>(dist).choices.size();
  return std::clamp(std::round(x), 0.0, static_cast<double>(n - 1));
}

/// The value the objective sees, as JSON (a number, or the chosen choice).
inline nlohmann::json external(const Distribution& dist, double internal) {
  if (std::holds_alternative<FloatDistribution>(dist)) return internal;
  if (std::holds_alternative<IntDistribution>(dist)) return static_cast<int64_t>(internal);
  return std::get<CategoricalDistribution>(dist).choices.at(static_cast<size_t>(internal));
}

/// The internal form of an external value (an enqueued trial's parameter);
/// nullopt when `dist` cannot take it.
inline std::optional<double> internal(const Distribution& dist, const nlohmann::json& value) {
  if (const auto* c = std::get_if<CategoricalDistribution>(&dist)) {
    for (size_t k = 0; k < c->choices.size(); ++k) {
      if (c->choices[k] == value) return static_cast<double>(k);
    }
    return std::nullopt;
  }
  if (!value.is_number()) return std::nullopt;
  const double x = value.get<double>();
  return contains(dist, x) ? std::optional<double>(x) : std::nullopt;
}

/// Two suggestions of one name across trials must be of the same kind (and a
/// categorical of the same choices); ranges may change (define-by-run).
inline bool compatible(const Distribution& a, const Distribution& b) {
  if (a.index() != b.index()) return false;
  if (const auto* ca = std::get_if<CategoricalDistribution>(&a)) {
    return *ca == std::get<CategoricalDistribution>(b);
  }
  return true;
}

inline nlohmann::json to_json(const Distribution& dist) {
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) {
    nlohmann::json j = {{"type", "float"}, {"low", f->low}, {"high", f->high}, {"log", f->log}};
    if (f->step) j["step"] = *f->step;
    return j;
  }
  if (const auto* i = std::get_if<IntDistribution>(&dist)) {
    return {
        {"type", "int"}, {"low", i->low}, {"high", i->high}, {"step", i->step}, {"log", i->log}};
  }
  return {{"type", "categorical"}, {"choices", std::get<CategoricalDistribution>(dist).choices}};
}

/// `dist` as Optuna stores it (`distribution_json` of its trial_params):
/// {"name": "FloatDistribution", "attributes": {...}}.
inline nlohmann::json to_optuna_json(const Distribution& dist) {
  if (const auto* f = std::get_if<FloatDistribution>(&dist)) {
    const nlohmann::json step = f->step ? nlohmann::json(*f->step) : nlohmann::json(nullptr);
    return {{"name", "FloatDistribution"},
            {"attributes", {{"step", step}, {"low", f->low}, {"high", f->high}, {"log", f->log}}}};
  }
  if (const auto* i = std::get_if<IntDistribution>(&dist)) {
    return {
        {"name", "IntDistribution"},
        {"attributes", {{"log", i->log}, {"step", i->step}, {"low", i->low}, {"high", i->high}}}};
  }
  return {{"name", "CategoricalDistribution"},
          {"attributes", {{"choices", std::get<CategoricalDistribution>(dist).choices}}}};
}

namespace detail {

/// Optuna's stored form (its current classes and the ones before 3.0) in
/// the short form `to_json` writes; other JSON as it is.
inline nlohmann::json from_optuna_form(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() ||
      !j.contains("attributes") || !j["attributes"].is_object()) {
    return j;
  }
  const auto& a = j["attributes"];
  const auto name = j["name"].get<std::string>();
  nlohmann::json out = nlohmann::json::object();
  const auto copy = [&](const char* from, const char* to) {
    if (a.contains(from) && !a[from].is_null()) out[to] = a[from];
  };
  copy("low", "low");
  copy("high", "high");
  if (name == "FloatDistribution" || name == "UniformDistribution" ||
      name == "LogUniformDistribution" || name == "DiscreteUniformDistribution") {
    out["type"] = "float";
    copy("log", "log");
    copy("step", "step");
    copy("q", "step");
    if (name == "LogUniformDistribution") out["log"] = true;
  } else if (name == "IntDistribution" || name == "IntUniformDistribution" ||
             name == "IntLogUniformDistribution") {
    out["type"] = "int";
    copy("log", "log");
    copy("step", "step");
    if (name == "IntLogUniformDistribution") out["log"] = true;
  } else if (name == "CategoricalDistribution") {
    out["type"] = "categorical";
    copy("choices", "choices");
  } else {
    out["type"] = name;  // named in the error below
  }
  return out;
}

}  // namespace detail

/// A distribution as `to_json` or `to_optuna_json` writes it (or as Optuna
/// wrote it before 3.0: UniformDistribution and the like). The JSON may come
/// from a study database another program wrote: anything else is a trainkit::Error
/// naming what is wrong, never a JSON library's exception or a cast of a
/// number no int64 holds.
inline Distribution distribution_from_json(const nlohmann::json& stored) {
  const auto j = detail::from_optuna_form(stored);
  const auto bad = [&](const std::string& why) {
    return Error("trainkit: stored distribution " + detail::shown(stored) + " " + why);
  };
  const auto field = [&](const char* key) -> const nlohmann::json* {
    const auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };
  const auto number = [&](const char* key) {
    const auto* v = field(key);
    if (!v || !v->is_number()) throw bad(std::string("has no number \"") + key + "\"");
    return v->get<double>();
  };
  const auto integer = [&](const char* key, std::optional<int64_t> absent) {
    const auto* v = field(key);
    if (!v && absent) return *absent;
    if (v && v->is_number_integer() &&
        (!v->is_number_unsigned() ||
         v->get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()))) {
      return v->get<int64_t>();
    }
    throw bad(std::string("has \"") + key + "\" " + (v ? detail::shown(*v) : "nothing") +
              ", not an int64");
  };
  const auto flag = [&](const char* key) {
    const auto* v = field(key);
    if (v && !v->is_boolean()) throw bad(std::string("has a \"") + key + "\" that is not a bool");
    return v && v->get<bool>();
  };
  if (!j.is_object() || !field("type") || !field("type")->is_string()) {
    throw bad(
        "is not one: accepted: an object whose \"type\" is float, int or categorical, or "
        "Optuna's {\"name\": ..., \"attributes\": ...}");
  }
  const auto type = j.at("type").get<std::string>();
  if (type == "float") {
    FloatDistribution f{number("low"), number("high"), flag("log"), std::nullopt};
    if (field("step")) f.step = number("step");
    return f;
  }
  if (type == "int") {
    return IntDistribution{integer("low", std::nullopt), integer("high", std::nullopt),
                           integer("step", 1), flag("log")};
  }
  if (type == "categorical") {
    const auto* choices = field("choices");
    if (!choices || !choices->is_array()) throw bad("has no array \"choices\"");
    return CategoricalDistribution{choices->get<std::vector<nlohmann::json>>()};
  }
  throw bad("is of unknown type \"" + type +
            "\"; accepted: float, int, categorical (Optuna's FloatDistribution, IntDistribution, "
            "CategoricalDistribution and their forms before 3.0)");
}

/// A parameter of a trial: where it was drawn from, and the draw.
struct Param {
  Distribution distribution;
  double internal = 0;
  nlohmann::json value() const { return tune::external(distribution, internal); }
};

/// The parameters a sampler models jointly: name -> distribution.
using SearchSpace = std::map<std::string, Distribution>;

}  // namespace trainkit::tune
