#pragma once
// callbacks::EarlyStopping: stop once a monitored epoch metric has gone
// `patience` epochs without improving by more than `min_delta` (Keras and
// Lightning semantics); optionally put the best weights back at the end.
// Under full sharding each rank keeps the best of its own slices
// (TrainState::parameter_shards) and puts them back; state_dict gathers
// them whole, so a checkpoint is the same under every strategy.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
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
    shards_.reset();
    if (options_.restore_best_weights && state.parameters_sharded()) {
      shards_ = state.parameter_shards();
      if (!best_weights_.empty()) shard_loaded(state.model());
    }
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

  /// Under full sharding a collective (the best slices gathered whole):
  /// every rank calls it.
  StateDict state_dict() const {
    StateDict d;
    d.values = {{"best", monitor_.best()}, {"best_epoch", best_epoch_}, {"wait", wait_}};
    std::map<std::string, at::Tensor> whole;
    if (!best_shards_.empty()) whole = shards_->gather(best_shards_);
    for (size_t i = 0; i < best_weights_.size(); ++i) {
      d.tensors["best." + std::to_string(i)] =
          best_weights_[i].defined() ? best_weights_[i] : whole.at(names_[i]);
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
  // The sharded parameters' names, by position in tensors(model); "" for
  // the tensors that are whole on every rank.
  std::vector<std::string> sharded_names(torch::nn::Module& model) const {
    std::vector<std::string> out(tensors(model).size());
    if (!shards_) return out;
    const std::set<std::string> sharded(shards_->names.begin(), shards_->names.end());
    size_t i = 0;
    for (const auto& p : model.named_parameters()) {
      if (sharded.count(p.key())) out[i] = p.key();
      ++i;
    }
    return out;
  }
  void snapshot(torch::nn::Module& model) {
    torch::NoGradGuard no_grad;
    const auto current = tensors(model);
    if (best_weights_.empty()) {
      names_ = sharded_names(model);
      for (size_t i = 0; i < current.size(); ++i)
        best_weights_.push_back(names_[i].empty() ? current[i].detach().clone() : at::Tensor());
      if (shards_)
        for (const auto& t : shards_->live) best_shards_.push_back(t.detach().clone());
      return;
    }
    for (size_t i = 0; i < current.size(); ++i)
      if (best_weights_[i].defined()) best_weights_[i].copy_(current[i]);
    for (size_t g = 0; g < best_shards_.size(); ++g) best_shards_[g].copy_(shards_->live[g]);
  }
  // copy_ into the live tensors keeps them views of the trainer's flat
  // buffer (or of the shard the next forward gathers).
  void restore(torch::nn::Module& model) {
    torch::NoGradGuard no_grad;
    const auto current = tensors(model);
    for (size_t i = 0; i < current.size(); ++i)
      if (best_weights_[i].defined()) current[i].copy_(best_weights_[i]);
    for (size_t g = 0; g < best_shards_.size(); ++g) shards_->live[g].copy_(best_shards_[g]);
  }
  // Whole best weights from a checkpoint: the sharded ones become this rank's slices.
  void shard_loaded(torch::nn::Module& model) {
    names_ = sharded_names(model);
    detail::require_option(
        names_.size() == best_weights_.size(), "EarlyStopping's best weights",
        std::to_string(best_weights_.size()) + " tensors",
        "one per parameter and buffer of the model: " + std::to_string(names_.size()));
    std::map<std::string, at::Tensor> whole;
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i].empty()) continue;
      whole[names_[i]] = best_weights_[i];
      best_weights_[i] = at::Tensor();
    }
    best_shards_ = shards_->slice(whole);
  }

  Options options_;
  Monitor monitor_{"early_stopping", options_.monitor, options_.mode, options_.min_delta};
  int64_t best_epoch_ = -1;
  int64_t wait_ = 0;
  std::vector<at::Tensor> best_weights_;  ///< per tensor of the model; none where sharded
  std::vector<at::Tensor> best_shards_;   ///< under full sharding: this rank's slices
  std::vector<std::string> names_;        ///< sharded_names() when the snapshot began
  std::optional<TrainState::ParameterShards> shards_;  ///< under full sharding
};

}  // namespace trainkit::callbacks
