#pragma once
// The study report's page (write_study_report, StudyReport): the best value
// and parameters, trial counts, then the charts (tune/report/*_chart.hpp,
// each built from its data, then drawn) at fixed places, and every trial as
// a table; one self-contained HTML file, written atomically.
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainkit/detail/html.hpp"
#include "trainkit/detail/svg_chart.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/tune/pareto.hpp"
#include "trainkit/tune/record.hpp"
#include "trainkit/tune/report/common.hpp"
#include "trainkit/tune/report/curves_chart.hpp"
#include "trainkit/tune/report/history_chart.hpp"
#include "trainkit/tune/report/parallel_chart.hpp"
#include "trainkit/tune/report/pareto_chart.hpp"
#include "trainkit/tune/report/slice_chart.hpp"
#include "trainkit/tune/report/tables.hpp"

namespace trainkit::tune {
namespace detail::reports {

inline constexpr int kPageLeft = 20, kPageWidth = 1160, kChartGap = 20;

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
    const svg::Frame f{kPageLeft, top, kPageWidth, height};
    top += height + kChartGap;
    return f;
  };
  // (the history, parallel coordinates and slices plot one objective's value)
  body += several ? pareto_chart(wide(360), pareto_data(view))
                  : history_chart(wide(300), history_data(view));
  bool any_curve = false;
  for (const auto& t : all) any_curve |= !t.intermediate.empty();
  if (any_curve) body += curves_chart(wide(300), curves_data(all));
  if (!axes.empty() && !several) body += parallel_chart(wide(340), parallel_data(axes, view));
  constexpr int slice_width = (kPageWidth - kChartGap) / 2, slice_height = 270;
  const size_t slices = several ? 0 : axes.size();
  for (size_t k = 0; k < slices; ++k) {
    const svg::Frame f{kPageLeft + int(k % 2) * (slice_width + kChartGap),
                       top + int(k / 2) * (slice_height + kChartGap), slice_width, slice_height};
    body += slice_chart(f, slice_data(axes[k], all));
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
