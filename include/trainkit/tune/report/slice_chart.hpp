#pragma once
// A slice: the value of every complete trial against one parameter, on a
// numeric axis (log10 for a log parameter) or a column per choice.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "trainkit/detail/svg_chart.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/report/common.hpp"

namespace trainkit::tune::detail::reports {

struct SliceData {
  struct Point {
    int64_t number;
    double fraction;  ///< along the parameter's axis, in [0, 1]
    double value;
    std::string tip;
  };
  ParamAxis axis;
  html::Range values;  ///< of every complete trial
  std::vector<Point> points;
};

inline SliceData slice_data(const ParamAxis& axis, const std::vector<FrozenTrial>& all) {
  SliceData d{axis, value_span(all, false), {}};
  for (const auto& t : all) {
    if (t.state != TrialState::Complete || !t.value || !std::isfinite(*t.value)) continue;
    const auto frac = axis.fraction(t);
    if (!frac) continue;
    d.points.push_back(
        {t.number, *frac, *t.value,
         value_tip(t) + ", " + axis.name + " = " + param_text(t.params.at(axis.name))});
  }
  return d;
}

inline std::string slice_chart(const svg::Frame& f, const SliceData& d) {
  const auto& axis = d.axis;
  std::string s = f.open("slice: " + axis.name, " data-param=\"" + html::escape(axis.name) +
                                                    "\" data-scale=\"" +
                                                    (axis.categorical() ? "categorical"
                                                     : axis.log         ? "log"
                                                                        : "linear") +
                                                    "\"");
  const auto yr = html::value_range(d.values.lo, d.values.hi);
  const svg::Scale y{yr.lo, yr.hi, false, double(f.y1()), double(f.y0())};
  s += svg::y_grid(f, y);
  const double a = f.x0() + 12.0, b = f.x1() - 12.0;  // dots off the frame
  const int label_y = f.y1() + 16;
  if (axis.categorical()) {
    const size_t n = axis.choices.size();
    const double column = f.w() / double(n);
    const size_t every = std::max<size_t>(1, size_t(std::ceil(n * 40.0 / f.w())));
    const size_t chars = std::max<size_t>(3, size_t(column * double(every) / 7));
    for (size_t k = 0; k < n; k += every)
      s += html::text(f.x0() + (double(k) + 0.5) * column, label_y,
                      svg::shorten(axis.choice_label(k), chars), "text-anchor=\"middle\"");
  } else {
    for (const auto& [v, frac] : axis.ticks())
      s += html::text(a + frac * (b - a), label_y, html::num(v), "text-anchor=\"middle\"");
  }
  s += html::text(f.x0() + f.w() / 2, f.y1() + 34,
                  svg::shorten(axis.name, size_t(f.w() / 7)) + (axis.log ? " (log)" : ""),
                  "text-anchor=\"middle\" class=\"title\"");
  for (const auto& p : d.points) {
    double px = axis.categorical() ? f.x0() + p.fraction * f.w() : a + p.fraction * (b - a);
    if (axis.categorical()) {  // spread a column's dots, the same way every time
      const double column = f.w() / double(axis.choices.size());
      const double jitter = std::fmod(double(p.number) * 0.6180339887, 1.0) - 0.5;
      px += jitter * std::min(column * 0.5, 40.0);
    }
    s += svg::dot(px, y(p.value), svg::kBlue, p.tip, "complete");
  }
  if (d.points.empty()) s += svg::empty_note(f, "no complete trial with this parameter");
  return s + "</svg>\n";
}

}  // namespace trainkit::tune::detail::reports
