#pragma once
// The SVG chart engine both HTML reports draw with (callbacks::RunReport and
// the search's study report): the palette, a chart's frame and plot area,
// linear and log scales, grid lines, marks and legends. Pages and layout
// are each report's; what a chart looks like is decided here once.
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainkit/detail/html.hpp"

namespace trainkit::detail::svg {

/// The palette (matplotlib's first colours): a colour means one thing on
/// every chart of a report.
inline constexpr const char *kBlue = "#1f77b4", *kOrange = "#ff7f0e", *kGreen = "#2ca02c",
                            *kRed = "#d62728", *kPurple = "#9467bd", *kGrey = "#7f7f7f";
/// Colours of a chart's series, in order (then again).
inline constexpr const char* kSeriesColors[] = {kBlue, kRed, kGreen, kPurple};

/// Whether `c` continues a UTF-8 sequence (is not a character's first byte).
inline bool continues_character(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

/// Characters of UTF-8 text (what its width on the page goes by).
inline size_t characters(std::string_view s) {
  size_t n = 0;
  for (const char c : s) n += !continues_character(c);
  return n;
}

/// At most `chars` characters of `s` (whole UTF-8 sequences), "…" when cut.
inline std::string shorten(const std::string& s, size_t chars) {
  size_t count = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!continues_character(s[i]) && count++ == chars) return s.substr(0, i) + "\xE2\x80\xA6";
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
  /// The chart's opening: <svg>, its plot area and its title.
  std::string open(const std::string& title, const std::string& attributes = {}) const {
    return html::chart_open(title, left, top, width, height, attributes) +
           html::plot_area(x0(), y0(), w(), h()) + html::text(x0(), 20, title, "class=\"title\"");
  }
  /// Where a legend right of `title` begins.
  int legend_left(std::string_view title) const {
    return x0() + 24 + 8 * static_cast<int>(characters(title));
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

/// Legend entries (a colour's swatch, a label) right of the chart's title.
inline std::string legend(const Frame& f, std::string_view title,
                          const std::vector<std::pair<const char*, std::string>>& entries) {
  std::string s;
  int x = f.legend_left(title);
  for (const auto& [color, label] : entries) {
    s += "<rect x=\"" + std::to_string(x) + "\" y=\"11\" width=\"10\" height=\"10\" fill=\"" +
         color + "\"/>\n";
    s += html::text(x + 14, 20, label);
    x += 30 + 7 * static_cast<int>(label.size());
  }
  return s;
}

/// A note in the middle of an empty plot.
inline std::string empty_note(const Frame& f, const std::string& what) {
  return html::text(f.x0() + f.w() / 2, f.y0() + f.h() / 2, what, "text-anchor=\"middle\"");
}

}  // namespace trainkit::detail::svg
