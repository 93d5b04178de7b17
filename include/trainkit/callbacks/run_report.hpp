#pragma once
// callbacks::RunReport: one self-contained HTML file (inline SVG, no script,
// no network) with charts against steps of the loss (per logging step, and
// the epochs' train_loss and val_loss), of every other step scalar (learning
// rate, gradient norm, loss scale, throughput, ...) and of every other epoch
// metric, then the run's configuration and final figures. Rewritten
// atomically at each epoch end, at the end of fit and on an exception (the
// report then says why the run stopped). Its series are part of checkpoints,
// so a resumed run's report shows the whole run. Main process only.
//
// Charts are placed at fixed positions (`left`/`top` in each <svg>'s style)
// so that a reader, or a test with a screenshot, finds them without a layout
// engine.
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

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
      steps_[name].emplace_back(state.step, value);
    }
  }

  void on_epoch_end(TrainState& state) {
    if (!main_) return;
    for (const auto& [name, value] : state.metrics) epochs_[name].emplace_back(state.step, value);
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

  /// The series as [n, 2] tensors of (step, value), and the time so far.
  StateDict state_dict() const {
    StateDict d;
    auto save = [&](const char* kind, const std::map<std::string, Series>& all) {
      for (const auto& [name, series] : all) {
        auto t = at::empty({int64_t(series.size()), 2}, at::kDouble);
        for (size_t i = 0; i < series.size(); ++i) {
          t[int64_t(i)][0] = double(series[i].first);
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
      for (int64_t i = 0; i < cpu.size(0); ++i)
        series.emplace_back(int64_t(p[2 * i]), p[2 * i + 1]);
    }
    const double elapsed = d.value<double>("seconds");
    steps_ = std::move(steps);
    epochs_ = std::move(epochs);
    earlier_seconds_ = elapsed;
  }

 private:
  using clock = std::chrono::steady_clock;
  using Series = std::vector<std::pair<int64_t, double>>;
  struct Line {
    std::string name;
    const Series* points;
    bool markers;  // epoch series: few points, drawn as dots too
  };
  struct Chart {
    std::string title;
    std::vector<Line> lines;
  };

  static std::string escape(const std::string& s) {
    std::string out;
    for (const char c : s) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&quot;";
          break;
        default:
          out += c;
      }
    }
    return out;
  }
  static std::string num(double v, const char* format = "%.3g") {
    char buf[32];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
  }

  std::vector<Chart> charts() const {
    std::vector<Chart> out;
    Chart loss{"loss", {}};
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
    static constexpr const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd"};
    constexpr int pad_left = 72, pad_right = 16, pad_top = 30, pad_bottom = 36;
    constexpr int plot_w = kChartWidth - pad_left - pad_right;
    constexpr int plot_h = kChartHeight - pad_top - pad_bottom;
    double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
    for (const auto& line : chart.lines) {
      for (const auto& [x, y] : *line.points) {
        x0 = std::min(x0, double(x)), x1 = std::max(x1, double(x));
        if (std::isfinite(y)) y0 = std::min(y0, y), y1 = std::max(y1, y);
      }
    }
    if (x0 > x1) x0 = 0, x1 = 1;
    if (y0 > y1) y0 = 0, y1 = 1;
    if (x1 == x0) x0 -= 1, x1 += 1;
    if (y1 == y0) {
      const double d = y0 == 0 ? 1.0 : std::abs(y0) * 0.1;
      y0 -= d, y1 += d;
    }
    const double margin = (y1 - y0) * 0.05;
    y0 = y0 >= 0 ? std::max(0.0, y0 - margin) : y0 - margin;  // no negative axis for positive data
    y1 += margin;
    auto px = [&](double x) { return pad_left + (x - x0) / (x1 - x0) * plot_w; };
    auto py = [&](double y) { return pad_top + (y1 - y) / (y1 - y0) * plot_h; };

    std::string s = "<svg class=\"chart\" data-chart=\"" + escape(chart.title) + "\" width=\"" +
                    std::to_string(kChartWidth) + "\" height=\"" + std::to_string(kChartHeight) +
                    "\" style=\"position:absolute;left:" + std::to_string(left) +
                    "px;top:" + std::to_string(top) +
                    "px\" xmlns=\"http://www.w3.org/2000/svg\">\n";
    s += "<rect class=\"plot\" x=\"" + std::to_string(pad_left) + "\" y=\"" +
         std::to_string(pad_top) + "\" width=\"" + std::to_string(plot_w) + "\" height=\"" +
         std::to_string(plot_h) + "\" fill=\"#ffffff\" stroke=\"#bbbbbb\"/>\n";
    s += "<text x=\"" + std::to_string(pad_left) + "\" y=\"20\" class=\"title\">" +
         escape(chart.title) + "</text>\n";
    s += "<text x=\"" + std::to_string(pad_left - 6) + "\" y=\"" + std::to_string(pad_top + 10) +
         "\" text-anchor=\"end\">" + num(y1) + "</text>\n";
    s += "<text x=\"" + std::to_string(pad_left - 6) + "\" y=\"" +
         std::to_string(pad_top + plot_h) + "\" text-anchor=\"end\">" + num(y0) + "</text>\n";
    const int axis_y = pad_top + plot_h + 16;
    s += "<text x=\"" + std::to_string(pad_left) + "\" y=\"" + std::to_string(axis_y) + "\">" +
         num(x0, "%.0f") + "</text>\n";
    s += "<text x=\"" + std::to_string(pad_left + plot_w) + "\" y=\"" + std::to_string(axis_y) +
         "\" text-anchor=\"end\">step " + num(x1, "%.0f") + "</text>\n";
    int legend_x = pad_left + 24 + 8 * int(chart.title.size());
    for (size_t i = 0; i < chart.lines.size(); ++i) {
      const auto& line = chart.lines[i];
      const char* color = colors[i % 4];
      std::string points;
      for (const auto& [x, y] : *line.points) {
        if (!std::isfinite(y)) continue;
        points += num(px(double(x)), "%.1f") + "," + num(py(y), "%.1f") + " ";
      }
      s += "<polyline data-series=\"" + escape(line.name) + "\" fill=\"none\" stroke=\"" + color +
           "\" stroke-width=\"2\" points=\"" + points + "\"/>\n";
      if (line.markers) {
        for (const auto& [x, y] : *line.points) {
          if (std::isfinite(y))
            s += "<circle cx=\"" + num(px(double(x)), "%.1f") + "\" cy=\"" + num(py(y), "%.1f") +
                 "\" r=\"3\" fill=\"" + color + "\"/>\n";
        }
      }
      if (chart.lines.size() > 1) {  // a legend, in the lines' colours
        s += "<text x=\"" + std::to_string(legend_x) + "\" y=\"20\" style=\"fill:" + color + "\">" +
             escape(line.name) + "</text>\n";
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

    return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>" +
           escape(options_.title) +
           "</title>\n<style>\n"
           "body{margin:0;position:relative;font:13px sans-serif;color:#222;background:#f6f6f6}\n"
           "header{position:absolute;left:20px;top:0;height:80px;overflow:hidden}\n"
           "h1{font-size:20px;margin:16px 0 4px}\n"
           "svg.chart{background:#ffffff;border:0}\n"
           "svg text{font:12px sans-serif;fill:#444}\nsvg text.title{font-weight:bold}\n"
           "section{position:absolute;left:20px;width:1140px}\n"
           "table{border-collapse:collapse;margin:4px 24px 16px 0;display:inline-table;"
           "vertical-align:top}\n"
           "td{border-bottom:1px solid #ddd;padding:3px 10px;font-family:monospace}\n"
           "</style>\n</head>\n<body>\n<header><h1>" +
           escape(options_.title) + "</h1><div>" + escape(status_) + " &#183; " +
           std::to_string(all.size()) + " charts</div></header>\n" + body +
           "<section style=\"top:" + std::to_string(bottom) +
           "px\">\n<h2>Final figures</h2>\n<table class=\"figures\">\n" + figures +
           "</table>\n<h2>Configuration</h2>\n<table class=\"config\">\n" + config +
           "</table>\n</section>\n</body>\n</html>\n";
  }

  void write() const { io::write_file_atomically(options_.path, html()); }
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
};

}  // namespace trainkit::callbacks
