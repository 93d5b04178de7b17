// Observability callbacks, checked from the outside: the event file is read
// back by a decoder written here from the wire-format and TFRecord specs
// (bitwise CRC, generic protobuf fields), the JSON lines and the trace are
// parsed, the report is parsed as XML and drawn by a real browser.
#if TRAINKIT_TEST_REPORT_READERS  // libxml2 and libpng (absent on the GPU machines)
#include "report_readers.hpp"
#endif
#include <trainkit/callbacks.hpp>
#include <trainkit/finders.hpp>
#include <trainkit/io.hpp>
#include <trainkit/trainkit.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"

using namespace trainkit;
namespace fs = std::filesystem;

namespace {

// ---- an independent reader of TFRecord files and protobuf messages ----

uint32_t crc32c_bitwise(std::string_view s) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const unsigned char c : s) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t masked(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

uint64_t little_endian(std::string_view s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(s[at + size_t(i)])) << (8 * i);
  return v;
}

/// Payloads of a TFRecord file, each CRC checked.
std::vector<std::string> read_records(const fs::path& file) {
  const auto bytes = io::read_file(file);
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    REQUIRE(at + 12 <= bytes.size());
    const uint64_t length = little_endian(bytes, at, 8);
    REQUIRE(masked(crc32c_bitwise(std::string_view(bytes).substr(at, 8))) ==
            little_endian(bytes, at + 8, 4));
    REQUIRE(at + 12 + length + 4 <= bytes.size());
    const auto payload = bytes.substr(at + 12, length);
    REQUIRE(masked(crc32c_bitwise(payload)) == little_endian(bytes, at + 12 + length, 4));
    out.push_back(payload);
    at += 12 + length + 4;
  }
  return out;
}

struct Field {
  int wire = 0;
  uint64_t number = 0;  // varint, or the bits of a fixed32/fixed64
  std::string bytes;    // length-delimited
};
using Message = std::multimap<int, Field>;

uint64_t read_varint(std::string_view s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    REQUIRE(at < s.size());
    const auto b = uint8_t(s[at++]);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}

Message parse(std::string_view s) {
  Message m;
  size_t at = 0;
  while (at < s.size()) {
    const uint64_t key = read_varint(s, at);
    Field f;
    f.wire = int(key & 7);
    switch (f.wire) {
      case 0:
        f.number = read_varint(s, at);
        break;
      case 1:
        f.number = little_endian(s, at, 8), at += 8;
        break;
      case 5:
        f.number = little_endian(s, at, 4), at += 4;
        break;
      case 2: {
        const auto n = read_varint(s, at);
        REQUIRE(at + n <= s.size());
        f.bytes = std::string(s.substr(at, n));
        at += n;
        break;
      }
      default:
        FAIL("unexpected wire type " << f.wire);
    }
    m.emplace(int(key >> 3), std::move(f));
  }
  REQUIRE(at == s.size());
  return m;
}

const Field& one(const Message& m, int field) {
  REQUIRE_MESSAGE(m.count(field) == 1, "field " << field);
  return m.find(field)->second;
}
double as_double(const Field& f) {
  return std::bit_cast<double>(f.number);
}
float as_float(const Field& f) {
  return std::bit_cast<float>(uint32_t(f.number));
}
std::vector<double> packed_doubles(const Field& f) {
  std::vector<double> out;
  for (size_t at = 0; at < f.bytes.size(); at += 8)
    out.push_back(std::bit_cast<double>(little_endian(f.bytes, at, 8)));
  return out;
}

// ---- one small run with every observability callback ----

struct Run {
  fs::path dir, events, jsonl, report, profile;
  int64_t steps = 0, epochs = 0;
  std::vector<int64_t> logged_steps;
  finders::LrFindResult lr_find;  ///< run first, its chart in the report
};

constexpr int64_t kLogEvery = 2, kHistogramEvery = 4, kProfileFirst = 3, kProfileLast = 6;

const Run& run_once() {
  static const Run run = [] {
    Run r;
    r.dir = tk_test::temp_dir("trainkit_observe_test");
    torch::manual_seed(0);
    auto x = torch::randn({64, 8});
    auto y = torch::randint(0, 3, {64});
    data::TensorBatches train({x, y}, {.batch_size = 8});
    auto model = tk_test::seeded_mlp();
    const double flops = callbacks::training_flops_per_sample(model, x.slice(0, 0, 4));
    Trainer<optim::SGD, sched::Constant, precision::Fp32, accumulate::None, clip::Norm> trainer(
        model, {.optim = {.lr = 0.05}, .clip = {.max_norm = 1.0}});
    callbacks::TensorBoard tensorboard(
        {.dir = r.dir / "tb", .histogram_every = kHistogramEvery, .hparams = {{"batch", 8.0}}});
    // The range test puts the trainer back: the run below is as without it.
    r.lr_find = finders::lr_find(trainer, task::Classification{}, train,
                                 {.min_lr = 1e-4, .max_lr = 10.0, .num_steps = 30});
    callbacks::RunReport report({.path = r.dir / "report.html", .title = "observe test"});
    report.add_figure(r.lr_find.figure());
    const auto result = trainer.fit(
        task::Classification{}, train, {.epochs = 3, .val_data = train, .log_every = kLogEvery},
        callbacks::Throughput({.flops_per_sample = flops, .peak_flops = 1e12}),
        callbacks::LrMonitor({.per_epoch = true}), tensorboard,  // an lvalue: used in place
        callbacks::JsonLines({.path = r.dir / "log.jsonl"}), report,
        callbacks::Profiler(
            {.first_step = kProfileFirst, .last_step = kProfileLast, .dir = r.dir / "profile"}));
    r.events = tensorboard.file();
    // the callbacks that own files cannot be copied (a copy would lose its file)
    static_assert(!std::is_copy_constructible_v<callbacks::TensorBoard> &&
                  !std::is_copy_constructible_v<callbacks::JsonLines> &&
                  !std::is_copy_constructible_v<callbacks::Profiler>);
    r.jsonl = r.dir / "log.jsonl";
    r.report = r.dir / "report.html";
    r.profile = r.dir / "profile";
    r.steps = result.steps;
    r.epochs = result.epochs;
    for (int64_t s = kLogEvery; s <= r.steps; s += kLogEvery) r.logged_steps.push_back(s);
    return r;
  }();
  return run;
}

std::vector<nlohmann::json> json_lines(const fs::path& file) {
  std::ifstream in(file);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

/// Summary values of every event, in order: (tag, step, value message).
struct Value {
  std::string tag;
  int64_t step;
  Message value;
};
std::vector<Value> summary_values(const std::vector<std::string>& records) {
  std::vector<Value> out;
  for (size_t i = 1; i < records.size(); ++i) {
    const auto event = parse(records[i]);
    const int64_t step = event.count(2) ? int64_t(one(event, 2).number) : 0;
    const auto summary = parse(one(event, 5).bytes);
    for (auto [it, end] = summary.equal_range(1); it != end; ++it) {
      auto value = parse(it->second.bytes);
      out.push_back({one(value, 1).bytes, step, std::move(value)});
    }
  }
  return out;
}

}  // namespace

TEST_CASE("crc32c matches the standard check value and the bitwise definition") {
  CHECK(io::crc32c("123456789") == 0xE3069283u);
  for (const std::string& s : {std::string(), std::string("a"), std::string(1000, '\xff')})
    CHECK(io::crc32c(s) == crc32c_bitwise(s));
}

TEST_CASE("TensorBoard: records, CRCs and Event fields decode independently") {
  const auto& run = run_once();
  REQUIRE(fs::exists(run.events));
  CHECK(run.events.filename().string().find("events.out.tfevents.") == 0);
  const auto records = read_records(run.events);
  REQUIRE(records.size() > 10);
  const auto first = parse(records[0]);
  CHECK(one(first, 3).bytes == "brain.Event:2");
  CHECK(as_double(one(first, 1)) > 1.6e9);  // wall time, seconds since 1970

  const auto values = summary_values(records);
  const auto lines = json_lines(run.jsonl);
  std::map<int64_t, nlohmann::json> step_lines;
  for (const auto& l : lines)
    if (l["kind"] == "step") step_lines[l["step"].get<int64_t>()] = l;

  std::vector<int64_t> loss_steps;
  int histograms = 0;
  bool text = false, start = false, end = false;
  for (const auto& v : values) {
    if (v.tag == "train/loss") {
      loss_steps.push_back(v.step);
      // the same number the JSON log wrote, as a float32 simple_value
      CHECK(as_float(one(v.value, 2)) ==
            doctest::Approx(step_lines.at(v.step)["loss"].get<double>()).epsilon(1e-6));
    } else if (v.tag.starts_with("weights/") || v.tag.starts_with("grads/")) {
      CHECK(v.step % kHistogramEvery == 0);
      const auto h = parse(one(v.value, 5).bytes);
      const auto limits = packed_doubles(one(h, 6)), counts = packed_doubles(one(h, 7));
      REQUIRE(limits.size() == counts.size());
      double n = 0;
      for (const double c : counts) n += c;
      CHECK(n == as_double(one(h, 3)));  // every element in some bucket
      CHECK(as_double(one(h, 1)) <= as_double(one(h, 2)));
      CHECK(limits.back() == as_double(one(h, 2)));
      ++histograms;
    } else if (v.tag == "config") {
      const auto tensor = parse(one(v.value, 8).bytes);
      CHECK(one(tensor, 1).number == 7);  // DT_STRING
      CHECK(one(tensor, 8).bytes.find("optim::SGD") != std::string::npos);
      CHECK(parse(one(parse(one(v.value, 9).bytes), 1).bytes).find(1)->second.bytes == "text");
      text = true;
    } else if (v.tag == "_hparams_/session_start_info") {
      const auto plugin = parse(one(parse(one(v.value, 9).bytes), 1).bytes);
      CHECK(one(plugin, 1).bytes == "hparams");
      const auto session = parse(one(parse(one(plugin, 2).bytes), 3).bytes);
      std::map<std::string, Message> hparams;
      for (auto [it, e] = session.equal_range(1); it != e; ++it) {
        const auto entry = parse(it->second.bytes);
        hparams[one(entry, 1).bytes] = parse(one(entry, 2).bytes);
      }
      CHECK(as_double(one(hparams.at("lr"), 2)) == doctest::Approx(0.05));
      CHECK(as_double(one(hparams.at("batch"), 2)) == 8.0);
      CHECK(one(hparams.at("clip"), 3).bytes == "trainkit::clip::Norm");
      start = true;
    } else if (v.tag == "_hparams_/session_end_info") {
      const auto plugin = parse(one(parse(one(v.value, 9).bytes), 1).bytes);
      CHECK(one(parse(one(parse(one(plugin, 2).bytes), 4).bytes), 1).number == 1);  // SUCCESS
      end = true;
    }
  }
  CHECK(loss_steps == run.logged_steps);
  // 2 weight + 2 bias tensors, weights and grads, at steps 4, 8, ..., 24
  CHECK(histograms == 4 * 2 * int(run.steps / kHistogramEvery));
  CHECK(text);
  CHECK(start);
  CHECK(end);
}

TEST_CASE("JsonLines, Throughput and LrMonitor: one object per logging step and epoch") {
  const auto& run = run_once();
  const auto lines = json_lines(run.jsonl);
  REQUIRE(!lines.empty());
  CHECK(lines.front()["kind"] == "config");
  int steps = 0, epochs = 0;
  for (const auto& l : lines) {
    if (l["kind"] == "step") {
      ++steps;
      CHECK(l["lr"].get<double>() == doctest::Approx(0.05));
      CHECK(l.contains("grad_norm"));
      const double samples_per_s = l["samples_per_s"];
      CHECK(samples_per_s > 0);
      CHECK(l["steps_per_s"].get<double>() == doctest::Approx(samples_per_s / 8));
      CHECK(l["flops_per_s"].get<double>() / samples_per_s ==
            doctest::Approx(3 * (2 * 8 * 16 + 2 * 16 * 3)));
      CHECK(l["mfu"].get<double>() == doctest::Approx(l["flops_per_s"].get<double>() / 1e12));
    } else if (l["kind"] == "epoch") {
      ++epochs;
      CHECK(l.contains("val_loss"));
      CHECK(l["lr"].get<double>() == doctest::Approx(0.05));
    }
  }
  CHECK(steps == int(run.logged_steps.size()));
  CHECK(epochs == run.epochs);
}

TEST_CASE(
    "training_flops_per_sample counts Linear and Conv FLOPs three times (forward and backward)") {
  auto mlp = tk_test::seeded_mlp(1, 20, 30, 5);
  CHECK(callbacks::training_flops_per_sample(mlp, torch::randn({4, 20})) ==
        3.0 * (2 * 20 * 30 + 2 * 30 * 5));
  torch::nn::Sequential cnn(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)),
                            torch::nn::ReLU(), torch::nn::Flatten(),
                            torch::nn::Linear(8 * 16 * 16, 10));
  CHECK(callbacks::training_flops_per_sample(cnn, torch::randn({2, 3, 16, 16})) ==
        3.0 * (2.0 * 3 * 9 * 8 * 16 * 16 + 2.0 * 8 * 16 * 16 * 10));
  CHECK_THROWS_WITH_AS(callbacks::Throughput({.flops_per_sample = 0, .peak_flops = 1e12}),
                       doctest::Contains("throughput.peak_flops"), Error);
}

#if TRAINKIT_TEST_REPORT_READERS
using namespace tk_test::report;

TEST_CASE("RunReport: well-formed, one SVG per chart, one point per logged step") {
  const auto& run = run_once();
  const auto root = parse_report(run.report);
  std::vector<const Element*> svgs;
  find_all(root, "svg", svgs);
  std::map<std::string, const Element*> charts;
  for (const auto* s : svgs) charts[s->attributes.at("data-chart")] = s;
  CHECK(svgs.size() == charts.size());
  for (const char* name : {"lr_find", "loss", "lr", "grad_norm", "samples_per_s", "steps_per_s",
                           "flops_per_s", "mfu", "val_accuracy (epoch)", "lr (epoch)"}) {
    CHECK_MESSAGE(charts.count(name) == 1, name);
  }
  for (const auto& [name, svg] : charts) {
    std::vector<const Element*> lines;
    find_all(*svg, "polyline", lines);
    REQUIRE(!lines.empty());
    for (const auto* line : lines) {
      std::istringstream points(line->attributes.at("points"));
      size_t n = 0;
      for (std::string p; points >> p;) ++n;
      const auto& series = line->attributes.at("data-series");
      const bool per_epoch =
          series == "train_loss" || series == "val_loss" || name.ends_with("(epoch)");
      const size_t expected = name == "lr_find" ? run.lr_find.lrs.size()
                              : per_epoch       ? size_t(run.epochs)
                                                : run.logged_steps.size();
      CHECK_MESSAGE(n == expected, name << " / " << series);
    }
  }
  // The range test's chart: its suggestion marked where the curve has it.
  const auto& lr = run.lr_find;
  REQUIRE(lr.suggestion.has_value());
  std::vector<const Element*> mark;  // the chart's other lines are its grid
  for (const auto* line : find_all(*charts.at("lr_find"), "line"))
    if (line->attributes.count("data-mark")) mark.push_back(line);
  REQUIRE(mark.size() == 1);
  CHECK(mark[0]->attributes.at("data-mark") == "suggestion");
  std::istringstream points(
      find_all(*charts.at("lr_find"), "polyline")[0]->attributes.at("points"));
  std::vector<std::string> xs;
  for (std::string p; points >> p;) xs.push_back(p.substr(0, p.find(',')));
  const auto at = std::find(lr.lrs.begin(), lr.lrs.end(), *lr.suggestion) - lr.lrs.begin();
  REQUIRE(size_t(at) < xs.size());
  CHECK(mark[0]->attributes.at("x1") == xs[size_t(at)]);
  CHECK(std::stod(xs.front()) < std::stod(xs.back()));  // lr grows to the right

  std::vector<const Element*> tables;
  find_all(root, "table", tables);
  CHECK(tables.size() == 2);  // final figures, configuration
  CHECK(io::read_file(run.report).find("Trainer&lt;trainkit::optim::SGD") != std::string::npos);
}

TEST_CASE("RunReport: the loss on a log scale, and each axis with round-valued ticks") {
  const auto& run = run_once();
  const auto root = parse_report(run.report);
  std::map<std::string, const Element*> charts;
  for (const auto* s : find_all(root, "svg")) charts[s->attributes.at("data-chart")] = s;
  // (value, position) of each tick label of class `kind`; the label sits 4 px
  // below its y tick's line, and centred on its x tick
  const auto ticks = [](const Element& svg, const std::string& kind) {
    std::vector<std::pair<double, double>> out;
    for (const auto* t : find_all(svg, "text")) {
      if (!t->attributes.count("class") || t->attributes.at("class") != kind) continue;
      const double at = std::stod(t->attributes.at(kind == "tick-y" ? "y" : "x"));
      out.emplace_back(std::stod(t->text), kind == "tick-y" ? at - 4 : at);
    }
    return out;
  };
  // Positions follow `scale` of the values, equally spaced ticks equally far apart.
  const auto check_axis = [](const std::vector<std::pair<double, double>>& t, bool log) {
    REQUIRE(t.size() >= 3);
    const auto f = [&](double v) { return log ? std::log10(v) : v; };
    const double per_unit = (t[1].second - t[0].second) / (f(t[1].first) - f(t[0].first));
    for (const auto& [value, at] : t)
      CHECK(std::abs(at - t[0].second - per_unit * (f(value) - f(t[0].first))) < 1.0);
  };
  const auto& loss = *charts.at("loss");
  CHECK(loss.attributes.at("data-y-scale") == "log");
  check_axis(ticks(loss, "tick-y"), true);
  const auto steps = ticks(loss, "tick-x");
  check_axis(steps, false);
  for (const auto& [value, at] : steps) CHECK(value == std::round(value));  // whole steps
  CHECK(steps.front().first <= double(run.steps) / 4 + 1);  // the ticks span the steps
  CHECK(steps.back().first >= double(run.steps) * 0.6);
  // A step scalar keeps a linear axis, with ticks as well.
  const auto& grad_norm = *charts.at("grad_norm");
  CHECK(grad_norm.attributes.at("data-y-scale") == "linear");
  check_axis(ticks(grad_norm, "tick-y"), false);
  // The range test's learning rates: a log x axis, ticks at round rates.
  check_axis(ticks(*charts.at("lr_find"), "tick-x"), true);
}

TEST_CASE("RunReport: a resumed run's report covers the whole run") {
  const auto dir = tk_test::temp_dir("trainkit_report_resume");
  torch::manual_seed(0);
  data::TensorBatches train({torch::randn({64, 8}), torch::randint(0, 3, {64})}, {.batch_size = 8});
  auto fit = [&](int64_t epochs, const fs::path& resume) {
    Trainer<optim::SGD> trainer(tk_test::seeded_mlp());
    // RunReport first: the epoch's figures are in it when the checkpoint is taken
    trainer.fit(task::Classification{}, train,
                {.epochs = epochs, .val_data = train, .log_every = 2, .resume_from = resume},
                callbacks::RunReport({.path = dir / "report.html"}),
                callbacks::ModelCheckpoint({.dir = dir / "ckpt"}));
  };
  fit(2, {});
  fit(4, dir / "ckpt");
  const auto root = parse_report(dir / "report.html");
  std::vector<const Element*> lines;
  find_all(root, "polyline", lines);
  std::map<std::string, size_t> points;
  for (const auto* line : lines) {
    std::istringstream in(line->attributes.at("points"));
    size_t n = 0;
    for (std::string p; in >> p;) ++n;
    points[line->attributes.at("data-series")] = n;
  }
  CHECK(points.at("loss") == 4 * 8 / 2);  // every logging step of all four epochs
  CHECK(points.at("val_loss") == 4);
  CHECK(points.at("train_loss") == 4);
}

TEST_CASE("RunReport: a headless browser draws every chart (chromium screenshot)") {
  const auto& run = run_once();
  const auto root = parse_report(run.report);
  std::vector<const Element*> svgs;
  find_all(root, "svg", svgs);
  int height = 0;
  for (const auto* s : svgs) {
    const auto chart = chart_rect(*s);
    height = std::max(height, chart.top + chart.height);
  }
  const auto image = screenshot(run.report, run.dir, height + 40);
  REQUIRE(image.height >= height);
  for (const auto* s : svgs) check_drawn_where_the_data_puts_it(image, *s);
}

#endif  // TRAINKIT_TEST_REPORT_READERS

TEST_CASE("Profiler: a Chrome trace of the profiled steps only, and a top-ops table") {
  const auto& run = run_once();
  const auto trace = nlohmann::json::parse(io::read_file(run.profile / "trace.json"));
  std::set<std::string> step_names;
  std::vector<std::pair<double, double>> step_ranges;
  size_t ops = 0;
  for (const auto& e : trace["traceEvents"]) {
    CHECK(e["ph"] == "X");
    const std::string name = e["name"];
    if (name.starts_with("ProfilerStep#")) {
      step_names.insert(name);
      step_ranges.emplace_back(e["ts"].get<double>(),
                               e["ts"].get<double>() + e["dur"].get<double>());
    }
  }
  CHECK(step_names == std::set<std::string>{"ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"});
  for (const auto& e : trace["traceEvents"]) {
    if (e["cat"] != "cpu_op") continue;
    ++ops;
    const double begin = e["ts"], end = begin + e["dur"].get<double>();
    bool inside = false;
    for (const auto& [a, b] : step_ranges) inside |= begin >= a - 1 && end <= b + 1;
    CHECK_MESSAGE(inside, e["name"].get<std::string>() << " outside every profiled step");
  }
  CHECK(ops > 20);
  const auto table = io::read_file(run.profile / "top_ops.txt");
  CHECK(table.starts_with("operator"));
  CHECK(table.find("aten::") != std::string::npos);
}

TEST_CASE("observability callbacks name the option they reject") {
  CHECK_THROWS_WITH_AS(callbacks::TensorBoard({.dir = "x", .histogram_every = -1}),
                       doctest::Contains("tensorboard.histogram_every"), Error);
  CHECK_THROWS_WITH_AS(callbacks::Profiler({.first_step = 4, .last_step = 4}),
                       doctest::Contains("profiler.last_step` = 4"), Error);
  CHECK_THROWS_WITH_AS(callbacks::JsonLines({.path = ""}), doctest::Contains("json_lines.path"),
                       Error);
  CHECK_THROWS_WITH_AS(callbacks::RunReport({.path = "dir/"}), doctest::Contains("run_report.path"),
                       Error);
}
