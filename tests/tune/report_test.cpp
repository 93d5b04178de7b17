// The study's reports, read back from the outside: the CSV by an RFC 4180
// reader written here, the JSON by nlohmann, the HTML parsed strictly as XML
// and drawn by headless chromium. The trials are planted (complete, pruned,
// failed and running ones, a conditional parameter, a name that needs
// escaping), so every figure is checked exactly.
#if TRAINKIT_TEST_REPORT_READERS  // libxml2 and libpng (absent on the GPU machines)
#include "../report_readers.hpp"
#include "../scratch.hpp"
#endif
#include <doctest/doctest.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <trainkit/tune/pruners/none.hpp>
#include <trainkit/tune/report.hpp>
#include <trainkit/tune/samplers/random.hpp>
#include <trainkit/tune/study.hpp>

using namespace trainkit::tune;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kOdd = "a<b&\"c\"";  // a parameter name every report must escape
constexpr double kT0 = 1700000000.25;  // planted times: quarters, exact in a double

std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << file);
  return {std::istreambuf_iterator<char>(in), {}};
}

Param float_param(double v, double low, double high, bool log = false) {
  return {FloatDistribution{low, high, log, std::nullopt}, v};
}
Param int_param(int64_t v) {
  return {IntDistribution{1, 4, 1, false}, double(v)};
}
Param choice(const std::string& v) {
  return {CategoricalDistribution{{"sgd", "adam"}}, v == "sgd" ? 0.0 : 1.0};
}

FrozenTrial planted(int64_t number, TrialState state, std::optional<double> value,
                    const std::string& optimizer, double lr, int64_t layers,
                    std::map<int64_t, double> curve) {
  FrozenTrial t;
  t.id = 100 + number;
  t.number = number;
  t.state = state;
  t.value = value;
  t.params["lr"] = float_param(lr, 1e-5, 1e-1, true);
  t.params["layers"] = int_param(layers);
  t.params["optimizer"] = choice(optimizer);
  if (optimizer == "sgd") t.params["momentum"] = float_param(0.9 - 0.1 * double(number), 0, 0.99);
  t.params[kOdd] = float_param(1.0 / 3 + double(number), 0, 10);
  t.intermediate = std::move(curve);
  t.started_at = kT0 + 10.0 * double(number);
  if (state != TrialState::Running) t.finished_at = t.started_at + 12.5 + double(number);
  return t;
}

/// Six trials, listed out of number order: 1 and 4 are the best (a tie: the
/// first of them wins), 2 was pruned, 3 failed, 5 is still running.
std::vector<FrozenTrial> planted_trials() {
  std::vector<FrozenTrial> t;
  t.push_back(planted(4, TrialState::Complete, 0.125, "sgd", 3.7e-3, 3, {{0, 0.6}, {1, 0.125}}));
  t.push_back(
      planted(0, TrialState::Complete, 0.5, "sgd", 1.3e-4, 1, {{0, 0.9}, {1, 0.7}, {2, 0.5}}));
  t.push_back(
      planted(1, TrialState::Complete, 0.125, "adam", 2.9e-2, 2, {{0, 0.8}, {1, 0.4}, {2, 0.125}}));
  t.push_back(planted(2, TrialState::Pruned, 0.8, "adam", 6.1e-5, 4, {{0, 0.95}, {1, 0.8}}));
  t.back().system_attrs["prune_reason"] = "median pruner: 0.8 > 0.7 at step 1";
  t.push_back(planted(3, TrialState::Fail, std::nullopt, "sgd", 1e-2, 2, {}));
  t.back().system_attrs["fail_reason"] = "objective threw: \"bad, value\"\nsecond line";
  t.push_back(planted(5, TrialState::Running, std::nullopt, "adam", 5e-4, 1, {{0, 0.7}}));
  return t;
}

const FrozenTrial& by_number(const std::vector<FrozenTrial>& trials, int64_t number) {
  const auto it = std::find_if(trials.begin(), trials.end(),
                               [&](const FrozenTrial& t) { return t.number == number; });
  REQUIRE(it != trials.end());
  return *it;
}

/// RFC 4180: quoted fields may hold separators, doubled quotes, line breaks.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(field);
      field.clear();
    } else if (c == '\n') {
      rows.back().push_back(field);
      field.clear();
      rows.emplace_back();
    } else {
      field += c;
    }
  }
  REQUIRE(!quoted);
  REQUIRE(field.empty());
  REQUIRE(rows.back().empty());  // the text ends with a line break
  rows.pop_back();
  return rows;
}

/// Seconds since the epoch of "YYYY-MM-DDTHH:MM:SS.ffffffZ".
double parse_time(const std::string& s) {
  std::tm tm{};
  int micros = 0;
  REQUIRE_MESSAGE(std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d.%6dZ", &tm.tm_year, &tm.tm_mon,
                              &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &micros) == 7,
                  s);
  REQUIRE(s.size() == 27);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return double(timegm(&tm)) + micros / 1e6;
}

/// A cell of a parameter as the CSV writes it (numbers exactly).
std::string expected_cell(const Param& p) {
  const auto v = p.value();
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return "";  // floats are compared as numbers
}

}  // namespace

TEST_CASE("trials report: CSV round trip, a column per parameter, blanks where absent") {
  const auto trials = planted_trials();
  const auto dir = tk_test::temp_dir("trainkit_tune_report_csv");
  write_trials_csv(dir / "trials.csv", trials);
  const auto rows = parse_csv(read(dir / "trials.csv"));
  REQUIRE(rows.size() == 1 + trials.size());
  const std::vector<std::string> header = {
      "number",           "state",          "value",         "started",   "finished",
      "duration_s",       "params_" + kOdd, "params_layers", "params_lr", "params_momentum",
      "params_optimizer", "reason"};
  CHECK(rows[0] == header);
  std::map<std::string, size_t> col;
  for (size_t k = 0; k < header.size(); ++k) col[header[k]] = k;
  for (size_t r = 1; r < rows.size(); ++r) {
    const auto& row = rows[r];
    REQUIRE(row.size() == header.size());
    CHECK(row[col["number"]] == std::to_string(r - 1));  // in number order
    const auto& t = by_number(trials, int64_t(r - 1));
    CAPTURE(t.number);
    CHECK(row[col["state"]] == to_string(t.state));
    if (t.value) {
      CHECK(std::stod(row[col["value"]]) == *t.value);
    } else {
      CHECK(row[col["value"]].empty());
    }
    CHECK(parse_time(row[col["started"]]) == t.started_at);
    if (t.finished()) {
      CHECK(parse_time(row[col["finished"]]) == t.finished_at);
      CHECK(std::stod(row[col["duration_s"]]) == 12.5 + double(t.number));
    } else {
      CHECK(row[col["finished"]].empty());
      CHECK(row[col["duration_s"]].empty());
    }
    for (const auto& name : {kOdd, std::string("layers"), std::string("lr"),
                             std::string("momentum"), std::string("optimizer")}) {
      const auto& cell = row[col["params_" + name]];
      const auto p = t.params.find(name);
      if (p == t.params.end()) {
        CHECK_MESSAGE(cell.empty(), name);  // the conditional parameter, absent
      } else if (std::holds_alternative<FloatDistribution>(p->second.distribution)) {
        CHECK_MESSAGE(std::stod(cell) == p->second.internal, name);
      } else {
        CHECK_MESSAGE(cell == expected_cell(p->second), name);
      }
    }
  }
  CHECK(rows[3][col["reason"]] == "median pruner: 0.8 > 0.7 at step 1");
  CHECK(rows[4][col["reason"]] == "objective threw: \"bad, value\"\nsecond line");
  CHECK(rows[1][col["reason"]].empty());
  CHECK(rows[1][col["params_momentum"]] == "0.9");  // the shortest exact text
  CHECK(rows[2][col["params_momentum"]].empty());
}

TEST_CASE("trials report: JSON round trip with intermediate values and the best trial") {
  const auto trials = planted_trials();
  const auto dir = tk_test::temp_dir("trainkit_tune_report_json");
  write_trials_json(dir / "trials.json", "lr \"search\"", Direction::Minimize, trials);
  const auto doc = json::parse(read(dir / "trials.json"));
  CHECK(doc["study"] == "lr \"search\"");
  CHECK(doc["direction"] == "minimize");
  CHECK(doc["counts"] ==
        json{{"waiting", 0}, {"running", 1}, {"complete", 3}, {"pruned", 1}, {"fail", 1}});
  CHECK(doc["params"] == json{kOdd, "layers", "lr", "momentum", "optimizer"});
  // Trials 1 and 4 tie at 0.125: the lower number is the best, as in Study::best_trial.
  CHECK(doc["best_trial"]["number"] == 1);
  CHECK(doc["best_trial"]["value"] == 0.125);
  CHECK(doc["best_trial"]["params"]["optimizer"] == "adam");
  REQUIRE(doc["trials"].size() == trials.size());
  for (size_t k = 0; k < trials.size(); ++k) {
    const auto& row = doc["trials"][k];
    const auto& t = by_number(trials, int64_t(k));
    CAPTURE(k);
    CHECK(row["number"] == t.number);
    CHECK(row["state"] == to_string(t.state));
    CHECK(row["value"] == (t.value ? json(*t.value) : json(nullptr)));
    CHECK(parse_time(row["started"]) == t.started_at);
    CHECK(row["finished"].is_null() == !t.finished());
    if (t.finished()) {
      CHECK(parse_time(row["finished"]) == t.finished_at);
      CHECK(row["duration_s"] == t.finished_at - t.started_at);
    }
    REQUIRE(row["params"].size() == t.params.size());
    for (const auto& [name, p] : t.params) {
      CHECK_MESSAGE(row["params"][name] == p.value(), name);
      CHECK(distribution_from_json(row["distributions"][name]) == p.distribution);
    }
    std::map<int64_t, double> curve;
    for (const auto& point : row["intermediate"]) curve[point[0]] = point[1];
    CHECK(curve == t.intermediate);
  }
  CHECK(doc["trials"][2]["reason"] == "median pruner: 0.8 > 0.7 at step 1");
  CHECK(doc["trials"][3]["reason"] == "objective threw: \"bad, value\"\nsecond line");
  CHECK(doc["trials"][0]["reason"].is_null());
  CHECK(!doc["trials"][1]["params"].contains("momentum"));

  // Maximising, the worst of the minimiser is the best.
  CHECK(trials_json("s", Direction::Maximize, trials)["best_trial"]["number"] == 0);
  CHECK(trials_json("s", Direction::Minimize, {})["best_trial"].is_null());
}

TEST_CASE("study report: the same trials give the same bytes, written atomically") {
  auto trials = planted_trials();
  const auto dir = tk_test::temp_dir("trainkit_tune_report_same");
  StudyReport{dir}.write("same", Direction::Minimize, trials);
  const auto html = read(dir / "report.html"), csv = read(dir / "trials.csv");
  std::reverse(trials.begin(), trials.end());  // another order, the same study
  StudyReport{dir}.write("same", Direction::Minimize, trials);
  CHECK(read(dir / "report.html") == html);
  CHECK(read(dir / "trials.csv") == csv);
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.insert(e.path().filename().string());
  CHECK(files == std::set<std::string>{"report.html", "trials.csv", "trials.json"});  // no tmp
  CHECK(html.find(kOdd) == std::string::npos);
  CHECK(html.find("a&lt;b&amp;&quot;c&quot;") != std::string::npos);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));  // nothing fetched
  CHECK_THROWS_WITH_AS(write_study_report(dir / "", "s", Direction::Minimize, trials),
                       doctest::Contains("write_study_report.path"), trainkit::Error);
}

TEST_CASE("study report: from a Study, through StudyReport") {
  auto study = Study(std::make_shared<InMemoryStorage>(), {.name = "quadratic <x>"},
                     sampler::Random({.seed = 3}), pruner::None{});
  study.optimize(
      [](Trial& t) {
        const double x = t.suggest_float("x", -3, 3);
        const auto kind = t.suggest_categorical("kind", {"a", "b"});
        const double y = kind == "a" ? t.suggest_float("y", 1e-3, 1, {.log = true}) : 0.5;
        for (int64_t step = 0; step < 3; ++step) t.report(x * x + y + 1.0 / double(step + 1), step);
        return x * x + y;
      },
      {.n_trials = 12, .log = nullptr});
  const auto dir = tk_test::temp_dir("trainkit_tune_report_study");
  StudyReport{dir / "out"}.write(study);
  const auto doc = json::parse(read(dir / "out" / "trials.json"));
  CHECK(doc["study"] == "quadratic <x>");
  CHECK(doc["trials"].size() == 12);
  CHECK(doc["best_trial"]["number"] == study.best_trial().number);
  CHECK(parse_csv(read(dir / "out" / "trials.csv")).size() == 13);
  CHECK(read(dir / "out" / "report.html").find("<h1>quadratic &lt;x&gt;</h1>") !=
        std::string::npos);
}

#if TRAINKIT_TEST_REPORT_READERS
using namespace tk_test::report;

namespace {

std::string attr(const Element& e, const std::string& name) {
  const auto it = e.attributes.find(name);
  return it == e.attributes.end() ? "" : it->second;
}

std::map<std::string, const Element*> charts_of(const Element& root) {
  std::map<std::string, const Element*> charts;
  for (const auto* s : find_all(root, "svg")) {
    CHECK(charts.emplace(s->attributes.at("data-chart"), s).second);  // one of each
  }
  return charts;
}

}  // namespace

TEST_CASE("study report: well-formed, a slice per parameter, a polyline per complete trial") {
  const auto trials = planted_trials();
  const auto dir = tk_test::temp_dir("trainkit_tune_report_html");
  write_study_report(dir / "report.html", "study <1> & \"2\"", Direction::Minimize, trials);
  const auto root = parse_report(dir / "report.html");
  const auto charts = charts_of(root);

  // The header: the study's name, the counts by state, the best trial.
  const auto h1 = find_all(root, "h1");
  REQUIRE(h1.size() == 1);
  CHECK(h1[0]->text == "study <1> & \"2\"");
  std::map<std::string, std::string> counts;
  for (const auto* span : find_all(root, "span"))
    if (!attr(*span, "data-state").empty()) counts[attr(*span, "data-state")] = span->text;
  CHECK(counts == std::map<std::string, std::string>{{"waiting", "waiting 0"},
                                                     {"running", "running 1"},
                                                     {"complete", "complete 3"},
                                                     {"pruned", "pruned 1"},
                                                     {"fail", "fail 1"}});
  std::map<std::string, std::string> best;
  for (const auto* table : find_all(root, "table")) {
    if (attr(*table, "class") != "best-params") continue;
    for (const auto& tr : table->children) best[tr.children.at(0).text] = tr.children.at(1).text;
  }
  CHECK(best ==
        std::map<std::string, std::string>{
            {kOdd, "1.3333333333333333"}, {"layers", "2"}, {"lr", "0.029"}, {"optimizer", "adam"}});

  // One slice per parameter, the log one on a log axis.
  std::map<std::string, std::string> slices;
  for (const auto& [title, svg] : charts)
    if (title.starts_with("slice: ")) slices[svg->attributes.at("data-param")] = title;
  CHECK(slices.size() == 5);
  for (const auto& name : {kOdd, std::string("layers"), std::string("lr"), std::string("momentum"),
                           std::string("optimizer")}) {
    REQUIRE_MESSAGE(slices.count(name), name);
    CHECK(slices[name] == "slice: " + name);
  }
  CHECK(charts.at("slice: lr")->attributes.at("data-scale") == "log");
  CHECK(charts.at("slice: layers")->attributes.at("data-scale") == "linear");
  CHECK(charts.at("slice: optimizer")->attributes.at("data-scale") == "categorical");
  // Complete trials only: momentum (sgd only) has two of the three.
  auto dots = [&](const std::string& chart) {
    size_t n = 0;
    for (const auto* c : find_all(*charts.at(chart), "circle"))
      n += c->attributes.at("class") == "complete";
    return n;
  };
  CHECK(dots("slice: lr") == 3);
  CHECK(dots("slice: momentum") == 2);
  CHECK(dots("optimisation history") == 3);

  // Parallel coordinates: a polyline per complete trial, through every axis.
  const auto lines = find_all(*charts.at("parallel coordinates"), "polyline");
  CHECK(lines.size() == 3);
  std::set<std::string> drawn;
  for (const auto* line : lines) {
    drawn.insert(line->attributes.at("data-trial"));
    std::istringstream points(line->attributes.at("points"));
    size_t n = 0;
    for (std::string p; points >> p;) ++n;
    CHECK(n == 5 + 1);  // the parameters and the objective
  }
  CHECK(drawn == std::set<std::string>{"0", "1", "4"});

  // Learning curves: every trial that reported; the pruned one is cut.
  std::map<std::string, std::string> curves;
  for (const auto* line : find_all(*charts.at("intermediate values"), "polyline"))
    curves[line->attributes.at("data-trial")] = line->attributes.at("data-state");
  CHECK(curves == std::map<std::string, std::string>{{"0", "complete"},
                                                     {"1", "complete"},
                                                     {"2", "pruned"},
                                                     {"4", "complete"},
                                                     {"5", "running"}});
  CHECK(find_all(*charts.at("intermediate values"), "path").size() == 1);   // the cut
  CHECK(find_all(*charts.at("optimisation history"), "path").size() == 1);  // the pruned value

  // Every trial in the table.
  for (const auto* table : find_all(root, "table"))
    if (attr(*table, "class") == "trials") CHECK(table->children.size() == 1 + trials.size());
}

TEST_CASE("study report: several objectives: the Pareto front, each value, the best trials") {
  const std::vector directions{Direction::Minimize, Direction::Maximize};
  Study study(std::make_shared<InMemoryStorage>(), {.name = "front", .directions = directions},
              sampler::Random({.seed = 9}));
  study.optimize(
      [](Trial& t) -> std::vector<double> {
        const double x = t.suggest_float("x", -1, 3);
        t.set_constraints({x - 2.5});  // x above 2.5 breaks it
        if (t.number == 3) throw std::runtime_error("failed");
        return {x * x, -(x - 2) * (x - 2)};
      },
      {.n_trials = 30, .catch_exceptions = true, .log = nullptr});
  const auto dir = tk_test::temp_dir("trainkit_tune_report_front");
  StudyReport{dir}.write(study);
  const auto trials = study.trials();
  const auto best = study.best_trials();
  std::set<int64_t> front;
  for (const auto& t : best) front.insert(t.number);
  int complete = 0, infeasible = 0;
  for (const auto& t : trials) {
    complete += t.state == TrialState::Complete;
    infeasible += t.state == TrialState::Complete && !t.feasible();
  }
  REQUIRE(infeasible > 0);

  const auto doc = json::parse(read(dir / "trials.json"));
  CHECK(doc["directions"] == json{"minimize", "maximize"});
  CHECK_FALSE(doc.contains("best_trial"));
  std::set<int64_t> listed;
  for (const auto& b : doc["best_trials"]) listed.insert(b["number"].get<int64_t>());
  CHECK(listed == front);
  for (const auto& row : doc["trials"]) {
    const auto& t = trials.at(row["number"].get<size_t>());
    CHECK(row.value("values", json::array()) == json(t.values));
    CHECK(row["constraints"] == json(*t.constraints()));
  }
  const auto csv = parse_csv(read(dir / "trials.csv"));
  REQUIRE(csv.size() == 31);
  CHECK(csv[0][3] == "values_0");
  CHECK(csv[0][4] == "values_1");
  CHECK(std::stod(csv[1][3]) == trials[0].values[0]);  // exact: 17 digits

  const auto root = parse_report(dir / "report.html");
  const auto charts = charts_of(root);
  CHECK(charts.count("pareto front") == 1);
  CHECK(charts.count("optimisation history") == 0);  // one objective's charts are left out
  CHECK(charts.count("parallel coordinates") == 0);
  std::map<std::string, size_t> circles;
  for (const auto* c : find_all(*charts.at("pareto front"), "circle"))
    ++circles[c->attributes.at("class")];
  CHECK(circles["front"] == front.size());
  CHECK(circles["front"] + circles["complete"] == size_t(complete - infeasible));
  CHECK(find_all(*charts.at("pareto front"), "path").size() == size_t(infeasible));
  std::string size;
  for (const auto* b : find_all(root, "b"))
    if (attr(*b, "class") == "front-size") size = b->text;
  CHECK(size == std::to_string(front.size()));
}

TEST_CASE("study report: no trial, no parameter, one trial: still a page") {
  const auto dir = tk_test::temp_dir("trainkit_tune_report_empty");
  write_study_report(dir / "none.html", "empty", Direction::Maximize, {});
  CHECK(charts_of(parse_report(dir / "none.html")).size() == 1);  // the history
  auto one = planted_trials();
  one.resize(1);
  write_study_report(dir / "one.html", "one", Direction::Maximize, one);
  CHECK(charts_of(parse_report(dir / "one.html")).size() == 1 + 1 + 1 + 5);
  one[0].params.clear();
  write_study_report(dir / "bare.html", "bare", Direction::Maximize, one);
  CHECK(charts_of(parse_report(dir / "bare.html")).size() == 2);  // history, curves
}

TEST_CASE("study report: a headless browser draws every chart (chromium screenshot)") {
  const auto dir = tk_test::temp_dir("trainkit_tune_report_browser");
  write_study_report(dir / "report.html", "browser", Direction::Minimize, planted_trials());
  const auto root = parse_report(dir / "report.html");
  const auto svgs = find_all(root, "svg");
  REQUIRE(svgs.size() == 3 + 5);
  int height = 0;
  for (const auto* s : svgs) {
    const auto chart = chart_rect(*s);
    height = std::max(height, chart.top + chart.height);
  }
  const auto image = screenshot(dir / "report.html", dir, height + 40);
  REQUIRE(image.height >= height);
  // In each plot area, pixels of a saturated colour: the marks, not the
  // white ground, the grey grid or the text.
  for (const auto* s : svgs) {
    const auto r = plot_rect(*s);
    int drawn = 0;
    for (int y = r.top; y < r.top + r.height; ++y) {
      for (int x = r.left; x < r.left + r.width; ++x) {
        const uint8_t* p = image.at(x, y);
        drawn += std::max({p[0], p[1], p[2]}) - std::min({p[0], p[1], p[2]}) > 60;
      }
    }
    CHECK_MESSAGE(drawn > 30, s->attributes.at("data-chart") << ": " << drawn << " pixels");
  }
}

#endif  // TRAINKIT_TEST_REPORT_READERS
