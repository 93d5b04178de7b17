#pragma once
// The markup the self-contained HTML reports share (callbacks::RunReport,
// tune::write_study_report): escaping, numbers, the page around the charts
// and the frame of an absolutely placed SVG chart. No LibTorch, no script:
// the pages are XHTML-compatible so that tests parse them as XML, and their
// charts sit at fixed `left`/`top` so that a screenshot finds them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace trainkit::detail::html {

/// Text for an element or a double-quoted attribute. Control characters are
/// not allowed in XML at all (not even as references), so they become U+FFFD.
inline std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
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
      case '\t':
      case '\n':
      case '\r':
        out += c;
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\xEF\xBF\xBD";
        } else {
          out += c;
        }
    }
  }
  return out;
}

inline std::string num(double v, const char* format = "%.3g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

/// "x,y " of a polyline's points, to a tenth of a pixel.
inline std::string point(double x, double y) {
  return num(x, "%.1f") + "," + num(y, "%.1f") + " ";
}

/// The styles both reports use; a report appends its own.
inline constexpr const char* kBaseCss =
    "body{margin:0;position:relative;font:13px sans-serif;color:#222;background:#f6f6f6}\n"
    "header{position:absolute;left:20px;top:0;height:80px;overflow:hidden}\n"
    "h1{font-size:20px;margin:16px 0 4px}\n"
    "svg.chart{background:#ffffff;border:0}\n"
    "svg text{font:12px sans-serif;fill:#444}\nsvg text.title{font-weight:bold}\n"
    "section{position:absolute;left:20px;width:1140px}\n"
    "table{border-collapse:collapse;margin:4px 24px 16px 0;display:inline-table;"
    "vertical-align:top}\n"
    "td{border-bottom:1px solid #ddd;padding:3px 10px;font-family:monospace}\n";

/// A whole page: `css` goes into <style>, `body` (markup) into <body>.
inline std::string page(std::string_view title, std::string_view css, std::string_view body) {
  std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>";
  s += escape(title);
  s += "</title>\n<style>\n";
  s += css;
  s += "</style>\n</head>\n<body>\n";
  s += body;
  s += "</body>\n</html>\n";
  return s;
}

/// The opening tag of a chart at (left, top) on the page; `attributes`
/// (markup, e.g. ` data-param="x"`) go after data-chart.
inline std::string chart_open(std::string_view title, int left, int top, int width, int height,
                              std::string_view attributes = {}) {
  return "<svg class=\"chart\" data-chart=\"" + escape(title) + "\"" + std::string(attributes) +
         " width=\"" + std::to_string(width) + "\" height=\"" + std::to_string(height) +
         "\" style=\"position:absolute;left:" + std::to_string(left) +
         "px;top:" + std::to_string(top) + "px\" xmlns=\"http://www.w3.org/2000/svg\">\n";
}

/// The plot area (class "plot": what a reader of the page looks inside).
inline std::string plot_area(int x, int y, int width, int height) {
  return "<rect class=\"plot\" x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) +
         "\" width=\"" + std::to_string(width) + "\" height=\"" + std::to_string(height) +
         "\" fill=\"#ffffff\" stroke=\"#bbbbbb\"/>\n";
}

/// <text> at (x, y) with `content` escaped; `attributes` is markup.
inline std::string text(double x, double y, std::string_view content,
                        std::string_view attributes = {}) {
  const auto coordinate = [](double v) {
    return v == std::round(v) ? std::to_string(static_cast<long long>(v)) : num(v, "%.1f");
  };
  std::string s = "<text x=\"" + coordinate(x) + "\" y=\"" + coordinate(y) + "\"";
  if (!attributes.empty()) s += " " + std::string(attributes);
  return s + ">" + escape(content) + "</text>\n";
}

struct Range {
  double lo, hi;
};

/// The axis for values in [lo, hi] (lo > hi: none): a 5% margin, a width
/// when all are equal, and no negative part for positive data.
inline Range value_range(double lo, double hi) {
  if (lo > hi) lo = 0, hi = 1;
  if (hi == lo) {
    const double d = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    lo -= d, hi += d;
  }
  const double margin = (hi - lo) * 0.05;
  lo = lo >= 0 ? std::max(0.0, lo - margin) : lo - margin;
  return {lo, hi + margin};
}

/// About `count` round values (1, 2 or 5 times a power of ten apart) in
/// [lo, hi]; with `integers`, whole numbers only (steps).
inline std::vector<double> linear_ticks(double lo, double hi, int count = 5,
                                        bool integers = false) {
  std::vector<double> out;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  const double raw = (hi - lo) / count, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * magnitude;
  for (const double f : {1.0, 2.0, 5.0}) {
    if (f * magnitude >= raw) {
      step = f * magnitude;
      break;
    }
  }
  if (integers) step = std::max(step, 1.0);
  for (double k = std::ceil(lo / step); k * step <= hi + step * 1e-9; k += 1)
    out.push_back(std::abs(k) < 0.5 ? 0.0 : k * step);  // never "-0"
  return out;
}

/// Values for a logarithmic axis over [lo, hi] (both > 0): the powers of
/// ten (every n-th past six decades), with 2 and 5 times them within two
/// decades, and round linear values where fewer than three of those fall.
inline std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> out;
  if (!(lo > 0) || !(hi > lo) || !std::isfinite(hi)) return out;
  const int first = int(std::floor(std::log10(lo))), last = int(std::ceil(std::log10(hi)));
  const bool fine = std::log10(hi / lo) < 2;
  const int stride = std::max(1, (last - first + 5) / 6);
  for (int k = first; k <= last; k += fine ? 1 : stride) {
    for (const double f : {1.0, 2.0, 5.0}) {
      const double v = f * std::pow(10.0, k);
      if ((f == 1.0 || fine) && v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12)) out.push_back(v);
    }
  }
  return out.size() >= 3 ? out : linear_ticks(lo, hi, 4);
}

}  // namespace trainkit::detail::html
