#pragma once
// The optimisation history: each trial's value against its number (complete
// trials as dots, pruned ones at their last intermediate value as crosses,
// failed ones as ticks on the axis) and the best value so far as a step line.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/detail/svg_chart.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/report/common.hpp"

namespace trainkit::tune::detail::reports {

struct HistoryData {
  enum class Kind { Complete, Pruned, Failed };
  struct Mark {
    int64_t number;
    Kind kind;
    double value = 0;  ///< not for a failed trial
    std::string tip;   ///< a complete trial's
  };
  bool any_trial = false;
  int64_t first = 0, last = 0;  ///< the trial numbers the chart spans
  html::Range values;           ///< of the marks
  std::vector<Mark> marks;      ///< in trial order
  /// The best value so far (feasible complete trials), as the step line's
  /// corners: (trial number, value).
  std::vector<std::pair<int64_t, double>> best;
};

inline HistoryData history_data(const StudyView& view) {
  HistoryData d;
  const auto& all = view.trials;
  if (all.empty()) return d;
  d.any_trial = true;
  d.first = all.front().number, d.last = all.back().number;
  d.values = value_span(all, true);
  std::optional<double> best;
  for (const auto& t : all) {
    if (t.state == TrialState::Fail) {
      d.marks.push_back({t.number, HistoryData::Kind::Failed, 0, {}});
      continue;
    }
    if (!t.value || !std::isfinite(*t.value)) continue;
    if (t.state == TrialState::Pruned) {
      d.marks.push_back({t.number, HistoryData::Kind::Pruned, *t.value, {}});
    } else if (t.state == TrialState::Complete) {
      d.marks.push_back({t.number, HistoryData::Kind::Complete, *t.value, value_tip(t)});
      if (best) d.best.emplace_back(t.number, *best);  // the step
      if (t.feasible() && (!best || view.better(*t.value, *best))) best = *t.value;
      d.best.emplace_back(t.number, *best);
    }
  }
  return d;
}

inline std::string history_chart(const svg::Frame& f, const HistoryData& d) {
  const std::string title = "optimisation history";
  std::string s = f.open(title);
  s += svg::legend(f, title,
                   {{svg::kBlue, "complete"},
                    {svg::kOrange, "pruned (last reported)"},
                    {svg::kRed, "best so far"},
                    {svg::kGrey, "failed"}});
  if (!d.any_trial) return s + svg::empty_note(f, "no trial yet") + "</svg>\n";
  const auto yr = html::value_range(d.values.lo, d.values.hi);
  const svg::Scale y{yr.lo, yr.hi, false, double(f.y1()), double(f.y0())};
  const svg::Scale x{double(d.first), double(d.last), false, f.x0() + 12.0, f.x1() - 12.0};
  s += svg::y_grid(f, y);
  s += html::text(f.x0(), f.y1() + 16, std::to_string(d.first));
  s += html::text(f.x1(), f.y1() + 16, "trial " + std::to_string(d.last), "text-anchor=\"end\"");
  for (const auto& m : d.marks) {
    const double px = x(double(m.number));
    switch (m.kind) {
      case HistoryData::Kind::Failed:
        s += "<line class=\"fail\" x1=\"" + html::num(px, "%.1f") + "\" x2=\"" +
             html::num(px, "%.1f") + "\" y1=\"" + std::to_string(f.y1() - 8) + "\" y2=\"" +
             std::to_string(f.y1()) + "\" stroke=\"" + svg::kGrey + "\" stroke-width=\"2\"/>\n";
        break;
      case HistoryData::Kind::Pruned:
        s += svg::cross(px, y(m.value), svg::kOrange);
        break;
      case HistoryData::Kind::Complete:
        s += svg::dot(px, y(m.value), svg::kBlue, m.tip, "complete");
        break;
    }
  }
  std::string best_line;
  for (const auto& [number, value] : d.best) best_line += html::point(x(double(number)), y(value));
  if (!best_line.empty())
    s += "<polyline class=\"best\" fill=\"none\" stroke=\"" + std::string(svg::kRed) +
         "\" stroke-width=\"2\" points=\"" + best_line + "\"/>\n";
  return s + "</svg>\n";
}

}  // namespace trainkit::tune::detail::reports
