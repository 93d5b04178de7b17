#pragma once
// How a Trainer `T` (whose friend this is) saves and resumes: the list of
// its checkpoint's parts, the writer behind TrainState::save_checkpoint and
// the resume at fit's start. The file format is io/checkpoint.hpp's codec.
#include <filesystem>
#include <functional>
#include <string>

#include "trainkit/concepts.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/parallel/single.hpp"
#include "trainkit/state.hpp"
#include "trainkit/trainer/detail/checkpoint_parts.hpp"

namespace trainkit::detail {

template <class T>
struct TrainerCheckpoint {
  /// The checkpoint's parts, in the order they load.
  template <class Hooks>
  static CheckpointParts parts(T& t, TrainState& state, Hooks& hooks) {
    CheckpointParts parts;
    // The epoch's loss so far is every rank's (a collective: all ranks save
    // together); on resume rank 0 holds it, so the mean over any number of
    // ranks goes on from it.
    parts.add(
        "trainer",
        [&t, &state] {
          const auto total = t.coordinator().loss_totals(t.epoch_loss_);
          return trainer_counters(state, T::signature(), t.epoch_done_, total);
        },
        [&t, &state](const StateDict& d) {
          t.resume_at_ = restore_trainer_counters(d, state, t.epoch_loss_,
                                                  /*holds_loss=*/t.parallel_.rank() == 0);
        });
    parts.add_module("model", t.model_.module());
    if constexpr (HasStateDict<std::remove_cvref_t<decltype(t.optimizer_)>>) {
      parts.add(
          "optim",
          [&t] {
            return t.parallel_.gather_optimizer_state(t.optimizer_.state_dict(),
                                                      elementwise_state(t));
          },
          [&t](const StateDict& d) {
            t.optimizer_.load_state_dict(
                t.parallel_.shard_optimizer_state(d, elementwise_state(t)));
          });
    }
    parts.add("precision", t.precision_);
    // a schedule with state (ReduceLROnPlateau) only; one per parameter group
    for (size_t g = 0; g < t.schedules_.size(); ++g)
      parts.add(g == 0 ? std::string("sched") : "sched." + std::to_string(g), t.schedules_[g]);
    parts.add_rng("rng");
    hooks.for_each([&](size_t i, auto& cb) { parts.add("callback." + std::to_string(i), cb); });
    return parts;
  }

  /// The writer behind TrainState::save_checkpoint: every rank calls it at
  /// the same point, and rank 0 writes once all are there (sharded state
  /// gathered).
  template <class Hooks>
  static std::function<void(const std::filesystem::path&)> writer(T& t, TrainState& state,
                                                                  Hooks& hooks) {
    return [&t, &state, &hooks](const std::filesystem::path& path) {
      const auto codec = io::checkpoint_codec("TrainState::save_checkpoint", path.string());
      [[maybe_unused]] auto whole = parallel::gathered_parameters(t.parallel_);
      t.coordinator().write_once(
          "checkpoint " + path.string(), [&] { return parts(t, state, hooks).save(false); },
          [&](const io::Checkpoint& ckpt) { codec.write(path, ckpt); });
    };
  }

  /// Restores everything from `from` (a file, or a folder's newest
  /// checkpoint), or nothing: on any error the trainer is put back as it was
  /// and the error names the file. With `if_present` and no checkpoint
  /// there yet, nothing is restored (a fresh start).
  template <class Hooks>
  static void resume(T& t, const std::filesystem::path& from, bool if_present, TrainState& state,
                     Hooks& hooks) {
    const auto codec = io::checkpoint_codec("fit.resume_from", from.string());
    if (!std::filesystem::exists(from)) {
      if (if_present) return;  // the first run of a command that also restarts
      throw Error("trainkit: fit.resume_from = \"" + from.string() +
                  "\": no such file or folder; fit.resume_if_present = true starts fresh when "
                  "there is no checkpoint yet");
    }
    const auto found = io::read_newest_checkpoint(from, codec.read, if_present);
    if (!found) return;
    try {
      check_trainer_signature(found->checkpoint, T::signature());
      // under full sharding: loaded whole, each rank keeps its slice
      [[maybe_unused]] auto whole = parallel::gathered_parameters(t.parallel_);
      parts(t, state, hooks).load(found->checkpoint);
      state.resumed = true;
    } catch (const std::exception& e) {
      throw_resume_error(found->file.string(), e);
    }
  }

 private:
  static ElementwiseState elementwise_state(const T& t) {
    if constexpr (HasElementwiseState<std::remove_cvref_t<decltype(t.optimizer_)>>) {
      return t.optimizer_.elementwise_state();
    } else {
      return {};
    }
  }
};

}  // namespace trainkit::detail
