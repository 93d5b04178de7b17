#pragma once
// callbacks::EarlyStopping: stop once a monitored epoch metric has gone
// `patience` epochs without improving by more than `min_delta` (Keras and
// Lightning semantics); optionally put the best weights back at the end.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "trainkit/callbacks/monitor.hpp"
#include "trainkit/error.hpp"
#include "trainkit/state.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::callbacks {

class EarlyStopping {
 public:
  using Mode = MonitorMode;
  struct Options {
    std::string monitor = "val_loss";
    Mode mode = Mode::Auto;  ///< Auto: Max for names containing "acc", else Min
    int64_t patience = 3;
    double min_delta = 0.0;
    bool restore_best_weights = true;
  };

  EarlyStopping() : EarlyStopping(Options{}) {}
  explicit EarlyStopping(Options o) : options_(std::move(o)) {
    detail::require_option(!options_.monitor.empty(), "early_stopping.monitor", options_.monitor,
                           "a metric name such as \"val_loss\"");
    detail::require_option(options_.patience >= 0, "early_stopping.patience", options_.patience,
                           "a number of epochs >= 0");
  }

  void on_fit_begin(TrainState& state) {
    if (options_.restore_best_weights)
      state.require_whole_parameters("callbacks::EarlyStopping (restore_best_weights)");
  }

  void on_epoch_end(TrainState& state) {
    if (monitor_.improve(monitor_.value(state))) {
      best_epoch_ = state.epoch;
      wait_ = 0;
      if (options_.restore_best_weights) snapshot(state.model());
    } else if (++wait_ >= options_.patience) {
      state.request_stop("early stopping: " + options_.monitor + " did not improve for " +
                         std::to_string(wait_) + " epochs");
    }
  }

  void on_fit_end(TrainState& state) {
    if (options_.restore_best_weights && !best_weights_.empty()) restore(state.model());
  }

  StateDict state_dict() const {
    StateDict d;
    d.values = {{"best", monitor_.best()}, {"best_epoch", best_epoch_}, {"wait", wait_}};
    for (size_t i = 0; i < best_weights_.size(); ++i) {
      d.tensors["best." + std::to_string(i)] = best_weights_[i];
    }
    return d;
  }
  void load_state_dict(const StateDict& d) {
    std::vector<at::Tensor> weights;
    for (size_t i = 0; d.tensors.count("best." + std::to_string(i)); ++i) {
      weights.push_back(d.tensors.at("best." + std::to_string(i)).clone());
    }
    const auto best = d.value<double>("best");
    const auto best_epoch = d.value<int64_t>("best_epoch");
    const auto wait = d.value<int64_t>("wait");
    monitor_.set_best(best);
    best_epoch_ = best_epoch;
    wait_ = wait;
    best_weights_ = std::move(weights);
  }

  double best() const { return monitor_.best(); }
  int64_t best_epoch() const { return best_epoch_; }
  int64_t wait() const { return wait_; }

 private:
  static std::vector<at::Tensor> tensors(torch::nn::Module& model) {
    auto all = model.parameters();
    for (auto& b : model.buffers()) all.push_back(b);
    return all;
  }
  void snapshot(torch::nn::Module& model) {
    torch::NoGradGuard no_grad;
    const auto current = tensors(model);
    if (best_weights_.empty()) {
      for (const auto& t : current) best_weights_.push_back(t.detach().clone());
    } else {
      for (size_t i = 0; i < current.size(); ++i) best_weights_[i].copy_(current[i]);
    }
  }
  // copy_ into the live tensors keeps them views of the trainer's flat buffer.
  void restore(torch::nn::Module& model) {
    torch::NoGradGuard no_grad;
    const auto current = tensors(model);
    for (size_t i = 0; i < current.size(); ++i) current[i].copy_(best_weights_[i]);
  }

  Options options_;
  Monitor monitor_{"early_stopping", options_.monitor, options_.mode, options_.min_delta};
  int64_t best_epoch_ = -1;
  int64_t wait_ = 0;
  std::vector<at::Tensor> best_weights_;
};

}  // namespace trainkit::callbacks
