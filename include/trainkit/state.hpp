#pragma once
// TrainState: what callbacks see and may change. Device values (the loss,
// the gradient norm, the loss scale) stay tensors until someone asks, so the
// hot path never waits on the device.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"

namespace trainkit {

template <class, class, class, class, class, class, class>
class Trainer;

class TrainState {
 public:
  int64_t epoch = 0;               ///< current epoch, from 0
  int64_t epochs = 0;              ///< epochs in this fit
  int64_t step = 0;                ///< optimizer steps taken so far
  int64_t batch = 0;               ///< micro-batches seen in this epoch
  int64_t batches_per_epoch = -1;  ///< -1 when the data has no size()
  int64_t steps_per_epoch = -1;
  int64_t total_steps = -1;
  int64_t log_every = 10;
  int64_t samples_seen = 0;  ///< training samples since fit began
  double lr = 0.0;           ///< learning rate of the next step
  /// Epoch-level metrics: train_loss, val_loss, val_<metric>, ...
  std::map<std::string, double> metrics;
  /// Step-level scalars that callbacks publish on logging steps (Throughput,
  /// LrMonitor) for the loggers after them in the callback list; cleared
  /// after every step.
  std::map<std::string, double> scalars;
  /// The run's configuration (policies, options, world size), set before
  /// on_fit_begin, for reports and hyperparameter records.
  std::map<std::string, std::string> config;
  std::exception_ptr exception;  ///< set before on_exception
  bool resumed = false;          ///< this fit continued from a checkpoint

  explicit TrainState(torch::nn::Module& model) : model_(&model) {}

  torch::nn::Module& model() { return *model_; }

  /// The mean loss of the last optimizer step's micro-batches (its
  /// accumulation window; inside a window, of those so far): the loss users
  /// compare with a loop that logs `loss * n` summed over the window. Reads
  /// the device.
  double loss() const {
    const auto t = loss_tensor();
    return t.defined() ? t.item<double>() : 0.0;
  }
  /// Total gradient norm before clipping, when the clip policy reports it.
  std::optional<double> grad_norm() const {
    if (!grad_norm_tensor_.defined()) return std::nullopt;
    return grad_norm_tensor_.item<double>();
  }
  /// Whether the precision policy scales the loss (fp16), known without a device read.
  bool has_loss_scale() const { return loss_scale_tensor_.defined(); }
  /// The fp16 loss scale, when there is one.
  std::optional<double> loss_scale() const {
    if (!loss_scale_tensor_.defined()) return std::nullopt;
    return loss_scale_tensor_.item<double>();
  }
  /// True on steps where reading device values is allowed (every log_every).
  bool should_log() const { return log_every > 0 && step % log_every == 0; }

  using NamedValues = std::vector<std::pair<std::string, double>>;
  /// What loggers write from on_step_end: the loss, the gradient norm and the
  /// loss scale when there are such (read from the device in one transfer,
  /// once per step however many loggers ask), then the published scalars.
  NamedValues logged_values() const {
    if (logged_step_ != step) {
      std::vector<const char*> names;
      std::vector<at::Tensor> values;
      const auto loss = loss_tensor();
      for (const auto& [name, t] : {std::pair<const char*, const at::Tensor&>{"loss", loss},
                                    {"grad_norm", grad_norm_tensor_},
                                    {"loss_scale", loss_scale_tensor_}}) {
        if (!t.defined()) continue;
        names.push_back(name);
        values.push_back(t.detach().reshape({}).to(at::kDouble));
      }
      device_values_.clear();
      if (!values.empty()) {
        const auto host = at::stack(values).cpu();
        for (size_t i = 0; i < names.size(); ++i)
          device_values_.emplace_back(names[i], host.data_ptr<double>()[i]);
      }
      logged_step_ = step;  // step differs between on_before_step and on_step_end
    }
    auto out = device_values_;
    for (const auto& [name, value] : scalars) out.emplace_back(name, value);
    return out;
  }
  /// The trainer's, after on_step_end: the step's published values expire.
  void end_step() {
    if (!scalars.empty()) scalars.clear();
    logged_step_ = -1;
  }

  void request_stop(std::string reason = "stop requested") {
    stop_ = true;
    stop_reason_ = std::move(reason);
  }
  bool stop_requested() const { return stop_; }

  /// From on_before_step: do not apply this optimizer step (the gradients
  /// are dropped, the schedule still advances, as for an fp16 overflow).
  void skip_step(std::string reason = "step skipped") {
    skip_ = true;
    skip_reason_ = std::move(reason);
  }
  bool step_skipped() const { return skip_; }
  const std::string& skip_reason() const { return skip_reason_; }
  void clear_skip() { skip_ = false; }
  const std::string& stop_reason() const { return stop_reason_; }
  bool is_main_process() const { return main_process_; }
  /// Under full sharding (parallel::FullShard, HybridShard): the
  /// parameters as this rank holds them between steps, for callbacks that
  /// keep something per weight (callbacks::Ema).
  struct ParameterShards {
    /// This rank's slice of each flat parameter buffer: what its optimizer
    /// updates and the next forward gathers. A callback may change them
    /// between steps, as the optimizer does.
    std::vector<at::Tensor> live;
    /// The parameters they hold, by name; the model's other tensors (frozen
    /// parameters, buffers) are whole on every rank.
    std::vector<std::string> names;
    /// Whole parameters by name from tensors shaped as `live`: a collective,
    /// every rank calls it with its own.
    std::function<std::map<std::string, at::Tensor>(const std::vector<at::Tensor>&)> gather;
    /// The reverse, on this rank alone: its slices of whole parameters
    /// given by name (each of `names`, shaped as its parameter).
    std::function<std::vector<at::Tensor>(const std::map<std::string, at::Tensor>&)> slice;
  };
  /// The model's parameters are empty between steps, each rank holding a
  /// shard of them (parallel::FullShard): callbacks that read whole weights
  /// refuse, or work on parameter_shards().
  bool parameters_sharded() const { return parameter_shards_ != nullptr; }
  const ParameterShards& parameter_shards() const {
    if (!parameter_shards_) {
      throw Error(
          "trainkit: TrainState::parameter_shards(): this run's parameters are whole on every "
          "rank between steps (parameters_sharded() is false); read state.model()");
    }
    return *parameter_shards_;
  }
  /// The error such a callback throws: `what` it cannot do with shards.
  void require_whole_parameters(const std::string& what) const {
    if (parameters_sharded()) {
      throw Error("trainkit: " + what +
                  " reads the model's whole weights, which under parallel::FullShard are shards "
                  "between steps; use parallel::ShardGradOp, or read them inside "
                  "trainer.parallel().gather_parameters() after fit");
    }
  }

  /// Writes the whole training state to `path` (atomically), from a hook.
  /// Resuming from it continues exactly where this point of the run is.
  /// `then` runs on the main process once the checkpoint is in place: on
  /// the writing thread when checkpoint.asynchronous is set.
  void save_checkpoint(const std::filesystem::path& path, std::function<void()> then = {}) const {
    if (!checkpoint_writer_) {
      throw Error("trainkit: TrainState::save_checkpoint(\"" + path.string() +
                  "\") needs a state that Trainer::fit made; this one has no trainer");
    }
    checkpoint_writer_(path, std::move(then));
  }

 private:
  template <class, class, class, class, class, class, class>
  friend class Trainer;

  // Set by the trainer: the device values behind loss(), grad_norm() and
  // loss_scale(), whether this is the main process, the checkpoint writer.
  // The losses are the open (or last closed) window's micro-batches'.
  std::vector<at::Tensor> window_losses_;
  bool window_closed_ = false;
  at::Tensor grad_norm_tensor_, loss_scale_tensor_;
  void add_window_loss(const at::Tensor& loss) {
    if (std::exchange(window_closed_, false)) window_losses_.clear();
    window_losses_.push_back(loss);
  }
  void close_window() { window_closed_ = true; }
  at::Tensor loss_tensor() const {
    if (window_losses_.size() <= 1)
      return window_losses_.empty() ? at::Tensor() : window_losses_[0];
    torch::NoGradGuard no_grad;  // a CPU loss may hold its graph (decision 88)
    return at::stack(window_losses_).to(at::kDouble).mean();
  }
  bool main_process_ = true;
  std::shared_ptr<const ParameterShards> parameter_shards_;
  std::function<void(const std::filesystem::path&, std::function<void()>)> checkpoint_writer_;

  torch::nn::Module* model_;
  bool stop_ = false;
  std::string stop_reason_;
  bool skip_ = false;
  std::string skip_reason_;
  // logged_values()' device reads, for the step they were read at
  mutable NamedValues device_values_;
  mutable int64_t logged_step_ = -1;
};

}  // namespace trainkit
