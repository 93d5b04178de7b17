#pragma once
// callbacks::ModelCheckpoint: training-state checkpoints every N optimizer
// steps and/or every epoch, as <dir>/step-<step>.ckpt, with <dir>/last.ckpt
// linking to the newest (so `.resume_from = dir` finds it) and best.ckpt
// for the best value of a monitored metric. Old ones are pruned to the last
// `keep_last`, always after the new file is safely on disk, so a crash at any
// point leaves at least one readable checkpoint. Under DDP every rank takes
// part (the state may be sharded) and the main process writes.
#include <filesystem>
#include <string>
#include <vector>

#include "trainkit/callbacks/monitor.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint.hpp"  // the file format, registered for save_checkpoint
#include "trainkit/io/checkpoint_folder.hpp"
#include "trainkit/state.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::callbacks {

class ModelCheckpoint {
 public:
  using Mode = MonitorMode;
  struct Options {
    std::filesystem::path dir = "checkpoints";
    int64_t save_every = 0;  ///< 0: not by steps
    bool every_epoch = true;
    int64_t keep_last = 3;   ///< step checkpoints kept; 0 keeps all
    std::string monitor{};   ///< metric for best.ckpt; empty: no best
    Mode mode = Mode::Auto;  ///< Auto: Max for names containing "acc"
    double min_delta = 0.0;  ///< a new best must beat the old by more than this
  };

  explicit ModelCheckpoint(Options o) : options_(std::move(o)) {
    using detail::require_option;
    require_option(!options_.dir.empty(), "model_checkpoint.dir", options_.dir.string(),
                   "a folder for checkpoints");
    require_option(options_.save_every >= 0, "model_checkpoint.save_every", options_.save_every,
                   "a number of steps >= 0 (0: off)");
    require_option(options_.keep_last >= 0, "model_checkpoint.keep_last", options_.keep_last,
                   "a number >= 0 (0 keeps all)");
  }

  void on_step_end(TrainState& state) {
    if (options_.save_every > 0 && state.step % options_.save_every == 0) save(state);
  }

  void on_epoch_end(TrainState& state) {
    if (options_.every_epoch) save(state);
    if (options_.monitor.empty()) return;  // metrics agree across ranks: all save or none
    if (monitor_.improve(monitor_.value(state)))
      state.save_checkpoint(io::checkpoint_folder::best_file(options_.dir));
  }

  StateDict state_dict() const {
    StateDict d;
    d.values = {{"best", monitor_.best()}};
    return d;
  }
  void load_state_dict(const StateDict& d) { monitor_.set_best(d.value<double>("best")); }

  /// The monitored metric's best value so far.
  double best() const { return monitor_.best(); }
  /// The step checkpoints on disk, oldest first.
  std::vector<std::filesystem::path> checkpoints() const {
    return io::checkpoint_folder::step_files(options_.dir);
  }

 private:
  // Every rank calls save_checkpoint (a collective under DDP); rank 0
  // writes, then links last.ckpt and prunes once the file is in place
  // (later, on the writing thread, when saves are asynchronous).
  void save(TrainState& state) {
    const auto name = io::checkpoint_folder::step_file_name(state.step);
    state.save_checkpoint(options_.dir / name, [this, name] {  // atomic: complete, or not at all
      io::checkpoint_folder::link_last(options_.dir, name);
      prune(options_.dir / name);
    });
  }

  void prune(const std::filesystem::path& newest) const {
    if (options_.keep_last == 0) return;
    auto all = checkpoints();
    const auto keep = size_t(options_.keep_last);
    for (size_t i = 0; all.size() > keep && i + keep < all.size(); ++i) {
      if (all[i] != newest) io::checkpoint_folder::remove_checkpoint(all[i]);
    }
  }

  Options options_;
  Monitor monitor_{"model_checkpoint", options_.monitor, options_.mode, options_.min_delta};
};

}  // namespace trainkit::callbacks
