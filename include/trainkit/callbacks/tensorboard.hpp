#pragma once
// callbacks::TensorBoard: TensorBoard event files. Scalars on logging steps
// (train/loss, train/grad_norm, train/loss_scale and the scalars callbacks
// before it published), epoch metrics as epoch/<name>, histograms of weights
// and gradients every `histogram_every` steps, the run's configuration as
// text and the HParams plugin's session records. Main process only.
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "trainkit/error.hpp"
#include "trainkit/io/tfevents.hpp"
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

class TensorBoard {
 public:
  struct Options {
    std::filesystem::path dir = "runs/tensorboard";
    int64_t histogram_every = 0;  ///< weights and gradients every N steps; 0: never
    int64_t histogram_bins = 30;
    /// Hyperparameters for the HParams tab, besides the run's configuration.
    std::map<std::string, io::HParam> hparams{};
  };
  TensorBoard() : TensorBoard(Options{}) {}
  explicit TensorBoard(Options o) : options_(std::move(o)) {
    detail::require_option(!options_.dir.empty(), "tensorboard.dir", options_.dir.string(),
                           "a folder such as \"runs/a\"");
    detail::require_option(options_.histogram_every >= 0, "tensorboard.histogram_every",
                           options_.histogram_every, "a number of steps >= 0 (0: no histograms)");
    detail::require_option(options_.histogram_bins >= 1, "tensorboard.histogram_bins",
                           options_.histogram_bins, "a number >= 1");
  }

  void on_fit_begin(TrainState& state) {
    if (options_.histogram_every > 0)
      state.require_whole_parameters("callbacks::TensorBoard (histogram_every)");
    if (!state.is_main_process()) return;
    writer_ = std::make_unique<io::EventWriter>(options_.dir);
    file_ = writer_->path();
    std::string table = "| option | value |\n|---|---|\n";
    for (const auto& [name, value] : state.config) table += "| " + name + " | " + value + " |\n";
    writer_->text("config", state.step, table);
    writer_->hparams_session_start(hparams(state));
  }

  void on_before_step(TrainState& state) {
    if (!writer_ || !histogram_step(state.step + 1)) return;
    for (const auto& p : state.model().named_parameters()) {
      if (p.value().grad().defined()) {
        writer_->histogram("grads/" + p.key(), state.step + 1, histogram_of(p.value().grad()));
      }
    }
  }

  void on_step_end(TrainState& state) {
    if (!writer_) return;
    if (state.should_log()) {
      for (const auto& [name, value] : state.logged_values()) {
        writer_->scalar("train/" + name, state.step, value);
      }
    }
    if (histogram_step(state.step)) {
      for (const auto& p : state.model().named_parameters()) {
        writer_->histogram("weights/" + p.key(), state.step, histogram_of(p.value()));
      }
    }
  }

  void on_epoch_end(TrainState& state) {
    if (!writer_) return;
    for (const auto& [name, value] : state.metrics) {
      writer_->scalar("epoch/" + name, state.step, value);
    }
  }

  void on_fit_end(TrainState&) { close(io::EventWriter::Status::success); }
  void on_exception(TrainState&) { close(io::EventWriter::Status::failure); }

  /// The event file of the current (or last) fit; empty before the first.
  std::filesystem::path file() const { return file_; }

 private:
  bool histogram_step(int64_t step) const {
    return options_.histogram_every > 0 && step % options_.histogram_every == 0;
  }

  /// User hyperparameters, then the configuration: numbers as numbers.
  std::map<std::string, io::HParam> hparams(const TrainState& state) const {
    auto out = options_.hparams;
    for (const auto& [name, text] : state.config) {
      if (out.count(name) || name == "trainer") continue;
      char* end = nullptr;
      const double number = std::strtod(text.c_str(), &end);
      if (!text.empty() && end == text.c_str() + text.size()) {
        out.emplace(name, number);
      } else {
        out.emplace(name, text);
      }
    }
    return out;
  }

  /// Equal-width buckets between the finite minimum and maximum.
  io::Histogram histogram_of(const at::Tensor& tensor) const {
    torch::NoGradGuard no_grad;
    auto t = tensor.detach().flatten().to(at::kCPU, at::kDouble);
    t = t.masked_select(t.isfinite());
    io::Histogram h;
    if (t.numel() == 0) return h;
    h.min = t.min().item<double>();
    h.max = t.max().item<double>();
    h.num = double(t.numel());
    h.sum = t.sum().item<double>();
    h.sum_squares = t.square().sum().item<double>();
    const int64_t bins = h.max > h.min ? options_.histogram_bins : 1;
    const auto counts = t.histc(bins, h.min, h.max).contiguous();
    const double width = (h.max - h.min) / double(bins);
    for (int64_t i = 0; i < bins; ++i) {
      h.bucket_limit.push_back(i + 1 == bins ? h.max : h.min + width * double(i + 1));
      h.bucket.push_back(counts.data_ptr<double>()[i]);
    }
    return h;
  }

  void close(io::EventWriter::Status status) {
    if (!writer_) return;
    writer_->hparams_session_end(status);
    writer_.reset();
  }

  Options options_;
  std::unique_ptr<io::EventWriter> writer_;
  std::filesystem::path file_;
};

}  // namespace trainkit::callbacks
