#pragma once
// Reading the HTML reports from the outside (RunReport in test_io, the study
// report in test_tune): parsed strictly as XML by libxml2, and drawn by a
// real browser (headless chromium) whose screenshot libpng reads back.
// Only built where both libraries are (TRAINKIT_TEST_REPORT_READERS).
#include <doctest/doctest.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <png.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
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

}  // namespace tk_test::report
