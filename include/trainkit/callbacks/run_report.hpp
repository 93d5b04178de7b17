#pragma once
// callbacks::RunReport: one self-contained HTML file (inline SVG, no script,
// no network) with charts against steps of the loss (per logging step, and
// the epochs' train_loss and val_loss), of every other step scalar (learning
// rate, gradient norm, loss scale, throughput, ...) and of every other epoch
// metric, then the run's configuration and final figures. Rewritten
// atomically at each epoch end, at the end of fit and on an exception (the
// report then says why the run stopped). Its series are part of checkpoints,
// so a resumed run's report shows the whole run. Main process only.
// Figures from outside the fit (a learning-rate range test's curve, say)
// are added with add_figure and come first; they are not checkpointed.
//
// Charts are placed at fixed positions (`left`/`top` in each <svg>'s style)
// so that a reader, or a test with a screenshot, finds them without a layout
// engine.
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/detail/html.hpp"
#include "trainkit/detail/svg_chart.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/state.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::callbacks {

class RunReport {
 public:
  struct Options {
    std::filesystem::path path = "runs/report.html";
    std::string title = "trainkit run";
  };
  static constexpr int kChartWidth = 560, kChartHeight = 260, kGap = 20, kTop = 90;
  using Series = std::vector<std::pair<double, double>>;  ///< (x, y) points

  /// A chart of named (x, y) series, with an optional marked x.
  struct Figure {
    std::string title;
    std::string x_label = "step";
    bool log_x = false;
    bool log_y = false;  ///< where every value is > 0
    std::vector<std::pair<std::string, Series>> lines;
    std::optional<double> mark_x;  ///< a dashed vertical line, labelled with its x
    std::string mark_label = "x";
  };

  RunReport() : RunReport(Options{}) {}
  explicit RunReport(Options o) : options_(std::move(o)) {
    detail::require_file_path("run_report.path", options_.path, "runs/a/report.html");
  }

  void on_fit_begin(TrainState& state) {
    main_ = state.is_main_process();
    start_ = clock::now();
    if (!state.resumed) {  // a resumed fit keeps the series its checkpoint restored
      steps_.clear();
      epochs_.clear();
      earlier_seconds_ = 0;
    }
    config_ = state.config;
    status_ = "running";
  }

  void on_step_end(TrainState& state) {
    if (!main_ || !state.should_log()) return;
    for (const auto& [name, value] : state.logged_values()) {
      steps_[name].emplace_back(double(state.step), value);
    }
  }

  void on_epoch_end(TrainState& state) {
    if (!main_) return;
    for (const auto& [name, value] : state.metrics)
      epochs_[name].emplace_back(double(state.step), value);
    summary_ = {{"epochs", double(state.epoch + 1)},
                {"steps", double(state.step)},
                {"samples", double(state.samples_seen)}};
    write();
  }

  void on_fit_end(TrainState& state) {
    if (!main_) return;
    status_ = state.stop_requested() ? "stopped: " + state.stop_reason() : "finished";
    summary_["steps"] = double(state.step);
    summary_["samples"] = double(state.samples_seen);
    write();
  }

  void on_exception(TrainState& state) {
    if (!main_) return;
    status_ = "failed";
    try {
      if (state.exception) std::rethrow_exception(state.exception);
    } catch (const std::exception& e) {
      status_ += std::string(": ") + e.what();
    } catch (...) {
    }
    write();
  }

  const std::filesystem::path& path() const { return options_.path; }

  /// Adds a chart before the run's own (kept until the report goes).
  void add_figure(Figure figure) { figures_.push_back(std::move(figure)); }
  /// Writes the report now (atomically), as the hooks do.
  void write() const { io::write_file_atomically(options_.path, html()); }

  /// The series as [n, 2] tensors of (step, value), and the time so far.
  StateDict state_dict() const {
    StateDict d;
    auto save = [&](const char* kind, const std::map<std::string, Series>& all) {
      for (const auto& [name, series] : all) {
        auto t = at::empty({int64_t(series.size()), 2}, at::kDouble);
        for (size_t i = 0; i < series.size(); ++i) {
          t[int64_t(i)][0] = series[i].first;
          t[int64_t(i)][1] = series[i].second;
        }
        d.tensors[std::string(kind) + "/" + name] = t;
      }
    };
    save("step", steps_);
    save("epoch", epochs_);
    d.values["seconds"] = seconds();
    return d;
  }
  void load_state_dict(const StateDict& d) {
    std::map<std::string, Series> steps, epochs;  // all checked before any is kept
    for (const auto& [key, t] : d.tensors) {
      const auto slash = key.find('/');
      const auto kind = key.substr(0, slash);
      if (slash == std::string::npos || (kind != "step" && kind != "epoch") || t.dim() != 2 ||
          t.size(1) != 2 || t.scalar_type() != at::kDouble) {
        throw Error("trainkit: RunReport state has an unexpected tensor \"" + key + "\"");
      }
      auto& series = (kind == "step" ? steps : epochs)[key.substr(slash + 1)];
      const auto cpu = t.contiguous();
      const double* p = cpu.data_ptr<double>();
      for (int64_t i = 0; i < cpu.size(0); ++i) series.emplace_back(p[2 * i], p[2 * i + 1]);
    }
    const double elapsed = d.value<double>("seconds");
    steps_ = std::move(steps);
    epochs_ = std::move(epochs);
    earlier_seconds_ = elapsed;
  }

 private:
  using clock = std::chrono::steady_clock;
  struct Line {
    std::string name;
    const Series* points;
    bool markers;  // epoch series: few points, drawn as dots too
  };
  struct Chart {
    std::string title;
    std::vector<Line> lines;
    const Figure* figure = nullptr;  // its axis and mark, when it is one
    bool log_y = false;              // the losses: a log scale shows progress after epoch 1
  };

  static std::string escape(const std::string& s) { return detail::html::escape(s); }
  static std::string num(double v, const char* format = "%.3g") {
    return detail::html::num(v, format);
  }

  std::vector<Chart> charts() const {
    std::vector<Chart> out;
    for (const auto& figure : figures_) {
      Chart chart{figure.title, {}, &figure, figure.log_y};
      for (const auto& [name, points] : figure.lines) chart.lines.push_back({name, &points, false});
      out.push_back(std::move(chart));
    }
    Chart loss{"loss", {}, nullptr, /*log_y=*/true};
    if (const auto it = steps_.find("loss"); it != steps_.end())
      loss.lines.push_back({"loss", &it->second, false});
    for (const char* name : {"train_loss", "val_loss"}) {
      if (const auto it = epochs_.find(name); it != epochs_.end())
        loss.lines.push_back({name, &it->second, true});
    }
    if (!loss.lines.empty()) out.push_back(std::move(loss));
    // The usual figures first, in reading order, then the rest by name.
    std::vector<std::string> names;
    for (const char* name :
         {"lr", "grad_norm", "loss_scale", "samples_per_s", "steps_per_s", "flops_per_s", "mfu"}) {
      if (steps_.count(name)) names.push_back(name);
    }
    for (const auto& [name, series] : steps_) {
      if (name != "loss" && std::find(names.begin(), names.end(), name) == names.end())
        names.push_back(name);
    }
    for (const auto& name : names) out.push_back({name, {{name, &steps_.at(name), false}}});
    for (const auto& [name, series] : epochs_) {
      if (name != "train_loss" && name != "val_loss")
        out.push_back({name + " (epoch)", {{name, &series, true}}});
    }
    return out;
  }

  static std::string svg(const Chart& chart, int left, int top) {
    const detail::svg::Frame frame{left, top, kChartWidth, kChartHeight, 72, 16, 30, 36};
    const int pad_left = frame.x0(), pad_top = frame.y0(), plot_w = frame.w(), plot_h = frame.h();
    const bool log_x = chart.figure && chart.figure->log_x;
    double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
    for (const auto& line : chart.lines) {
      for (const auto& [x, y] : *line.points) {
        if (!std::isfinite(x) || (log_x && x <= 0)) continue;  // spans steps with NaN values too
        x0 = std::min(x0, x), x1 = std::max(x1, x);
        if (std::isfinite(y)) y0 = std::min(y0, y), y1 = std::max(y1, y);
      }
    }
    const bool log_y = chart.log_y && y0 <= y1 && y0 > 0;  // else linear: a value <= 0
    const auto axis_x = [&](double x) { return log_x ? std::log10(x) : x; };
    const auto axis_y = [&](double y) { return log_y ? std::log10(y) : y; };
    const auto drawn = [&](double x, double y) {
      return std::isfinite(axis_y(y)) && std::isfinite(axis_x(x));  // log axes: > 0
    };
    if (x0 > x1) x0 = log_x ? 1 : 0, x1 = log_x ? 10 : 1;
    double ax0 = axis_x(x0), ax1 = axis_x(x1);
    if (ax1 == ax0) ax0 -= 1, ax1 += 1;
    double ay0 = 0, ay1 = 1;
    if (log_y) {
      const double lo = std::log10(y0), hi = std::log10(y1);
      const double margin = std::max(hi - lo, 0.02) * 0.05;
      ay0 = lo - margin, ay1 = hi + margin;
    } else {
      const auto range = detail::html::value_range(y0, y1);  // none: [0, 1]
      ay0 = range.lo, ay1 = range.hi;
    }
    auto px = [&](double x) { return pad_left + (axis_x(x) - ax0) / (ax1 - ax0) * plot_w; };
    auto py = [&](double y) { return pad_top + (ay1 - axis_y(y)) / (ay1 - ay0) * plot_h; };
    const auto value_of = [](double axis, bool log) { return log ? std::pow(10.0, axis) : axis; };
    const char* x_format = chart.figure ? "%.3g" : "%.0f";

    using detail::html::text;
    std::string s =
        frame.open(chart.title, std::string(" data-x-scale=\"") + (log_x ? "log" : "linear") +
                                    "\" data-y-scale=\"" + (log_y ? "log" : "linear") + "\"");
    // Ticks: a faint grid line and a label at each round value of each axis.
    const double lo_y = value_of(ay0, log_y), hi_y = value_of(ay1, log_y);
    for (const double v :
         log_y ? detail::html::log_ticks(lo_y, hi_y) : detail::html::linear_ticks(lo_y, hi_y)) {
      const auto y = num(py(v), "%.1f");
      s += "<line class=\"grid\" x1=\"" + std::to_string(pad_left) + "\" x2=\"" +
           std::to_string(pad_left + plot_w) + "\" y1=\"" + y + "\" y2=\"" + y +
           "\" stroke=\"#ececec\"/>\n";
      s += text(pad_left - 6, py(v) + 4, num(v), "class=\"tick-y\" text-anchor=\"end\"");
    }
    const int axis_y_label = pad_top + plot_h + 16;
    const double lo_x = value_of(ax0, log_x), hi_x = value_of(ax1, log_x);
    for (const double v : log_x ? detail::html::log_ticks(lo_x, hi_x)
                                : detail::html::linear_ticks(lo_x, hi_x, 6, !chart.figure)) {
      s += text(px(v), axis_y_label, num(v, x_format), "class=\"tick-x\" text-anchor=\"middle\"");
    }
    s += text(pad_left - 6, axis_y_label, chart.figure ? chart.figure->x_label : "step",
              "text-anchor=\"end\"");
    if (chart.figure && chart.figure->mark_x && drawn(*chart.figure->mark_x, 1)) {
      const auto& f = *chart.figure;
      const auto x = num(px(*f.mark_x), "%.1f");
      s += "<line data-mark=\"" + escape(f.mark_label) + "\" x1=\"" + x + "\" x2=\"" + x +
           "\" y1=\"" + std::to_string(pad_top) + "\" y2=\"" + std::to_string(pad_top + plot_h) +
           "\" stroke=\"#555555\" stroke-dasharray=\"4 3\"/>\n";
      s += text(px(*f.mark_x) + 4, pad_top + 14, f.mark_label + " " + num(*f.mark_x));
    }
    int legend_x = frame.legend_left(chart.title);
    for (size_t i = 0; i < chart.lines.size(); ++i) {
      const auto& line = chart.lines[i];
      const char* color = detail::svg::kSeriesColors[i % std::size(detail::svg::kSeriesColors)];
      std::string points;
      for (const auto& [x, y] : *line.points) {
        if (drawn(x, y)) points += detail::html::point(px(x), py(y));
      }
      s += "<polyline data-series=\"" + escape(line.name) + "\" fill=\"none\" stroke=\"" + color +
           "\" stroke-width=\"2\" points=\"" + points + "\"/>\n";
      if (line.markers) {
        for (const auto& [x, y] : *line.points) {
          if (drawn(x, y))
            s += "<circle cx=\"" + num(px(x), "%.1f") + "\" cy=\"" + num(py(y), "%.1f") +
                 "\" r=\"3\" fill=\"" + color + "\"/>\n";
        }
      }
      if (chart.lines.size() > 1) {  // a legend, in the lines' colours
        s += text(legend_x, 20, line.name, "style=\"fill:" + std::string(color) + "\"");
        legend_x += 16 + 7 * int(line.name.size());
      }
    }
    return s + "</svg>\n";
  }

  std::string html() const {
    const auto all = charts();
    std::string body;
    int bottom = kTop;
    for (size_t i = 0; i < all.size(); ++i) {
      const int left = kGap + int(i % 2) * (kChartWidth + kGap);
      const int top = kTop + int(i / 2) * (kChartHeight + kGap);
      body += svg(all[i], left, top);
      bottom = top + kChartHeight + kGap;
    }
    std::string figures = "<tr><td>status</td><td>" + escape(status_) + "</td></tr>\n";
    figures += "<tr><td>wall time</td><td>" + num(seconds(), "%.1f") + " s</td></tr>\n";
    for (const auto& [name, value] : summary_)
      figures += "<tr><td>" + escape(name) + "</td><td>" + num(value, "%.0f") + "</td></tr>\n";
    for (const auto& [name, series] : epochs_)
      figures +=
          "<tr><td>" + escape(name) + "</td><td>" + num(series.back().second) + "</td></tr>\n";
    for (const auto& [name, series] : steps_)
      figures +=
          "<tr><td>last " + escape(name) + "</td><td>" + num(series.back().second) + "</td></tr>\n";
    std::string config;
    for (const auto& [name, value] : config_)
      config += "<tr><td>" + escape(name) + "</td><td>" + escape(value) + "</td></tr>\n";

    return detail::html::page(
        options_.title, detail::html::kBaseCss,
        "<header><h1>" + escape(options_.title) + "</h1><div>" + escape(status_) + " &#183; " +
            std::to_string(all.size()) + " charts</div></header>\n" + body +
            "<section style=\"top:" + std::to_string(bottom) +
            "px\">\n<h2>Final figures</h2>\n<table class=\"figures\">\n" + figures +
            "</table>\n<h2>Configuration</h2>\n<table class=\"config\">\n" + config +
            "</table>\n</section>\n");
  }

  double seconds() const {
    return earlier_seconds_ + std::chrono::duration<double>(clock::now() - start_).count();
  }

  Options options_;
  bool main_ = true;
  clock::time_point start_ = clock::now();
  double earlier_seconds_ = 0;  ///< before the checkpoint this fit resumed from
  std::string status_;
  std::map<std::string, std::string> config_;
  std::map<std::string, Series> steps_, epochs_;
  std::map<std::string, double> summary_;
  std::vector<Figure> figures_;
};

}  // namespace trainkit::callbacks
