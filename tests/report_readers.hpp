#pragma once
// Reading the HTML reports from the outside (RunReport in test_io, the study
// report in test_tune): parsed strictly as XML by libxml2, and drawn by a
// real browser (headless chromium) whose screenshot libpng reads back.
// Only built where both libraries are (TRAINKIT_TEST_REPORT_READERS).
#include <doctest/doctest.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <png.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace tk_test::report {

struct Element {
  std::string name;
  std::map<std::string, std::string> attributes;
  std::vector<Element> children;
  std::string text;  ///< the element's own text nodes, concatenated
};

inline Element to_element(xmlNode* node) {
  Element e{reinterpret_cast<const char*>(node->name), {}, {}, {}};
  for (auto* a = node->properties; a; a = a->next) {
    xmlChar* v = xmlNodeListGetString(node->doc, a->children, 1);
    e.attributes[reinterpret_cast<const char*>(a->name)] = v ? reinterpret_cast<char*>(v) : "";
    xmlFree(v);
  }
  for (auto* c = node->children; c; c = c->next) {
    if (c->type == XML_ELEMENT_NODE) e.children.push_back(to_element(c));
    if (c->type == XML_TEXT_NODE && c->content) e.text += reinterpret_cast<const char*>(c->content);
  }
  return e;
}

inline void find_all(const Element& e, const std::string& name, std::vector<const Element*>& out) {
  if (e.name == name) out.push_back(&e);
  for (const auto& c : e.children) find_all(c, name, out);
}
inline std::vector<const Element*> find_all(const Element& e, const std::string& name) {
  std::vector<const Element*> out;
  find_all(e, name, out);
  return out;
}

/// A report parsed strictly (well-formed XML, no recovery).
inline Element parse_report(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << file);
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  xmlDoc* doc = xmlReadMemory(text.data(), int(text.size()), file.c_str(), nullptr,
                              XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  REQUIRE_MESSAGE(doc != nullptr, "the report is not well-formed: " << file);
  auto root = to_element(xmlDocGetRootElement(doc));
  xmlFreeDoc(doc);
  return root;
}

struct Rect {
  int left, top, width, height;
};
/// Where a chart lies on the page (its `left`/`top` style, its size).
inline Rect chart_rect(const Element& svg) {
  const auto& style = svg.attributes.at("style");
  int left = -1, top = -1;
  const auto at = style.find("left:");
  REQUIRE(at != std::string::npos);
  REQUIRE(std::sscanf(style.c_str() + at, "left:%dpx;top:%dpx", &left, &top) == 2);
  return {left, top, std::stoi(svg.attributes.at("width")), std::stoi(svg.attributes.at("height"))};
}
/// The plot area inside a chart (its rect of class "plot"), in page pixels.
inline Rect plot_rect(const Element& svg) {
  const auto chart = chart_rect(svg);
  for (const auto* r : find_all(svg, "rect")) {
    if (r->attributes.count("class") && r->attributes.at("class") == "plot")
      return {chart.left + std::stoi(r->attributes.at("x")),
              chart.top + std::stoi(r->attributes.at("y")), std::stoi(r->attributes.at("width")),
              std::stoi(r->attributes.at("height"))};
  }
  FAIL("no plot area in " << svg.attributes.at("data-chart"));
  return chart;
}

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  const uint8_t* at(int x, int y) const {
    return &rgb[(size_t(y) * size_t(width) + size_t(x)) * 3];
  }
};

/// `page` drawn by headless chromium (TRAINKIT_CHROMIUM, else
/// /usr/bin/chromium) in a window `height` pixels high, read back as RGB.
/// The screenshot, the browser's log and profile go into `dir`.
inline Image screenshot(const std::filesystem::path& page, const std::filesystem::path& dir,
                        int height) {
  namespace fs = std::filesystem;
  const char* browser = std::getenv("TRAINKIT_CHROMIUM");
  const std::string chromium = browser ? browser : "/usr/bin/chromium";
  REQUIRE_MESSAGE(fs::exists(chromium),
                  chromium << " is missing: `scripts/run.sh setup` installs Debian's chromium");
  const auto png = dir / (page.stem().string() + ".png");
  fs::remove(png);
  const std::string cmd = chromium +
                          " --headless --no-sandbox --disable-gpu --hide-scrollbars"
                          " --force-device-scale-factor=1 --user-data-dir=" +
                          (dir / "chromium-profile").string() + " --window-size=1200," +
                          std::to_string(height) + " --screenshot=" + png.string() + " file://" +
                          fs::absolute(page).string() + " > " + (dir / "chromium.log").string() +
                          " 2>&1";
  // Headless chromium now and then exits 0 without writing the screenshot
  // when the machine is busy (seen once in CI with every core taken): a
  // missing file gets two more tries, and its log if it never comes.
  for (int attempt = 0; attempt < 3 && !fs::exists(png); ++attempt)
    REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, cmd);
  if (!fs::exists(png)) {
    std::ifstream log(dir / "chromium.log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    FAIL("chromium wrote no screenshot in 3 tries: " << cmd << "\n" << text);
  }
  MESSAGE("screenshot: " << png.string());

  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_file(&image, png.c_str()));
  image.format = PNG_FORMAT_RGB;
  Image out{int(image.width), int(image.height), std::vector<uint8_t>(PNG_IMAGE_SIZE(image))};
  REQUIRE(png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr));
  return out;
}

/// A polyline or circle of a chart as drawn: its colour, its points in page
/// pixels, and how far its paint reaches from them (half the stroke width,
/// or the circle's radius).
struct Mark {
  std::string name;
  std::array<int, 3> rgb;
  std::vector<std::array<double, 2>> points;
  double reach;
  bool line;
};

inline std::array<int, 3> hex_rgb(const std::string& hex) {
  REQUIRE_MESSAGE((hex.size() == 7 && hex[0] == '#'), "not a #rrggbb colour: " << hex);
  const auto channel = [&](size_t at) { return std::stoi(hex.substr(at, 2), nullptr, 16); };
  return {channel(1), channel(3), channel(5)};
}

/// The chart's polylines and circles in drawing order, in page pixels.
inline std::vector<Mark> marks_of(const Element& svg) {
  const auto chart = chart_rect(svg);
  std::vector<Mark> out;
  const std::function<void(const Element&)> visit = [&](const Element& e) {
    if (e.name == "polyline") {
      Mark m{e.attributes.count("data-series") ? e.attributes.at("data-series") : "polyline",
             hex_rgb(e.attributes.at("stroke")),
             {},
             std::stod(e.attributes.at("stroke-width")) / 2,
             true};
      std::istringstream in(e.attributes.at("points"));
      for (std::string p; in >> p;) {
        const auto comma = p.find(',');
        m.points.push_back({chart.left + std::stod(p.substr(0, comma)),
                            chart.top + std::stod(p.substr(comma + 1))});
      }
      out.push_back(std::move(m));
    } else if (e.name == "circle") {
      out.push_back({"circle",
                     hex_rgb(e.attributes.at("fill")),
                     {{chart.left + std::stod(e.attributes.at("cx")),
                       chart.top + std::stod(e.attributes.at("cy"))}},
                     std::stod(e.attributes.at("r")),
                     false});
    }
    for (const auto& c : e.children) visit(c);
  };
  visit(svg);
  return out;
}

/// Distance from (x, y) to the nearest paint of `m` (0 inside it).
inline double distance_to(const Mark& m, double x, double y) {
  double best = 1e300;
  for (size_t i = 0; i < m.points.size(); ++i) {
    const auto& a = m.points[i];
    const auto& b = m.points[std::min(i + 1, m.points.size() - 1)];
    const double dx = b[0] - a[0], dy = b[1] - a[1], length2 = dx * dx + dy * dy;
    const double t =
        length2 > 0 ? std::clamp(((x - a[0]) * dx + (y - a[1]) * dy) / length2, 0.0, 1.0) : 0.0;
    best = std::min(best, std::hypot(x - a[0] - t * dx, y - a[1] - t * dy));
  }
  return std::max(0.0, best - m.reach);
}

inline bool same_colour(const uint8_t* pixel, const std::array<int, 3>& rgb) {
  constexpr int kTolerance = 40;  // per channel: the stroke's own colour, not a blend with white
  return std::abs(pixel[0] - rgb[0]) < kTolerance && std::abs(pixel[1] - rgb[1]) < kTolerance &&
         std::abs(pixel[2] - rgb[2]) < kTolerance;
}

/// What a person sees in a chart of the screenshot: every polyline in its
/// colour at each of its points (those no later mark of another colour
/// covers), and no pixel of a mark's colour in the plot area farther than
/// 3 pixels from every mark of that colour. Both margins are whole pixels
/// beyond what anti-aliasing touches, so they do not depend on it.
inline void check_drawn_where_the_data_puts_it(const Image& image, const Element& svg) {
  constexpr int kNear = 1;      // the vertex's pixel and its neighbours lie under the stroke
  constexpr double kClear = 3;  // no paint this far beyond a mark's edge
  const std::string chart = svg.attributes.at("data-chart");
  const auto marks = marks_of(svg);
  const auto coloured_near = [&](const std::array<double, 2>& p, const std::array<int, 3>& rgb) {
    const int cx = int(std::floor(p[0])), cy = int(std::floor(p[1]));
    for (int y = cy - kNear; y <= cy + kNear; ++y)
      for (int x = cx - kNear; x <= cx + kNear; ++x)
        if (x >= 0 && y >= 0 && x < image.width && y < image.height &&
            same_colour(image.at(x, y), rgb))
          return true;
    return false;
  };
  size_t lines = 0;
  for (size_t i = 0; i < marks.size(); ++i) {
    if (!marks[i].line || marks[i].points.empty()) continue;
    ++lines;
    size_t visible = 0, drawn = 0;
    for (const auto& p : marks[i].points) {
      bool covered = false;
      for (size_t j = i + 1; j < marks.size(); ++j)
        covered |= marks[j].rgb != marks[i].rgb && distance_to(marks[j], p[0], p[1]) <= kNear + 1.5;
      if (covered) continue;
      ++visible;
      drawn += coloured_near(p, marks[i].rgb);
    }
    CHECK_MESSAGE(2 * visible >= marks[i].points.size(),
                  chart << " / " << marks[i].name << ": " << visible << " points uncovered");
    CHECK_MESSAGE(drawn == visible, chart << " / " << marks[i].name << ": " << drawn << " of "
                                          << visible << " points drawn in its colour");
  }
  CHECK_MESSAGE(lines > 0, chart << ": no polyline");
  const auto plot = plot_rect(svg);
  size_t stray = 0;
  for (int y = plot.top + 1; y < plot.top + plot.height - 1; ++y) {
    for (int x = plot.left + 1; x < plot.left + plot.width - 1; ++x) {
      const uint8_t* pixel = image.at(x, y);
      for (const auto& m : marks) {
        if (!same_colour(pixel, m.rgb)) continue;
        bool near = false;
        for (const auto& other : marks)
          near |= other.rgb == m.rgb && distance_to(other, x + 0.5, y + 0.5) <= kClear;
        stray += !near;
        break;
      }
    }
  }
  CHECK_MESSAGE(stray == 0, chart << ": " << stray << " pixels of a mark's colour away from it");
}

}  // namespace tk_test::report
