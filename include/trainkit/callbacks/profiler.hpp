#pragma once
// callbacks::Profiler: profiles optimizer steps [first_step, last_step) with
// LibTorch's profiler (the legacy one: Debian's LibTorch has no Kineto) and
// writes <dir>/trace.json (Chrome trace format: chrome://tracing, Perfetto)
// and <dir>/top_ops.txt, the operators with the most self time. Each step is
// a "ProfilerStep#N" range in the trace. Main process only.
//
// The range of step N opens in on_step_end of step N-1, so callbacks listed
// after the Profiler are profiled with the step that follows.
#include <ATen/record_function.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainkit/detail/legacy_profiler.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

class Profiler {
 public:
  struct Options {
    int64_t first_step = 5;  ///< profile optimizer steps [first_step, last_step)
    int64_t last_step = 10;
    std::filesystem::path dir = "runs/profile";
    int64_t top = 25;  ///< rows of top_ops.txt
    bool record_shapes = false;
  };
  /// One operator's totals over the profiled steps.
  struct OpStats {
    std::string name;
    int64_t calls = 0;
    double self_us = 0, total_us = 0;
  };

  Profiler() : Profiler(Options{}) {}
  explicit Profiler(Options o) : options_(std::move(o)) {
    detail::require_option(options_.first_step >= 0, "profiler.first_step", options_.first_step,
                           "a step number >= 0");
    detail::require_option(options_.last_step > options_.first_step, "profiler.last_step",
                           options_.last_step, "a step number > first_step");
    detail::require_option(options_.top >= 1, "profiler.top", options_.top, "a number >= 1");
  }

  void on_fit_begin(TrainState& state) {
    main_ = state.is_main_process();
    if (state.step == options_.first_step) start(state.step);
  }

  void on_step_end(TrainState& state) {
    if (session_) {
      step_range_.reset();
      if (state.step >= options_.last_step) {
        stop();
      } else {
        open_step(state.step);
      }
    } else if (state.step == options_.first_step) {
      start(state.step);
    }
  }

  void on_fit_end(TrainState&) {
    if (session_) stop();  // fewer steps than asked: write what there is
  }
  void on_exception(TrainState&) {
    if (session_) stop();
  }

  std::filesystem::path trace_path() const { return options_.dir / "trace.json"; }
  std::filesystem::path table_path() const { return options_.dir / "top_ops.txt"; }
  /// Operators by self time, most first (after the profile is written).
  const std::vector<OpStats>& top_ops() const { return ops_; }

 private:
  using Event = torch::autograd::profiler::LegacyEvent;
  using EventKind = torch::autograd::profiler::EventKind;

  /// A closed range: a push and its pop.
  struct Span {
    const Event* push;
    double start_us, end_us;
    uint64_t thread;
  };

  void start(int64_t step) {
    if (!main_) return;
    session_ = std::make_unique<detail::LegacyProfilerSession>(options_.record_shapes,
                                                               /*with_flops=*/false);
    open_step(step);
  }

  void open_step(int64_t step) {
    step_range_ = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
    if (step_range_->isActive()) step_range_->before("ProfilerStep#" + std::to_string(step));
  }

  void stop() {
    step_range_.reset();
    const auto events = session_->stop();
    session_.reset();
    const auto spans = pair_ranges(events);
    ops_ = self_times(spans);
    io::write_file_atomically(trace_path(), chrome_trace(spans).dump());
    io::write_file_atomically(table_path(), table());
  }

  /// Pushes and pops paired by handle (a pop may be on another thread).
  static std::vector<Span> pair_ranges(const detail::LegacyProfilerSession::Events& lists) {
    std::unordered_map<uint64_t, const Event*> open;
    std::vector<Span> spans;
    for (const auto& list : lists) {
      for (const auto& e : list) {
        if (e.kind() == EventKind::PushRange) open[e.handle()] = &e;
      }
    }
    for (const auto& list : lists) {
      for (const auto& e : list) {
        if (e.kind() != EventKind::PopRange) continue;
        const auto it = open.find(e.handle());
        if (it == open.end()) continue;
        spans.push_back({it->second, it->second->cpuUs(), e.cpuUs(), it->second->threadId()});
        open.erase(it);
      }
    }
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      if (a.thread != b.thread) return a.thread < b.thread;
      if (a.start_us != b.start_us) return a.start_us < b.start_us;
      return a.end_us > b.end_us;  // parents before children that start with them
    });
    return spans;
  }

  static bool is_step_range(const Span& s) {
    return std::string_view(s.push->name()).starts_with("ProfilerStep#");
  }

  /// Self time = duration minus the children's, per thread's nesting.
  std::vector<OpStats> self_times(const std::vector<Span>& spans) const {
    std::vector<double> child_us(spans.size(), 0.0);
    std::vector<size_t> stack;
    for (size_t i = 0; i < spans.size(); ++i) {
      while (!stack.empty() && (spans[stack.back()].thread != spans[i].thread ||
                                spans[stack.back()].end_us <= spans[i].start_us)) {
        stack.pop_back();
      }
      if (!stack.empty()) child_us[stack.back()] += spans[i].end_us - spans[i].start_us;
      stack.push_back(i);
    }
    std::map<std::string, OpStats> by_name;
    for (size_t i = 0; i < spans.size(); ++i) {
      if (is_step_range(spans[i])) continue;
      auto& op = by_name[spans[i].push->name()];
      op.name = spans[i].push->name();
      const double total = spans[i].end_us - spans[i].start_us;
      op.calls += 1;
      op.total_us += total;
      op.self_us += std::max(0.0, total - child_us[i]);
    }
    std::vector<OpStats> ops;
    for (auto& [name, op] : by_name) ops.push_back(std::move(op));
    std::sort(ops.begin(), ops.end(),
              [](const OpStats& a, const OpStats& b) { return a.self_us > b.self_us; });
    return ops;
  }

  nlohmann::json chrome_trace(const std::vector<Span>& spans) const {
    double origin = spans.empty() ? 0.0 : spans.front().start_us;
    for (const auto& s : spans) origin = std::min(origin, s.start_us);
    auto events = nlohmann::json::array();
    for (const auto& s : spans) {
      nlohmann::json e{{"name", s.push->name()},
                       {"ph", "X"},
                       {"cat", is_step_range(s) ? "user_annotation" : "cpu_op"},
                       {"ts", s.start_us - origin},
                       {"dur", s.end_us - s.start_us},
                       {"pid", 0},
                       {"tid", s.thread}};
      if (options_.record_shapes) e["args"]["Input Dims"] = s.push->shapes();
      events.push_back(std::move(e));
    }
    return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  }

  std::string table() const {
    double all_self = 0;
    for (const auto& op : ops_) all_self += op.self_us;
    std::string out;
    char line[256];
    std::snprintf(line, sizeof line, "%-40s %8s %12s %7s %12s\n", "operator", "calls", "self ms",
                  "self %", "total ms");
    out += line;
    for (size_t i = 0; i < ops_.size() && int64_t(i) < options_.top; ++i) {
      const auto& op = ops_[i];
      std::snprintf(line, sizeof line, "%-40.40s %8lld %12.3f %6.1f%% %12.3f\n", op.name.c_str(),
                    (long long)op.calls, op.self_us / 1e3,
                    all_self > 0 ? 100.0 * op.self_us / all_self : 0.0, op.total_us / 1e3);
      out += line;
    }
    return out;
  }

  Options options_;
  bool main_ = true;
  std::unique_ptr<detail::LegacyProfilerSession> session_;  ///< while profiling
  std::unique_ptr<at::RecordFunction> step_range_;          ///< the open ProfilerStep#N
  std::vector<OpStats> ops_;
};

}  // namespace trainkit::callbacks
