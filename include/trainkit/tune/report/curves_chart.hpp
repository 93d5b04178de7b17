#pragma once
// Learning curves: every trial's intermediate values against the step,
// coloured by state; a pruned trial's curve ends in a cross where it was cut.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/detail/svg_chart.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/report/common.hpp"

namespace trainkit::tune::detail::reports {

struct CurvesData {
  struct Curve {
    int64_t number;
    TrialState state;
    std::string tip;
    std::vector<std::pair<double, double>> points;  ///< (step, value), finite values only
  };
  html::Range steps{std::numeric_limits<double>::infinity(),
                    -std::numeric_limits<double>::infinity()};
  html::Range values = steps;  ///< finite ones
  std::vector<Curve> curves;   ///< in trial order; trials with a finite value only
};

inline CurvesData curves_data(const std::vector<FrozenTrial>& all) {
  CurvesData d;
  for (const auto& t : all) {
    CurvesData::Curve curve{t.number, t.state, value_tip(t), {}};
    for (const auto& [step, v] : t.intermediate) {
      d.steps.lo = std::min(d.steps.lo, double(step)),
      d.steps.hi = std::max(d.steps.hi, double(step));
      if (!std::isfinite(v)) continue;
      d.values.lo = std::min(d.values.lo, v), d.values.hi = std::max(d.values.hi, v);
      curve.points.emplace_back(double(step), v);
    }
    if (!curve.points.empty()) d.curves.push_back(std::move(curve));
  }
  return d;
}

inline std::string curves_chart(const svg::Frame& f, const CurvesData& d) {
  const std::string title = "intermediate values";
  std::string s = f.open(title);
  s += svg::legend(f, title,
                   {{svg::kBlue, "complete"},
                    {svg::kOrange, "pruned (cut)"},
                    {svg::kGrey, "failed"},
                    {svg::kGreen, "running"}});
  const auto yr = html::value_range(d.values.lo, d.values.hi);
  const svg::Scale y{yr.lo, yr.hi, false, double(f.y1()), double(f.y0())};
  const svg::Scale x{d.steps.lo, d.steps.hi, false, f.x0() + 8.0, f.x1() - 8.0};
  s += svg::y_grid(f, y);
  s += html::text(f.x0(), f.y1() + 16, html::num(d.steps.lo, "%.0f"));
  s += html::text(f.x1(), f.y1() + 16, "step " + html::num(d.steps.hi, "%.0f"),
                  "text-anchor=\"end\"");
  for (const auto& c : d.curves) {
    std::string points;
    for (const auto& [step, v] : c.points) points += html::point(x(step), y(v));
    const double last_x = x(c.points.back().first), last_y = y(c.points.back().second);
    const char* color = state_color(c.state);
    s += "<polyline class=\"curve\" data-trial=\"" + std::to_string(c.number) + "\" data-state=\"" +
         to_string(c.state) + "\" fill=\"none\" stroke=\"" + color +
         "\" stroke-width=\"1.5\" points=\"" + points + "\"><title>" + html::escape(c.tip) +
         "</title></polyline>\n";
    if (c.state == TrialState::Pruned) {
      s += svg::cross(last_x, last_y, svg::kOrange);
    } else if (c.points.size() == 1) {
      s += svg::dot(last_x, last_y, color, c.tip, "curve-point", 2.5);
    }
  }
  return s + "</svg>\n";
}

}  // namespace trainkit::tune::detail::reports
