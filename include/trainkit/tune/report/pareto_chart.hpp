#pragma once
// The Pareto front: the first two objectives against each other, complete
// trials as dots, the front (best_trials) as red dots joined in order of the
// first objective, trials whose constraints do not hold as grey crosses.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/detail/svg_chart.hpp"
#include "trainkit/tune/pareto.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/report/common.hpp"

namespace trainkit::tune::detail::reports {

struct ParetoData {
  enum class Kind { Complete, Front, Infeasible };
  struct Point {
    double x, y;  ///< objectives 0 and 1
    Kind kind;
    std::string tip;
  };
  std::vector<Direction> directions;
  html::Range x{std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()};
  html::Range y = x;
  std::vector<Point> points;  ///< in trial order
};

inline ParetoData pareto_data(const StudyView& view) {
  ParetoData d;
  d.directions = view.objectives;
  std::set<int64_t> front;
  for (const auto* t : best_trials(view)) front.insert(t->number);
  for (const auto& t : view.trials) {
    if (t.state != TrialState::Complete || t.values.size() < 2 || !std::isfinite(t.values[0]) ||
        !std::isfinite(t.values[1]))
      continue;
    d.x.lo = std::min(d.x.lo, t.values[0]), d.x.hi = std::max(d.x.hi, t.values[0]);
    d.y.lo = std::min(d.y.lo, t.values[1]), d.y.hi = std::max(d.y.hi, t.values[1]);
    const auto kind = !t.feasible()              ? ParetoData::Kind::Infeasible
                      : front.contains(t.number) ? ParetoData::Kind::Front
                                                 : ParetoData::Kind::Complete;
    d.points.push_back({t.values[0], t.values[1], kind, value_tip(t)});
  }
  return d;
}

inline std::string pareto_chart(const svg::Frame& f, const ParetoData& d) {
  const std::string title = "pareto front";
  std::string s = f.open(title);
  s += svg::legend(
      f, title,
      {{svg::kBlue, "complete"}, {svg::kRed, "Pareto front"}, {svg::kGrey, "constraints broken"}});
  if (d.points.empty()) return s + svg::empty_note(f, "no complete trial yet") + "</svg>\n";
  const auto xr = html::value_range(d.x.lo, d.x.hi), yr = html::value_range(d.y.lo, d.y.hi);
  const svg::Scale x{xr.lo, xr.hi, false, f.x0() + 12.0, f.x1() - 12.0};
  const svg::Scale y{yr.lo, yr.hi, false, double(f.y1()), double(f.y0())};
  s += svg::y_grid(f, y);
  s += html::text(f.x0(), f.y1() + 16, html::num(xr.lo));
  s += html::text(f.x1(), f.y1() + 16, html::num(xr.hi), "text-anchor=\"end\"");
  s += html::text(f.x0() + f.w() / 2, f.y1() + 32,
                  std::string("objective 0 (") + to_string(d.directions[0]) +
                      ") across, objective 1 (" + to_string(d.directions[1]) + ") up",
                  "text-anchor=\"middle\"");
  std::vector<std::pair<double, double>> line;
  for (const auto& p : d.points) {
    const double px = x(p.x), py = y(p.y);
    switch (p.kind) {
      case ParetoData::Kind::Infeasible:
        s += svg::cross(px, py, svg::kGrey);
        break;
      case ParetoData::Kind::Front:
        s += svg::dot(px, py, svg::kRed, p.tip, "front", 4.5);
        line.emplace_back(px, py);
        break;
      case ParetoData::Kind::Complete:
        s += svg::dot(px, py, svg::kBlue, p.tip, "complete");
        break;
    }
  }
  std::sort(line.begin(), line.end());
  std::string points;
  for (const auto& [px, py] : line) points += html::point(px, py);
  if (line.size() > 1)
    s += "<polyline class=\"front\" fill=\"none\" stroke=\"" + std::string(svg::kRed) +
         "\" stroke-width=\"1.5\" points=\"" + points + "\"/>\n";
  return s + "</svg>\n";
}

}  // namespace trainkit::tune::detail::reports
