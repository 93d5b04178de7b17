#pragma once
// callbacks::ProgressBar: on a terminal, a live bar redrawn every log_every
// steps (steps/s, loss, lr, gradient norm and loss scale when present, ETA); elsewhere (CI, files)
// plain lines a few times per epoch. Reads the loss only on logging steps.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "trainkit/error.hpp"
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

class ProgressBar {
 public:
  struct Options {
    std::optional<bool> tty{};    ///< default: whether stderr is a terminal
    int64_t lines_per_epoch = 4;  ///< plain mode: progress lines per epoch
    int width = 30;
  };
  ProgressBar() : ProgressBar(Options{}) {}
  explicit ProgressBar(const Options& o)
      : options_(o), tty_(o.tty.value_or(::isatty(STDERR_FILENO) != 0)) {
    detail::require_option(o.lines_per_epoch >= 1, "progress_bar.lines_per_epoch",
                           o.lines_per_epoch, "a number >= 1");
    detail::require_option(o.width >= 1, "progress_bar.width", o.width, "a number of columns >= 1");
  }

  void on_fit_begin(TrainState&) { fit_start_ = clock::now(); }

  void on_epoch_begin(TrainState& state) {
    epoch_start_ = clock::now();
    epoch_first_step_ = state.step;
    next_line_ = 1;
  }

  void on_step_end(TrainState& state) {
    if (!state.is_main_process()) return;
    const int64_t done = state.step - epoch_first_step_, total = state.steps_per_epoch;
    if (tty_) {
      if (state.should_log() || done == total) draw(state, done, total);
    } else if (total > 0 && done * options_.lines_per_epoch >= next_line_ * total && done < total) {
      ++next_line_;
      const auto [loss, extras] = figures(state);
      std::fprintf(stderr, "epoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.3g  %.1f steps/s%s\n",
                   (long long)state.epoch + 1, (long long)state.epochs, (long long)done,
                   (long long)total, loss, state.lr, rate(done), extras.c_str());
    }
  }

  void on_epoch_end(TrainState& state) {
    if (!state.is_main_process()) return;
    if (tty_) std::fputs("\n", stderr);
    std::string metrics;
    char buf[64];
    for (const auto& [name, value] : state.metrics) {
      std::snprintf(buf, sizeof buf, "  %s %.4f", name.c_str(), value);
      metrics += buf;
    }
    std::fprintf(stderr, "epoch %lld/%lld done in %.1fs%s\n", (long long)state.epoch + 1,
                 (long long)state.epochs, seconds_since(epoch_start_), metrics.c_str());
  }

  void on_fit_end(TrainState& state) {
    if (!state.is_main_process()) return;
    std::fprintf(stderr, "fit: %lld steps in %.1fs%s%s\n", (long long)state.step,
                 seconds_since(fit_start_), state.stop_requested() ? " — " : "",
                 state.stop_requested() ? state.stop_reason().c_str() : "");
  }

 private:
  using clock = std::chrono::steady_clock;
  static double seconds_since(clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  }
  double rate(int64_t done) const {
    const double s = seconds_since(epoch_start_);
    return s > 0 ? double(done) / s : 0.0;
  }

  /// The loss, and the gradient norm and loss scale when the policies report
  /// them, from the step's one device read (TrainState::logged_values).
  static std::pair<double, std::string> figures(const TrainState& state) {
    double loss = 0.0;
    std::string extras;
    char buf[64];
    for (const auto& [name, value] : state.logged_values()) {
      if (name == "loss") {
        loss = value;
      } else if (name == "grad_norm") {
        std::snprintf(buf, sizeof buf, "  |g| %.3g", value);
        extras += buf;
      } else if (name == "loss_scale") {
        std::snprintf(buf, sizeof buf, "  scale %.0f", value);
        extras += buf;
      }
    }
    return {loss, extras};
  }

  void draw(TrainState& state, int64_t done, int64_t total) {
    const double r = rate(done);
    std::string bar;
    if (total > 0) {
      const auto width = static_cast<size_t>(std::max(options_.width, 1));
      const auto filled =
          std::min(width, static_cast<size_t>(double(width) * double(done) / double(total)));
      bar.reserve(width + 3);
      bar.push_back('[');
      bar.append(filled, '#').append(width - filled, '.').append("] ");
    }
    const double eta = (total > 0 && r > 0) ? double(total - done) / r : 0.0;
    const auto [loss, extras] = figures(state);
    std::fprintf(stderr, "\r\033[Kepoch %lld/%lld %s%lld/%lld  %.1f steps/s  loss %.4f  lr %.3g",
                 (long long)state.epoch + 1, (long long)state.epochs, bar.c_str(), (long long)done,
                 (long long)total, r, loss, state.lr);
    std::fprintf(stderr, "%s  ETA %d:%02d", extras.c_str(), int(eta) / 60, int(eta) % 60);
    std::fflush(stderr);
  }

  Options options_;
  bool tty_;
  clock::time_point fit_start_, epoch_start_;
  int64_t epoch_first_step_ = 0;
  int64_t next_line_ = 1;
};

}  // namespace trainkit::callbacks
