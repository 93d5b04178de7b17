#pragma once
// Reports of a study, from its trials (Study::trials(), or a storage's):
//   write_trials_csv    one row per trial, a column per parameter (blank
//                       where a trial lacks one: conditional parameters)
//   write_trials_json   the same and the intermediate values, the
//                       distributions and the best trial
//   write_study_report  one self-contained HTML page (inline SVG, no script,
//                       no network): best value and parameters, trial counts,
//                       the optimisation history, a slice plot per parameter,
//                       parallel coordinates and the learning curves; for
//                       several objectives, the Pareto front instead of the
//                       history, slices and parallel coordinates
// All three are written atomically, and are the same bytes for the same
// trials (no clock is read), so a report can be rewritten after every trial.
#include <time.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
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
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/tune/pareto.hpp"
#include "trainkit/tune/record.hpp"

namespace trainkit::tune {

namespace detail::reports {

namespace html = trainkit::detail::html;

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
  const char* keys[] = {"prune_reason", "fail_reason"};
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

}  // namespace detail::reports

/// The CSV text of write_trials_csv; a study of several `objectives` has a
/// `values_<k>` column per objective.
inline std::string trials_csv(std::span<const FrozenTrial> trials, size_t objectives = 1) {
  using namespace detail::reports;
  const auto all = by_number(trials);
  const auto names = param_names(all);
  if (objectives < 2) objectives = 0;
  std::string s = "number,state,value";
  for (size_t k = 0; k < objectives; ++k) s += ",values_" + std::to_string(k);
  s += ",started,finished,duration_s";
  // (s += ','; s += field: GCC 12 warns falsely, -Wrestrict, on "," + field)
  for (const auto& name : names) {
    s += ',';
    s += csv_field("params_" + name);
  }
  s += ",reason\n";
  for (const auto& t : all) {
    const auto d = duration_s(t);
    s += std::to_string(t.number) + "," + to_string(t.state) + "," +
         (t.value ? exact(*t.value) : "");
    for (size_t k = 0; k < objectives; ++k) {
      s += ',';
      if (k < t.values.size()) s += exact(t.values[k]);
    }
    s += "," + iso_time(t.started_at) + "," + iso_time(t.finished_at) + "," + (d ? exact(*d) : "");
    for (const auto& name : names) {
      const auto p = t.params.find(name);
      s += ',';
      if (p != t.params.end()) s += csv_field(param_text(p->second));
    }
    s += ',';
    s += csv_field(reason(t));
    s += '\n';
  }
  return s;
}

/// The document of write_trials_json.
inline nlohmann::json trials_json(std::string_view study_name,
                                  const std::vector<Direction>& directions,
                                  std::span<const FrozenTrial> trials) {
  using namespace detail::reports;
  using nlohmann::json;
  const auto all = by_number(trials);
  const auto view = StudyView::of(directions, all);
  json out = {{"study", study_name}};
  if (directions.size() == 1) {
    out["direction"] = to_string(directions[0]);
  } else {
    for (const auto d : directions) out["directions"].push_back(to_string(d));
  }
  json n = json::object();
  for (const auto& [state, count] : counts(all)) n[to_string(state)] = count;
  out["counts"] = n;
  out["params"] = param_names(all);
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json rows = json::array();
  for (const auto& t : all) {
    json distributions = json::object(), intermediate = json::array();
    for (const auto& [name, param] : t.params) distributions[name] = to_json(param.distribution);
    for (const auto& [step, value] : t.intermediate) intermediate.push_back({step, value});
    const auto d = duration_s(t);
    rows.push_back({{"number", t.number},
                    {"state", to_string(t.state)},
                    {"value", t.value ? json(*t.value) : json(nullptr)},
                    {"started", or_null(iso_time(t.started_at))},
                    {"finished", or_null(iso_time(t.finished_at))},
                    {"duration_s", d ? json(*d) : json(nullptr)},
                    {"params", t.param_values()},
                    {"distributions", distributions},
                    {"intermediate", intermediate},
                    {"reason", or_null(reason(t))},
                    {"user_attrs", t.user_attrs}});
    if (!t.values.empty()) rows.back()["values"] = t.values;
    if (const auto c = t.constraints()) rows.back()["constraints"] = *c;
  }
  if (directions.size() == 1) {
    const auto* best = view.best();
    out["best_trial"] = best ? json{{"number", best->number},
                                    {"value", *best->value},
                                    {"params", best->param_values()}}
                             : json(nullptr);
  } else {
    out["best_trials"] = json::array();
    for (const auto* t : best_trials(view)) {
      out["best_trials"].push_back(
          {{"number", t->number}, {"values", t->values}, {"params", t->param_values()}});
    }
  }
  out["trials"] = std::move(rows);
  return out;
}

inline nlohmann::json trials_json(std::string_view study_name, Direction direction,
                                  std::span<const FrozenTrial> trials) {
  return trials_json(study_name, std::vector{direction}, trials);
}

/// One row per trial (in number order): number, state, value (with several
/// `objectives`, `values_<k>` columns too), started and finished (UTC),
/// duration_s, a `params_<name>` column per parameter of any trial (blank
/// where a trial lacks it), the prune or fail reason.
inline void write_trials_csv(const std::filesystem::path& path, std::span<const FrozenTrial> trials,
                             size_t objectives = 1) {
  trainkit::detail::require_file_path("write_trials_csv.path", path, "study/trials.csv");
  io::write_file_atomically(path, trials_csv(trials, objectives));
}

/// {"study", "direction", "counts", "params", "best_trial", "trials": [{number,
/// state, value, started, finished, duration_s, params, distributions,
/// intermediate: [[step, value], ...], reason, user_attrs}]}; with several
/// objectives "directions" and "best_trials" (the Pareto front: number,
/// values, params), and each trial's "values"; a trial's "constraints".
inline void write_trials_json(const std::filesystem::path& path, std::string_view study_name,
                              const std::vector<Direction>& directions,
                              std::span<const FrozenTrial> trials) {
  trainkit::detail::require_file_path("write_trials_json.path", path, "study/trials.json");
  io::write_file_atomically(path, trials_json(study_name, directions, trials).dump() + "\n");
}
inline void write_trials_json(const std::filesystem::path& path, std::string_view study_name,
                              Direction direction, std::span<const FrozenTrial> trials) {
  write_trials_json(path, study_name, std::vector{direction}, trials);
}

namespace detail::reports {

inline constexpr int kPageLeft = 20, kPageWidth = 1160, kChartGap = 20;
inline constexpr const char* kCompleteColor = "#1f77b4";
inline constexpr const char* kPrunedColor = "#ff7f0e";
inline constexpr const char* kBestColor = "#d62728";
inline constexpr const char* kFailColor = "#7f7f7f";
inline constexpr const char* kRunningColor = "#2ca02c";

inline const char* state_color(TrialState s) {
  switch (s) {
    case TrialState::Complete:
      return kCompleteColor;
    case TrialState::Pruned:
      return kPrunedColor;
    case TrialState::Fail:
      return kFailColor;
    default:
      return kRunningColor;
  }
}

/// At most `chars` characters of `s` (whole UTF-8 sequences), "…" when cut.
inline std::string shorten(const std::string& s, size_t chars) {
  size_t count = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;  // a continuation byte
    if (count++ == chars) return s.substr(0, i) + "\xE2\x80\xA6";
  }
  return s;
}

/// A chart's place on the page and its plot area inside it.
struct Frame {
  int left, top, width, height;
  int pad_left = 72, pad_right = 24, pad_top = 34, pad_bottom = 44;
  int x0() const { return pad_left; }
  int y0() const { return pad_top; }
  int w() const { return width - pad_left - pad_right; }
  int h() const { return height - pad_top - pad_bottom; }
  int x1() const { return x0() + w(); }
  int y1() const { return y0() + h(); }
  std::string open(const std::string& title, const std::string& attributes = {}) const {
    return html::chart_open(title, left, top, width, height, attributes) +
           html::plot_area(x0(), y0(), w(), h()) + html::text(x0(), 20, title, "class=\"title\"");
  }
};

/// [lo, hi] (linear or log10) onto the pixels [a, b].
struct Scale {
  double lo = 0, hi = 1;
  bool log = false;
  double a = 0, b = 1;

  double t(double v) const { return log ? std::log10(v) : v; }
  double fraction(double v) const {
    return t(hi) == t(lo) ? 0.5 : (t(v) - t(lo)) / (t(hi) - t(lo));
  }
  double operator()(double v) const { return a + fraction(v) * (b - a); }
  double at(double f) const {  // the value at fraction f of the way
    const double x = t(lo) + f * (t(hi) - t(lo));
    return log ? std::pow(10.0, x) : x;
  }
};

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
  Scale scale(double a, double b) const { return {lo, hi, log, a, b}; }
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

/// Five horizontal grid lines across the plot, labelled with their values.
inline std::string y_grid(const Frame& f, const Scale& y) {
  std::string s;
  for (int k = 0; k <= 4; ++k) {
    const double v = y.at(k / 4.0), py = y(v);
    if (k > 0 && k < 4)
      s += "<line x1=\"" + std::to_string(f.x0()) + "\" x2=\"" + std::to_string(f.x1()) +
           "\" y1=\"" + html::num(py, "%.1f") + "\" y2=\"" + html::num(py, "%.1f") +
           "\" stroke=\"#eeeeee\"/>\n";
    s += html::text(f.x0() - 6, py + 4, html::num(v), "text-anchor=\"end\"");
  }
  return s;
}

inline std::string cross(double x, double y, const char* color, double r = 4) {
  return "<path d=\"M" + html::num(x - r, "%.1f") + " " + html::num(y - r, "%.1f") + "L" +
         html::num(x + r, "%.1f") + " " + html::num(y + r, "%.1f") + "M" +
         html::num(x - r, "%.1f") + " " + html::num(y + r, "%.1f") + "L" +
         html::num(x + r, "%.1f") + " " + html::num(y - r, "%.1f") + "\" stroke=\"" + color +
         "\" stroke-width=\"2\" fill=\"none\"/>\n";
}

inline std::string dot(double x, double y, const char* color, const std::string& tip,
                       const std::string& cls, double r = 3.5) {
  return "<circle class=\"" + cls + "\" cx=\"" + html::num(x, "%.1f") + "\" cy=\"" +
         html::num(y, "%.1f") + "\" r=\"" + html::num(r) + "\" fill=\"" + color + "\"><title>" +
         html::escape(tip) + "</title></circle>\n";
}

/// Legend entries (colour, label) right of the title.
inline std::string legend(const Frame& f, int title_chars,
                          const std::vector<std::pair<const char*, std::string>>& entries) {
  std::string s;
  int x = f.x0() + 24 + 8 * title_chars;
  for (const auto& [color, label] : entries) {
    s += "<rect x=\"" + std::to_string(x) + "\" y=\"11\" width=\"10\" height=\"10\" fill=\"" +
         color + "\"/>\n";
    s += html::text(x + 14, 20, label);
    x += 30 + 7 * static_cast<int>(label.size());
  }
  return s;
}

inline std::string empty_note(const Frame& f, const std::string& what) {
  return html::text(f.x0() + f.w() / 2, f.y0() + f.h() / 2, what, "text-anchor=\"middle\"");
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

/// Each trial's value against its number: complete trials as dots, pruned
/// ones (their last intermediate value) as crosses, failed ones as ticks on
/// the axis, and the best value so far as a step line.
inline std::string history_chart(const Frame& f, const StudyView& view) {
  std::string s = f.open("optimisation history");
  s += legend(f, 20,
              {{kCompleteColor, "complete"},
               {kPrunedColor, "pruned (last reported)"},
               {kBestColor, "best so far"},
               {kFailColor, "failed"}});
  const auto all = view.trials;
  if (all.empty()) return s + empty_note(f, "no trial yet") + "</svg>\n";
  const auto span = value_span(all, true);
  const auto yr = html::value_range(span.lo, span.hi);
  const Scale y{yr.lo, yr.hi, false, double(f.y1()), double(f.y0())};
  const Scale x{double(all.front().number), double(all.back().number), false, f.x0() + 12.0,
                f.x1() - 12.0};
  s += y_grid(f, y);
  s += html::text(f.x0(), f.y1() + 16, std::to_string(all.front().number));
  s += html::text(f.x1(), f.y1() + 16, "trial " + std::to_string(all.back().number),
                  "text-anchor=\"end\"");
  std::string best_line;
  std::optional<double> best;
  for (const auto& t : all) {
    const double px = x(double(t.number));
    if (t.state == TrialState::Fail) {
      s += "<line class=\"fail\" x1=\"" + html::num(px, "%.1f") + "\" x2=\"" +
           html::num(px, "%.1f") + "\" y1=\"" + std::to_string(f.y1() - 8) + "\" y2=\"" +
           std::to_string(f.y1()) + "\" stroke=\"" + kFailColor + "\" stroke-width=\"2\"/>\n";
      continue;
    }
    if (!t.value || !std::isfinite(*t.value)) continue;
    const double py = y(*t.value);
    if (t.state == TrialState::Pruned) {
      s += cross(px, py, kPrunedColor);
    } else if (t.state == TrialState::Complete) {
      s += dot(px, py, kCompleteColor, value_tip(t), "complete");
      if (best) best_line += html::point(px, y(*best));  // the step
      if (t.feasible() && (!best || view.better(*t.value, *best))) best = *t.value;
      best_line += html::point(px, y(*best));
    }
  }
  if (!best_line.empty())
    s += "<polyline class=\"best\" fill=\"none\" stroke=\"" + std::string(kBestColor) +
         "\" stroke-width=\"2\" points=\"" + best_line + "\"/>\n";
  return s + "</svg>\n";
}

/// The value of every complete trial against one parameter: a numeric axis
/// (log10 for a log parameter) or a column per choice.
inline std::string slice_chart(const Frame& f, const ParamAxis& axis,
                               const std::vector<FrozenTrial>& all) {
  std::string s = f.open("slice: " + axis.name, " data-param=\"" + html::escape(axis.name) +
                                                    "\" data-scale=\"" +
                                                    (axis.categorical() ? "categorical"
                                                     : axis.log         ? "log"
                                                                        : "linear") +
                                                    "\"");
  const auto span = value_span(all, false);
  const auto yr = html::value_range(span.lo, span.hi);
  const Scale y{yr.lo, yr.hi, false, double(f.y1()), double(f.y0())};
  s += y_grid(f, y);
  const double a = f.x0() + 12.0, b = f.x1() - 12.0;  // dots off the frame
  const int label_y = f.y1() + 16;
  if (axis.categorical()) {
    const size_t n = axis.choices.size();
    const double column = f.w() / double(n);
    const size_t every = std::max<size_t>(1, size_t(std::ceil(n * 40.0 / f.w())));
    const size_t chars = std::max<size_t>(3, size_t(column * double(every) / 7));
    for (size_t k = 0; k < n; k += every)
      s += html::text(f.x0() + (double(k) + 0.5) * column, label_y,
                      shorten(axis.choice_label(k), chars), "text-anchor=\"middle\"");
  } else {
    for (const auto& [v, frac] : axis.ticks())
      s += html::text(a + frac * (b - a), label_y, html::num(v), "text-anchor=\"middle\"");
  }
  s += html::text(f.x0() + f.w() / 2, f.y1() + 34,
                  shorten(axis.name, size_t(f.w() / 7)) + (axis.log ? " (log)" : ""),
                  "text-anchor=\"middle\" class=\"title\"");
  int drawn = 0;
  for (const auto& t : all) {
    if (t.state != TrialState::Complete || !t.value || !std::isfinite(*t.value)) continue;
    const auto frac = axis.fraction(t);
    if (!frac) continue;
    double px = axis.categorical() ? f.x0() + *frac * f.w() : a + *frac * (b - a);
    if (axis.categorical()) {  // spread a column's dots, the same way every time
      const double column = f.w() / double(axis.choices.size());
      const double jitter = std::fmod(double(t.number) * 0.6180339887, 1.0) - 0.5;
      px += jitter * std::min(column * 0.5, 40.0);
    }
    s += dot(px, y(*t.value), kCompleteColor,
             value_tip(t) + ", " + axis.name + " = " + param_text(t.params.at(axis.name)),
             "complete");
    ++drawn;
  }
  if (drawn == 0) s += empty_note(f, "no complete trial with this parameter");
  return s + "</svg>\n";
}

/// One polyline per complete trial across an axis per parameter and one for
/// the objective, coloured by value (dark: best). A trial without a
/// (conditional) parameter crosses that axis at "none", below it.
inline std::string parallel_chart(Frame f, const std::vector<ParamAxis>& axes,
                                  const StudyView& view) {
  f.pad_top = 58, f.pad_left = 40, f.pad_right = 40, f.pad_bottom = 20;
  std::string s = f.open("parallel coordinates");
  {  // the colour scale, right of the title
    int x = f.x0() + 190;
    s += html::text(x, 20, "best");
    x += 34;
    for (int k = 0; k < 8; ++k, x += 12)
      s += "<rect x=\"" + std::to_string(x) + "\" y=\"11\" width=\"12\" height=\"10\" fill=\"" +
           value_color(k / 7.0) + "\"/>\n";
    s += html::text(x + 6, 20, "worst objective value");
  }
  std::vector<const FrozenTrial*> complete;
  for (const auto& t : view.trials)
    if (t.state == TrialState::Complete && t.value && std::isfinite(*t.value))
      complete.push_back(&t);
  const auto span = value_span(view.trials, false);
  const Scale objective{span.lo, span.hi, false, 0, 1};
  const double top = f.y0() + 10, bottom = f.y1() - 30, none = f.y1() - 12;
  const size_t n_axes = axes.size() + 1;
  const double spacing = f.w() / double(n_axes - 1);
  const size_t chars = std::max<size_t>(4, size_t(spacing / 7.5));
  auto ax = [&](size_t k) { return f.x0() + spacing * double(k); };
  auto ay = [&](double frac) { return bottom - frac * (bottom - top); };
  // Axes, their names and ranges.
  for (size_t k = 0; k < n_axes; ++k) {
    const bool is_objective = k == axes.size();
    const double x = ax(k);
    const char* anchor = k == 0 ? "start" : is_objective ? "end" : "middle";
    const std::string name = is_objective ? "objective" : axes[k].name;
    s += "<line class=\"axis\" x1=\"" + html::num(x, "%.1f") + "\" x2=\"" + html::num(x, "%.1f") +
         "\" y1=\"" + html::num(top, "%.1f") + "\" y2=\"" + html::num(bottom, "%.1f") +
         "\" stroke=\"#888888\"/>\n";
    s += html::text(x, f.y0() - 8, shorten(name, chars),
                    "class=\"title\" text-anchor=\"" + std::string(anchor) + "\"");
    const std::string side = "text-anchor=\"" + std::string(is_objective ? "end" : "start") + "\"";
    const double dx = is_objective ? -4 : 4;
    if (is_objective) {
      if (!complete.empty()) {
        s += html::text(x + dx, top + 4, html::num(span.hi), side);
        s += html::text(x + dx, bottom + 4, html::num(span.lo), side);
      }
      continue;
    }
    const auto& axis = axes[k];
    if (axis.categorical()) {
      const size_t n = axis.choices.size();
      const size_t every = std::max<size_t>(1, size_t(std::ceil(double(n) * 16 / (bottom - top))));
      for (size_t c = 0; c < n; c += every)
        s += html::text(x + dx, ay((double(c) + 0.5) / double(n)) + 4,
                        shorten(axis.choice_label(c), chars), side);
    } else {
      const auto ticks = axis.ticks();
      for (const auto& [v, frac] : {ticks.front(), ticks.back()})
        s += html::text(x + dx, ay(frac) + 4, html::num(v), side);
    }
    if (axis.missing) s += html::text(x + dx, none + 4, "none", side + " font-style=\"italic\"");
  }
  if (complete.empty()) return s + empty_note(f, "no complete trial yet") + "</svg>\n";
  // The worst first, so that the best are drawn on top.
  auto badness = [&](const FrozenTrial* t) {
    const double frac = objective.fraction(*t->value);
    return view.direction == Direction::Minimize ? frac : 1 - frac;
  };
  std::stable_sort(complete.begin(), complete.end(), [&](const auto* p, const auto* q) {
    return badness(p) > badness(q) || (badness(p) == badness(q) && p->number < q->number);
  });
  for (const auto* t : complete) {
    std::string points;
    for (size_t k = 0; k < axes.size(); ++k) {
      const auto frac = axes[k].fraction(*t);
      points += html::point(ax(k), frac ? ay(*frac) : none);
    }
    points += html::point(ax(axes.size()), ay(objective.fraction(*t->value)));
    s += "<polyline class=\"trial\" data-trial=\"" + std::to_string(t->number) +
         "\" fill=\"none\" stroke=\"" + value_color(badness(t)) +
         "\" stroke-width=\"1.5\" stroke-opacity=\"0.85\" points=\"" + points + "\"><title>" +
         html::escape(value_tip(*t)) + "</title></polyline>\n";
  }
  return s + "</svg>\n";
}

/// The first two objectives against each other: complete trials as dots,
/// the Pareto front (best_trials) as red dots joined in order of the first
/// objective, trials whose constraints do not hold as grey crosses.
inline std::string pareto_chart(const Frame& f, const StudyView& view) {
  std::string s = f.open("pareto front");
  s += legend(f, 12,
              {{kCompleteColor, "complete"},
               {kBestColor, "Pareto front"},
               {kFailColor, "constraints broken"}});
  std::vector<const FrozenTrial*> drawn;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& t : view.trials) {
    if (t.state != TrialState::Complete || t.values.size() < 2 || !std::isfinite(t.values[0]) ||
        !std::isfinite(t.values[1]))
      continue;
    drawn.push_back(&t);
    x0 = std::min(x0, t.values[0]), x1 = std::max(x1, t.values[0]);
    y0 = std::min(y0, t.values[1]), y1 = std::max(y1, t.values[1]);
  }
  if (drawn.empty()) return s + empty_note(f, "no complete trial yet") + "</svg>\n";
  const auto xr = html::value_range(x0, x1), yr = html::value_range(y0, y1);
  const Scale x{xr.lo, xr.hi, false, f.x0() + 12.0, f.x1() - 12.0};
  const Scale y{yr.lo, yr.hi, false, double(f.y1()), double(f.y0())};
  s += y_grid(f, y);
  const auto& d = view.objectives;
  s += html::text(f.x0(), f.y1() + 16, html::num(xr.lo));
  s += html::text(f.x1(), f.y1() + 16, html::num(xr.hi), "text-anchor=\"end\"");
  s += html::text(f.x0() + f.w() / 2, f.y1() + 32,
                  std::string("objective 0 (") + to_string(d[0]) + ") across, objective 1 (" +
                      to_string(d[1]) + ") up",
                  "text-anchor=\"middle\"");
  std::set<int64_t> front;
  for (const auto* t : best_trials(view)) front.insert(t->number);
  std::vector<std::pair<double, double>> line;
  for (const auto* t : drawn) {
    const double px = x(t->values[0]), py = y(t->values[1]);
    if (!t->feasible()) {
      s += cross(px, py, kFailColor);
    } else if (front.contains(t->number)) {
      s += dot(px, py, kBestColor, value_tip(*t), "front", 4.5);
      line.emplace_back(px, py);
    } else {
      s += dot(px, py, kCompleteColor, value_tip(*t), "complete");
    }
  }
  std::sort(line.begin(), line.end());
  std::string points;
  for (const auto& [px, py] : line) points += html::point(px, py);
  if (line.size() > 1)
    s += "<polyline class=\"front\" fill=\"none\" stroke=\"" + std::string(kBestColor) +
         "\" stroke-width=\"1.5\" points=\"" + points + "\"/>\n";
  return s + "</svg>\n";
}

/// Every trial's intermediate values against the step, coloured by state;
/// a pruned trial's curve ends in a cross where it was cut.
inline std::string curves_chart(const Frame& f, const std::vector<FrozenTrial>& all) {
  std::string s = f.open("intermediate values");
  s += legend(f, 20,
              {{kCompleteColor, "complete"},
               {kPrunedColor, "pruned (cut)"},
               {kFailColor, "failed"},
               {kRunningColor, "running"}});
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& t : all) {
    for (const auto& [step, v] : t.intermediate) {
      x0 = std::min(x0, double(step)), x1 = std::max(x1, double(step));
      if (std::isfinite(v)) y0 = std::min(y0, v), y1 = std::max(y1, v);
    }
  }
  const auto yr = html::value_range(y0, y1);
  const Scale y{yr.lo, yr.hi, false, double(f.y1()), double(f.y0())};
  const Scale x{x0, x1, false, f.x0() + 8.0, f.x1() - 8.0};
  s += y_grid(f, y);
  s += html::text(f.x0(), f.y1() + 16, html::num(x0, "%.0f"));
  s += html::text(f.x1(), f.y1() + 16, "step " + html::num(x1, "%.0f"), "text-anchor=\"end\"");
  for (const auto& t : all) {
    std::string points;
    size_t n = 0;
    double last_x = 0, last_y = 0;
    for (const auto& [step, v] : t.intermediate) {
      if (!std::isfinite(v)) continue;
      last_x = x(double(step)), last_y = y(v);
      points += html::point(last_x, last_y);
      ++n;
    }
    if (n == 0) continue;
    const char* color = state_color(t.state);
    s += "<polyline class=\"curve\" data-trial=\"" + std::to_string(t.number) + "\" data-state=\"" +
         to_string(t.state) + "\" fill=\"none\" stroke=\"" + color +
         "\" stroke-width=\"1.5\" points=\"" + points + "\"><title>" + html::escape(value_tip(t)) +
         "</title></polyline>\n";
    if (t.state == TrialState::Pruned) {
      s += cross(last_x, last_y, kPrunedColor);
    } else if (n == 1) {
      s += dot(last_x, last_y, color, value_tip(t), "curve-point", 2.5);
    }
  }
  return s + "</svg>\n";
}

inline std::string study_html(std::string_view study_name, const std::vector<Direction>& directions,
                              std::span<const FrozenTrial> trials) {
  const auto all = by_number(trials);
  const auto view = StudyView::of(directions, all);
  const bool several = directions.size() > 1;
  const auto axes = param_axes(all);
  const auto names = param_names(all);
  const auto* best = several ? nullptr : view.best();

  // Header: the best trial and the counts by state.
  std::string counts_line = std::to_string(all.size()) + " trials (" + to_string(directions) + ")";
  for (const auto& [state, n] : counts(all))
    counts_line += " &#183; <span class=\"count\" data-state=\"" + std::string(to_string(state)) +
                   "\">" + to_string(state) + " " + std::to_string(n) + "</span>";
  std::string best_line = "no complete trial yet", best_rows;
  if (several) {
    const auto front = best_trials(view);
    best_line =
        "Pareto front: <b class=\"front-size\">" + std::to_string(front.size()) + "</b> trials";
    for (size_t k = 0; k < front.size() && k < 12; ++k)
      best_line += (k ? ", " : " (") + std::to_string(front[k]->number);
    if (!front.empty()) best_line += front.size() > 12 ? ", ...)" : ")";
  }
  if (best) {
    best_line = "best value <b class=\"best-value\">" + html::num(*best->value, "%.6g") +
                "</b> (trial " + std::to_string(best->number) + ")";
    for (const auto& [name, p] : best->params)
      best_rows += "<tr><td>" + html::escape(name) + "</td><td>" + html::escape(param_text(p)) +
                   "</td></tr>\n";
  }
  const int rows = best ? static_cast<int>(best->params.size()) : 0;
  const int header_height = 104 + 22 * rows;
  std::string body = "<header style=\"height:" + std::to_string(header_height) + "px\"><h1>" +
                     html::escape(study_name) + "</h1>\n<div class=\"counts\">" + counts_line +
                     "</div>\n<div class=\"best\">" + best_line + "</div>\n";
  if (rows > 0) body += "<table class=\"best-params\">\n" + best_rows + "</table>\n";
  body += "</header>\n";

  // Charts: the wide ones, then the slices two by two.
  int top = header_height + kChartGap;
  auto wide = [&](int height) {
    const Frame f{kPageLeft, top, kPageWidth, height};
    top += height + kChartGap;
    return f;
  };
  // (the history, parallel coordinates and slices plot one objective's value)
  body += several ? pareto_chart(wide(360), view) : history_chart(wide(300), view);
  bool any_curve = false;
  for (const auto& t : all) any_curve |= !t.intermediate.empty();
  if (any_curve) body += curves_chart(wide(300), all);
  if (!axes.empty() && !several) body += parallel_chart(wide(340), axes, view);
  constexpr int slice_width = (kPageWidth - kChartGap) / 2, slice_height = 270;
  const size_t slices = several ? 0 : axes.size();
  for (size_t k = 0; k < slices; ++k) {
    const Frame f{kPageLeft + int(k % 2) * (slice_width + kChartGap),
                  top + int(k / 2) * (slice_height + kChartGap), slice_width, slice_height};
    body += slice_chart(f, axes[k], all);
  }
  top += int((slices + 1) / 2) * (slice_height + kChartGap);

  // Every trial, as a table.
  std::string table = "<tr><th>number</th><th>state</th><th>value" +
                      std::string(several ? "s" : "") + "</th><th>duration (s)</th>";
  for (const auto& name : names) table += "<th>" + html::escape(name) + "</th>";
  table += "<th>reason</th></tr>\n";
  for (const auto& t : all) {
    const auto d = duration_s(t);
    std::string values;
    for (const double v : t.objective_values())
      values += (values.empty() ? "" : ", ") + html::num(v, "%.6g");
    table += "<tr class=\"" + std::string(to_string(t.state)) + "\"><td>" +
             std::to_string(t.number) + "</td><td>" + to_string(t.state) + "</td><td>" + values +
             "</td><td>" + (d ? html::num(*d, "%.3g") : "") + "</td>";
    for (const auto& name : names) {
      const auto p = t.params.find(name);
      table += "<td>" + (p == t.params.end() ? "" : html::escape(param_text(p->second))) + "</td>";
    }
    table += "<td>" + html::escape(reason(t)) + "</td></tr>\n";
  }
  body += "<section style=\"top:" + std::to_string(top) +
          "px\">\n<h2>Trials</h2>\n<table class=\"trials\">\n" + table + "</table>\n</section>\n";

  const std::string css = std::string(html::kBaseCss) +
                          "div.counts,div.best{margin:2px 0}\n"
                          "table.best-params{margin:6px 0}\n"
                          "table.best-params td{padding:0 10px;height:21px}\n"
                          "th{text-align:left;padding:3px 10px;border-bottom:1px solid #999}\n"
                          "tr.pruned td{color:#a65000}\ntr.fail td{color:#888}\n";
  return html::page("study " + std::string(study_name), css, body);
}

}  // namespace detail::reports

/// The page of write_study_report.
inline std::string study_report_html(std::string_view study_name,
                                     const std::vector<Direction>& directions,
                                     std::span<const FrozenTrial> trials) {
  return detail::reports::study_html(study_name, directions, trials);
}
inline std::string study_report_html(std::string_view study_name, Direction direction,
                                     std::span<const FrozenTrial> trials) {
  return study_report_html(study_name, std::vector{direction}, trials);
}

/// One self-contained HTML page of the study (see the top of this file);
/// charts are <svg class="chart"> at fixed places, with `data-chart` naming
/// each (a slice also has `data-param`).
inline void write_study_report(const std::filesystem::path& path, std::string_view study_name,
                               const std::vector<Direction>& directions,
                               std::span<const FrozenTrial> trials) {
  trainkit::detail::require_file_path("write_study_report.path", path, "study/report.html");
  io::write_file_atomically(path, study_report_html(study_name, directions, trials));
}
inline void write_study_report(const std::filesystem::path& path, std::string_view study_name,
                               Direction direction, std::span<const FrozenTrial> trials) {
  write_study_report(path, study_name, std::vector{direction}, trials);
}

/// trials.csv, trials.json and report.html of a study in one folder.
struct StudyReport {
  std::filesystem::path dir = "study";

  void write(std::string_view study_name, const std::vector<Direction>& directions,
             std::span<const FrozenTrial> trials) const {
    write_trials_csv(dir / "trials.csv", trials, directions.size());
    write_trials_json(dir / "trials.json", study_name, directions, trials);
    write_study_report(dir / "report.html", study_name, directions, trials);
  }
  void write(std::string_view study_name, Direction direction,
             std::span<const FrozenTrial> trials) const {
    write(study_name, std::vector{direction}, trials);
  }
  /// From a Study (or anything with name(), directions() and trials()).
  template <class S>
  requires requires(const S& s) {
    s.name();
    s.directions();
    s.trials();
  }
  void write(const S& study) const {
    const auto trials = study.trials();
    write(study.name(), study.directions(), trials);
  }
};

}  // namespace trainkit::tune
