#pragma once
// What the study report's tables and charts share: trials in number order,
// parameters as text and as axes across trials, values as tips, colours
// and ranges.
#include <time.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainkit/detail/html.hpp"
#include "trainkit/detail/svg_chart.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/system_attrs.hpp"

namespace trainkit::tune::detail::reports {

namespace html = trainkit::detail::html;
namespace svg = trainkit::detail::svg;

/// A copy in trial-number order: the reports do not depend on the order a
/// caller or a storage lists trials in.
inline std::vector<FrozenTrial> by_number(std::span<const FrozenTrial> trials) {
  std::vector<FrozenTrial> out(trials.begin(), trials.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const FrozenTrial& a, const FrozenTrial& b) { return a.number < b.number; });
  return out;
}

/// Every parameter name any trial has, sorted.
inline std::vector<std::string> param_names(std::span<const FrozenTrial> trials) {
  std::set<std::string> names;
  for (const auto& t : trials) {
    for (const auto& [name, p] : t.params) names.insert(name);
  }
  return {names.begin(), names.end()};
}

/// The shortest text that reads back as the same double.
inline std::string exact(double v) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}

/// UTC, to the microsecond ("2023-11-14T22:13:20.250000Z"); "" for 0 (not yet).
inline std::string iso_time(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return "";
  const long long micros = std::llround(seconds * 1e6);
  const time_t whole = static_cast<time_t>(micros / 1000000);
  std::tm tm{};
  gmtime_r(&whole, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros % 1000000);
  return buf;
}

inline std::optional<double> duration_s(const FrozenTrial& t) {
  if (!t.finished() || !(t.started_at > 0) || !(t.finished_at > 0)) return std::nullopt;
  return t.finished_at - t.started_at;
}

/// Why a trial was pruned or failed ("" for the others).
inline std::string reason(const FrozenTrial& t) {
  const char* keys[] = {system_attr::kPruneReason, system_attr::kFailReason};
  if (t.state == TrialState::Fail) std::swap(keys[0], keys[1]);
  for (const char* key : keys) {
    const auto it = t.system_attrs.find(key);
    if (it != t.system_attrs.end()) return it->is_string() ? it->get<std::string>() : it->dump();
  }
  return "";
}

/// A parameter's value as text: numbers exactly, a string choice as itself,
/// other choices as JSON (true, null, 3).
inline std::string param_text(const Param& p) {
  if (std::holds_alternative<FloatDistribution>(p.distribution)) return exact(p.internal);
  if (std::holds_alternative<IntDistribution>(p.distribution))
    return std::to_string(static_cast<int64_t>(p.internal));
  const auto v = p.value();
  return v.is_string() ? v.get<std::string>() : v.dump();
}

/// RFC 4180: quoted when it holds a separator, a quote, a line break or
/// edge spaces; quotes doubled.
inline std::string csv_field(std::string_view s) {
  const bool quote = s.find_first_of(",\"\r\n") != std::string_view::npos ||
                     (!s.empty() && (s.front() == ' ' || s.back() == ' '));
  if (!quote) return std::string(s);
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

inline std::map<TrialState, int64_t> counts(std::span<const FrozenTrial> trials) {
  std::map<TrialState, int64_t> n;
  for (const auto s : trial_states) n[s] = 0;
  for (const auto& t : trials) ++n[t.state];
  return n;
}

/// A trial's colour by its state (complete blue, pruned orange, failed grey,
/// waiting or running green).
inline const char* state_color(TrialState s) {
  switch (s) {
    case TrialState::Complete:
      return svg::kBlue;
    case TrialState::Pruned:
      return svg::kOrange;
    case TrialState::Fail:
      return svg::kGrey;
    default:
      return svg::kGreen;
  }
}

/// One parameter across the trials: its kind, the union of its ranges (a
/// define-by-run range may change between trials) or its choices.
struct ParamAxis {
  std::string name;
  size_t kind = 0;  ///< Distribution::index(): float, int, categorical
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  bool log = true;  ///< when every trial's distribution is
  std::vector<nlohmann::json> choices;
  bool missing = false;  ///< some complete trial lacks it (a conditional parameter)

  bool categorical() const { return kind == 2; }
  svg::Scale scale(double a, double b) const { return {lo, hi, log, a, b}; }
  /// Where a trial's value lies along the axis, in [0, 1]; nullopt without one.
  std::optional<double> fraction(const FrozenTrial& t) const {
    const auto it = t.params.find(name);
    if (it == t.params.end() || it->second.distribution.index() != kind) return std::nullopt;
    if (!categorical()) return scale(0, 1).fraction(it->second.internal);
    const auto v = it->second.value();
    const auto k = std::find(choices.begin(), choices.end(), v) - choices.begin();
    if (k == static_cast<std::ptrdiff_t>(choices.size())) return std::nullopt;
    return (static_cast<double>(k) + 0.5) / static_cast<double>(choices.size());
  }
  std::string choice_label(size_t k) const {
    return choices[k].is_string() ? choices[k].get<std::string>() : choices[k].dump();
  }
  /// Tick values and their fractions along a numeric axis.
  std::vector<std::pair<double, double>> ticks() const {
    std::vector<std::pair<double, double>> out;
    const auto s = scale(0, 1);
    for (int k = 0; k <= 4; ++k) {
      double v = s.at(k / 4.0);
      if (kind == 1) v = std::round(v);
      if (out.empty() || v != out.back().first) out.emplace_back(v, s.fraction(v));
    }
    return out;
  }
};

inline std::vector<ParamAxis> param_axes(const std::vector<FrozenTrial>& all) {
  std::map<std::string, ParamAxis> axes;
  for (const auto& t : all) {
    for (const auto& [name, p] : t.params) {
      auto [it, first] = axes.try_emplace(name);
      auto& a = it->second;
      if (first) a.name = name, a.kind = p.distribution.index();
      if (p.distribution.index() != a.kind) continue;  // a storage's inconsistency: not drawn
      if (const auto* f = std::get_if<FloatDistribution>(&p.distribution)) {
        a.lo = std::min(a.lo, f->low), a.hi = std::max(a.hi, f->high), a.log &= f->log;
      } else if (const auto* i = std::get_if<IntDistribution>(&p.distribution)) {
        a.lo = std::min(a.lo, double(i->low)), a.hi = std::max(a.hi, double(i->high));
        a.log &= i->log;
      } else if (a.choices.empty()) {
        a.choices = std::get<CategoricalDistribution>(p.distribution).choices;
      }
    }
  }
  std::vector<ParamAxis> out;
  for (auto& [name, a] : axes) {
    if (a.categorical()) a.log = false;
    for (const auto& t : all) a.missing |= t.state == TrialState::Complete && !t.params.count(name);
    out.push_back(std::move(a));
  }
  return out;
}

/// Colour of an objective value: `badness` 0 (the best) to 1 (the worst),
/// along viridis, stopping before its pale end so that lines stay visible.
inline std::string value_color(double badness) {
  static constexpr int stops[][3] = {
      {0x44, 0x01, 0x54}, {0x3b, 0x52, 0x8b}, {0x21, 0x91, 0x8c}, {0x5e, 0xc9, 0x62}};
  const double x = std::clamp(badness, 0.0, 1.0) * 3;
  const int k = std::min(2, static_cast<int>(x));
  const double f = x - k;
  char buf[8];
  int rgb[3];
  for (int c = 0; c < 3; ++c)
    rgb[c] = static_cast<int>(std::lround(stops[k][c] + f * (stops[k + 1][c] - stops[k][c])));
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
  return buf;
}

inline std::string value_tip(const FrozenTrial& t) {
  std::string s = "trial " + std::to_string(t.number) + " (" + to_string(t.state) + ")";
  const auto values = t.objective_values();
  for (size_t k = 0; k < values.size(); ++k) s += (k ? ", " : ": ") + html::num(values[k], "%.6g");
  if (!t.feasible()) s += " (infeasible)";
  return s;
}

/// The finite values of complete trials (and of pruned ones too), as a range.
inline html::Range value_span(std::span<const FrozenTrial> all, bool with_pruned) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& t : all) {
    const bool drawn =
        t.state == TrialState::Complete || (with_pruned && t.state == TrialState::Pruned);
    if (drawn && t.value && std::isfinite(*t.value))
      lo = std::min(lo, *t.value), hi = std::max(hi, *t.value);
  }
  return {lo, hi};
}

}  // namespace trainkit::tune::detail::reports
