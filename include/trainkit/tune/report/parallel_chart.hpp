#pragma once
// Parallel coordinates: one polyline per complete trial across an axis per
// parameter and one for the objective, coloured by value (dark: best). A
// trial without a (conditional) parameter crosses that axis at "none",
// below it.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/detail/svg_chart.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/report/common.hpp"

namespace trainkit::tune::detail::reports {

struct ParallelData {
  struct Line {
    int64_t number;
    double badness;                                ///< 0 the best value, 1 the worst
    std::vector<std::optional<double>> fractions;  ///< along each parameter's axis
    double objective;                              ///< along the objective's axis
    std::string tip;
  };
  std::vector<ParamAxis> axes;
  html::Range values;       ///< of every complete trial
  std::vector<Line> lines;  ///< the worst first, so that the best are drawn on top
};

inline ParallelData parallel_data(const std::vector<ParamAxis>& axes, const StudyView& view) {
  ParallelData d{axes, value_span(view.trials, false), {}};
  const svg::Scale objective{d.values.lo, d.values.hi, false, 0, 1};
  for (const auto& t : view.trials) {
    if (t.state != TrialState::Complete || !t.value || !std::isfinite(*t.value)) continue;
    const double frac = objective.fraction(*t.value);
    ParallelData::Line line{
        t.number, view.direction == Direction::Minimize ? frac : 1 - frac, {}, frac, value_tip(t)};
    for (const auto& axis : axes) line.fractions.push_back(axis.fraction(t));
    d.lines.push_back(std::move(line));
  }
  std::stable_sort(d.lines.begin(), d.lines.end(), [](const auto& p, const auto& q) {
    return p.badness > q.badness || (p.badness == q.badness && p.number < q.number);
  });
  return d;
}

inline std::string parallel_chart(svg::Frame f, const ParallelData& d) {
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
  const auto& axes = d.axes;
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
    s += html::text(x, f.y0() - 8, svg::shorten(name, chars),
                    "class=\"title\" text-anchor=\"" + std::string(anchor) + "\"");
    const std::string side = "text-anchor=\"" + std::string(is_objective ? "end" : "start") + "\"";
    const double dx = is_objective ? -4 : 4;
    if (is_objective) {
      if (!d.lines.empty()) {
        s += html::text(x + dx, top + 4, html::num(d.values.hi), side);
        s += html::text(x + dx, bottom + 4, html::num(d.values.lo), side);
      }
      continue;
    }
    const auto& axis = axes[k];
    if (axis.categorical()) {
      const size_t n = axis.choices.size();
      const size_t every = std::max<size_t>(1, size_t(std::ceil(double(n) * 16 / (bottom - top))));
      for (size_t c = 0; c < n; c += every)
        s += html::text(x + dx, ay((double(c) + 0.5) / double(n)) + 4,
                        svg::shorten(axis.choice_label(c), chars), side);
    } else {
      const auto ticks = axis.ticks();
      for (const auto& [v, frac] : {ticks.front(), ticks.back()})
        s += html::text(x + dx, ay(frac) + 4, html::num(v), side);
    }
    if (axis.missing) s += html::text(x + dx, none + 4, "none", side + " font-style=\"italic\"");
  }
  if (d.lines.empty()) return s + svg::empty_note(f, "no complete trial yet") + "</svg>\n";
  for (const auto& line : d.lines) {
    std::string points;
    for (size_t k = 0; k < axes.size(); ++k)
      points += html::point(ax(k), line.fractions[k] ? ay(*line.fractions[k]) : none);
    points += html::point(ax(axes.size()), ay(line.objective));
    s += "<polyline class=\"trial\" data-trial=\"" + std::to_string(line.number) +
         "\" fill=\"none\" stroke=\"" + value_color(line.badness) +
         "\" stroke-width=\"1.5\" stroke-opacity=\"0.85\" points=\"" + points + "\"><title>" +
         html::escape(line.tip) + "</title></polyline>\n";
  }
  return s + "</svg>\n";
}

}  // namespace trainkit::tune::detail::reports
