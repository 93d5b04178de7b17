#pragma once
// callbacks::ModelCheckpoint: training-state checkpoints every N optimizer
// steps and/or every epoch, as <dir>/step-<step>.ckpt, with <dir>/last.ckpt
// linking to the newest (so `.resume_from = dir` finds it) and best.ckpt
// for the best value of a monitored metric. Old ones are pruned to the last
// `keep_last`, always after the new file is safely on disk, so a crash at any
// point leaves at least one readable checkpoint. Under DDP every rank takes
// part (the state may be sharded) and the main process writes.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint.hpp"  // the file format, registered for save_checkpoint
#include "trainkit/state.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::callbacks {

class ModelCheckpoint {
 public:
  enum class Mode { Auto, Min, Max };
  struct Options {
    std::filesystem::path dir = "checkpoints";
    int64_t every_n_steps = 0;  ///< 0: not by steps
    bool every_epoch = true;
    int64_t keep_last = 3;   ///< step checkpoints kept; 0 keeps all
    std::string monitor{};   ///< metric for best.ckpt; empty: no best
    Mode mode = Mode::Auto;  ///< Auto: Max for names containing "acc"
  };

  explicit ModelCheckpoint(Options o) : options_(std::move(o)) {
    using detail::require_option;
    require_option(!options_.dir.empty(), "model_checkpoint.dir", options_.dir.string(),
                   "a folder for checkpoints");
    require_option(options_.every_n_steps >= 0, "model_checkpoint.every_n_steps",
                   options_.every_n_steps, "a number of steps >= 0 (0: off)");
    require_option(options_.keep_last >= 0, "model_checkpoint.keep_last", options_.keep_last,
                   "a number >= 0 (0 keeps all)");
    maximize_ = options_.mode == Mode::Max ||
                (options_.mode == Mode::Auto && options_.monitor.find("acc") != std::string::npos);
    best_ = maximize_ ? -std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::infinity();
  }

  void on_step_end(TrainState& state) {
    if (options_.every_n_steps > 0 && state.step % options_.every_n_steps == 0) save(state);
  }

  void on_epoch_end(TrainState& state) {
    if (options_.every_epoch) save(state);
    if (options_.monitor.empty()) return;  // metrics agree across ranks: all save or none
    const auto it = state.metrics.find(options_.monitor);
    if (it == state.metrics.end()) {
      detail::throw_option_error("model_checkpoint.monitor", options_.monitor,
                                 "a metric logged at epoch end");
    }
    if (maximize_ ? it->second > best_ : it->second < best_) {
      best_ = it->second;
      state.save_checkpoint(options_.dir / "best.ckpt");
    }
  }

  StateDict state_dict() const {
    StateDict d;
    d.values = {{"best", best_}};
    return d;
  }
  void load_state_dict(const StateDict& d) { best_ = d.value<double>("best"); }

  /// The step checkpoints on disk, oldest first.
  std::vector<std::filesystem::path> checkpoints() const {
    std::vector<std::filesystem::path> out;
    if (!std::filesystem::is_directory(options_.dir)) return out;
    for (const auto& e : std::filesystem::directory_iterator(options_.dir)) {
      const auto name = e.path().filename().string();
      if (name.rfind("step-", 0) == 0 && e.path().extension() == ".ckpt") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  // Every rank calls save_checkpoint (a collective under DDP); rank 0 writes.
  void save(TrainState& state) {
    char name[48];
    std::snprintf(name, sizeof name, "step-%09lld.ckpt", (long long)state.step);
    state.save_checkpoint(options_.dir / name);  // atomic: temp file, fsync, rename
    if (!state.is_main_process()) return;
    link_last(name);
    prune(options_.dir / name);
  }

  // last.ckpt -> the newest, replaced atomically (a new link renamed over it).
  void link_last(const std::string& target) const {
    const auto link = options_.dir / "last.ckpt";
    auto tmp = link;
    tmp += ".tmp." + std::to_string(::getpid());
    std::filesystem::remove(tmp);
    std::filesystem::create_symlink(target, tmp);
    std::filesystem::rename(tmp, link);
  }

  void prune(const std::filesystem::path& newest) const {
    if (options_.keep_last == 0) return;
    auto all = checkpoints();
    const auto keep = size_t(options_.keep_last);
    for (size_t i = 0; all.size() > keep && i + keep < all.size(); ++i) {
      if (all[i] != newest) std::filesystem::remove(all[i]);
    }
  }

  Options options_;
  bool maximize_ = false;
  double best_;
};

}  // namespace trainkit::callbacks
