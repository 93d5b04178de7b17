#pragma once
// The options of a Trainer (every policy's, as one aggregate) and of a fit,
// and what a fit returns.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "trainkit/data/batch_view.hpp"
#include "trainkit/device_options.hpp"
#include "trainkit/error.hpp"
#include "trainkit/param_groups.hpp"
#include "trainkit/trainer/detail/policy_checks.hpp"

namespace trainkit {

/// How the Trainer writes checkpoints (docs/checkpoints.md).
struct CheckpointOptions {
  enum class Form {
    Auto,     ///< sharded under the policies no rank holds whole in (ZeRO-2, full sharding)
    File,     ///< one file, written by the main process from every rank's state
    Sharded,  ///< a folder: each rank writes what it holds, none gathers
  };
  Form form = Form::Auto;
  /// Write one-file checkpoints on a background thread: a save stalls the
  /// step only while the state is copied to host memory (pinned from CUDA);
  /// a second save waits for the first, and a failed write is an Error at
  /// the next save or at fit's end. Not yet for the sharded form.
  bool asynchronous = false;
};

/// Options of every policy, as one aggregate for designated initialisers:
/// `{.optim = {.lr = 1e-3}, .sched = {.max_lr = 1e-2}, .clip = {.max_norm = 1}}`.
template <class Optimizer, class Scheduler, class Precision, class Accumulate, class Clip,
          class Parallel, class Capture>
struct TrainerOptions {
  detail::options_t<Optimizer> optim{};
  detail::options_t<Scheduler> sched{};
  detail::options_t<Precision> precision{};
  detail::options_t<Accumulate> accumulate{};
  detail::options_t<Clip> clip{};
  detail::options_t<Parallel> parallel{};
  detail::options_t<Capture> capture{};
  /// Parts of the model trained with their own hyperparameters
  /// (param_groups.hpp: params::no_weight_decay(), params::layer_decay(...));
  /// the parameters none selects train with `optim`.
  std::vector<ParamGroup> param_groups{};
  /// TF32, cuDNN autotuning, channels-last (process-wide, as torch.backends).
  DeviceOptions device{};
  /// Keep freed CPU memory for reuse (trainer/detail/allocator.hpp); process-wide.
  bool keep_freed_cpu_memory = true;
  /// Checkpoints as one file or sharded (resume reads either).
  CheckpointOptions checkpoint{};
};

struct FitOptions {
  int64_t epochs = 1;
  data::BatchView val_data{};  ///< validated after every epoch when set (not owned)
  int64_t log_every = 10;      ///< callbacks may read device values every N steps
  int64_t max_steps = -1;      ///< stop after this many optimizer steps (-1: no limit)
  /// Continue from this checkpoint file, or from the newest one in this
  /// folder by step (last.ckpt, step-*.ckpt, or checkpoint_on_signal's file).
  std::filesystem::path resume_from{};
  /// With resume_from: start fresh when it holds no checkpoint yet (or does
  /// not exist), so one command serves the first run and every restart.
  bool resume_if_present = false;
  /// The training data is already this rank's own (or the same on every rank
  /// on purpose): it is not asked for a shard. Otherwise, under several
  /// ranks, data that cannot shard itself (no set_shard) is refused.
  bool data_is_per_rank = false;
  /// When set, SIGINT/SIGTERM finish the current step, write a checkpoint
  /// here and return (FitResult::interrupted); a second signal ends at once.
  std::filesystem::path checkpoint_on_signal{};

  /// Whether `step` optimizer steps reach max_steps (a fit resumed at or
  /// past it takes no step).
  bool reached_max_steps(int64_t step) const { return max_steps > 0 && step >= max_steps; }

  /// The counts in range (the paths are checked where they are used).
  void check() const {
    detail::require_option(epochs >= 1, "fit.epochs", epochs, "a number >= 1");
    detail::require_option(log_every >= 1, "fit.log_every", log_every, "a number >= 1");
  }
};

using Metrics = std::map<std::string, double>;

struct FitResult {
  int64_t epochs = 0;  ///< epochs completed
  int64_t steps = 0;   ///< optimizer steps taken
  bool stopped = false;
  bool interrupted = false;  ///< by a signal, after writing checkpoint_on_signal
  std::string stop_reason;
  /// The last epoch's metrics; after an interruption, the last complete
  /// epoch's with train_loss of the interrupted epoch so far.
  Metrics metrics;
};

}  // namespace trainkit
