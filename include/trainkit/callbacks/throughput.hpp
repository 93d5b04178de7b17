#pragma once
// callbacks::Throughput: training speed for the loggers after it in the
// callback list, as step scalars on logging steps, measured over the steps
// since the last logging step (validation excluded):
//   samples_per_s, steps_per_s       all processes together
//   flops_per_s                      given the model's training FLOPs per sample
//   mfu                              model FLOPs utilisation, given each device's peak
// The window ends when the host reaches the logging step; on a GPU the
// loggers' device reads keep the host within a few steps of the device.
#include <torch/types.h>
#include <torch/utils.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "trainkit/detail/legacy_profiler.hpp"
#include "trainkit/error.hpp"
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

/// Training FLOPs per sample of `model` (forward + backward, counted as three
/// forwards), from LibTorch's FLOP counts of the matrix products and
/// convolutions that one forward on `example` (a batch) runs.
template <class Model>
double training_flops_per_sample(Model& model, const at::Tensor& example) {
  namespace prof = torch::autograd::profiler;
  detail::require_option(example.dim() >= 1 && example.size(0) >= 1, "example", example.dim(),
                         "a batch with at least one sample");
  torch::NoGradGuard no_grad;
  detail::LegacyProfilerSession session(/*record_shapes=*/true, /*with_flops=*/true);
  model->forward(example);
  auto events = session.stop();  // non-const: LegacyEvent::flops() is not a const member
  double flops = 0;
  for (auto& thread : events) {
    uint64_t open = 0;  // handle of the counted op we are inside: nested ops are its parts
    for (auto& e : thread) {
      if (e.kind() == prof::EventKind::PushRange && open == 0 && e.flops() > 0) {
        const std::string name = e.name();
        if (name == "aten::mul" || name == "aten::add") continue;  // elementwise, not model FLOPs
        flops += double(e.flops());
        open = e.handle();
      } else if (e.kind() == prof::EventKind::PopRange && e.handle() == open) {
        open = 0;
      }
    }
  }
  return 3.0 * flops / double(example.size(0));
}

class Throughput {
 public:
  struct Options {
    double flops_per_sample = 0;  ///< training FLOPs per sample; 0: no FLOP/s
    double peak_flops = 0;        ///< each device's peak FLOP/s; 0: no MFU
  };
  Throughput() : Throughput(Options{}) {}
  explicit Throughput(const Options& o) : options_(o) {
    detail::require_option(o.flops_per_sample >= 0, "throughput.flops_per_sample",
                           o.flops_per_sample, "FLOPs per sample >= 0 (0: unknown)");
    detail::require_option(o.peak_flops >= 0, "throughput.peak_flops", o.peak_flops,
                           "FLOP/s >= 0 (0: no MFU)");
    detail::require_option(o.peak_flops == 0 || o.flops_per_sample > 0, "throughput.peak_flops",
                           o.peak_flops, "0 unless flops_per_sample is given");
  }

  void on_fit_begin(TrainState& state) {
    const auto it = state.config.find("world_size");
    world_size_ = it == state.config.end() ? 1 : std::stoll(it->second);
  }
  void on_epoch_begin(TrainState& state) { open_window(state); }

  void on_step_end(TrainState& state) {
    if (!state.should_log()) return;
    const double seconds = std::chrono::duration<double>(clock::now() - window_start_).count();
    const double samples = double((state.samples_seen - window_samples_) * world_size_);
    const double steps = double(state.step - window_step_);
    open_window(state);
    if (seconds <= 0 || steps <= 0) return;
    const double samples_per_s = samples / seconds;
    state.scalars["samples_per_s"] = samples_per_s;
    state.scalars["steps_per_s"] = steps / seconds;
    if (options_.flops_per_sample > 0) {
      const double flops_per_s = samples_per_s * options_.flops_per_sample;
      state.scalars["flops_per_s"] = flops_per_s;
      if (options_.peak_flops > 0)
        state.scalars["mfu"] = flops_per_s / (options_.peak_flops * double(world_size_));
    }
  }

 private:
  using clock = std::chrono::steady_clock;
  void open_window(const TrainState& state) {
    window_start_ = clock::now();
    window_samples_ = state.samples_seen;
    window_step_ = state.step;
  }

  Options options_;
  int64_t world_size_ = 1;
  clock::time_point window_start_{};
  int64_t window_samples_ = 0, window_step_ = 0;
};

}  // namespace trainkit::callbacks
