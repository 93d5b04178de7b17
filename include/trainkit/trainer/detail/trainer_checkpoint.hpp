#pragma once
// How a Trainer `T` (whose friend this is) saves and resumes: the list of
// its checkpoint's parts, the writer behind TrainState::save_checkpoint and
// the resume at fit's start. The file formats are io/checkpoint.hpp's codec;
// the sharded form's pieces are made and read in trainer/detail/sharded_state.hpp.
#include <c10/util/Type.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/concepts.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/parallel/single.hpp"
#include "trainkit/policy_roles.hpp"
#include "trainkit/state.hpp"
#include "trainkit/trainer/detail/background_save.hpp"
#include "trainkit/trainer/detail/checkpoint_parts.hpp"
#include "trainkit/trainer/detail/evaluation.hpp"
#include "trainkit/trainer/detail/sharded_state.hpp"
#include "trainkit/trainer/detail/state_layout.hpp"
#include "trainkit/trainer_options.hpp"

namespace trainkit::detail {

template <class T>
struct TrainerCheckpoint {
  /// The checkpoint's parts, in the order they load; without the model and
  /// the optimizer when `whole_model` is false (the sharded form's pieces).
  template <class Hooks>
  static CheckpointParts parts(T& t, TrainState& state, Hooks& hooks, bool whole_model = true) {
    CheckpointParts parts;
    // The epoch's loss and samples so far are every rank's (collectives: all
    // ranks save together); on resume rank 0 holds them, so sums over any
    // number of ranks go on from them.
    parts.add(
        "trainer",
        [&t, &state] {
          const auto total = t.coordinator().loss_totals(t.epoch_loss_);
          const auto samples = t.parallel_.sum({double(t.epoch_samples_)}, "samples of the epoch");
          const EpochPosition position{int64_t(samples[0]), t.parallel_.world_size(),
                                       t.epoch_resharded_};
          return trainer_counters(state, T::signature(), t.epoch_done_, total, position);
        },
        [&t, &state](const StateDict& d) {
          t.resume_at_ = restore_trainer_counters(d, state, t.epoch_loss_, t.epoch_samples_,
                                                  /*holds_totals=*/t.parallel_.rank() == 0,
                                                  t.parallel_.world_size());
        });
    if (whole_model) {
      parts.add_module("model", t.model_.module());
      add_whole_optimizer(t, parts);
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
  /// the same point. One file: rank 0 writes once all are there (sharded
  /// state gathered). Sharded: each rank writes what it holds, and rank 0
  /// the index once all have. Asynchronous: the step waits for the copies
  /// on the host; the writes run on `background`'s thread.
  template <class Hooks>
  static std::function<void(const std::filesystem::path&, std::function<void()>)> writer(
      T& t, TrainState& state, Hooks& hooks, BackgroundSave& background) {
    using Form = CheckpointOptions::Form;
    const auto form = t.checkpoint_options_.form;
    const bool sharded =
        form == Form::Sharded ||
        (form == Form::Auto &&
         parallel::sharded_checkpoints_by_default<std::remove_cvref_t<decltype(t.parallel_)>>());
    // Asynchronous sharded saves gather their ranks' entries on a group of
    // their own, made at the first one (a collective: all save together).
    auto writers = std::make_shared<ShardedState::Gather>();
    return [&t, &state, &hooks, &background, sharded, writers](const std::filesystem::path& path,
                                                               std::function<void()> then) {
      const bool switched = use_evaluation_weights(t);  // saved: the weights to evaluate
      const auto save = [&] {
        const auto codec = io::checkpoint_codec("TrainState::save_checkpoint", path.string());
        const bool asynchronous = t.checkpoint_options_.asynchronous;
        if (asynchronous) finish(t, background);  // the save before this one, on every rank
        if (sharded) {
          auto others = parts(t, state, hooks, /*whole_model=*/false);
          auto prepared =
              ShardedState::prepare(t.parallel_, state_view(t), others, path, asynchronous);
          if (!asynchronous) {
            ShardedState::write_now(t.parallel_, prepared, codec);
            if (t.parallel_.is_main() && then) then();
            return;
          }
          if (!*writers) *writers = writer_gather(t);
          auto what = prepared.what;
          background.start(what, [prepared = std::move(prepared), codec, gather = *writers,
                                  then = std::move(then)] {
            ShardedState::write(prepared, codec, gather);
            if (prepared.main && then) then();
          });
          return;
        }
        const auto what = "checkpoint " + path.string();
        const auto write = [codec, path, then = std::move(then)](const io::Checkpoint& ckpt) {
          codec.write(path, ckpt);
          if (then) then();
        };
        [[maybe_unused]] auto whole = parallel::gathered_parameters(t.parallel_);
        t.coordinator().write_once(
            what, [&] { return parts(t, state, hooks).save(false); },
            [&](io::Checkpoint& ckpt) {
              if (!asynchronous) return write(ckpt);
              for (auto& [name, part] : ckpt.parts) {  // off the parameters the next step changes
                for (auto& [key, tensor] : part.tensors) {
                  tensor = tensor.detach().to(
                      at::TensorOptions().device(at::kCPU).pinned_memory(tensor.is_cuda()),
                      /*non_blocking=*/false, /*copy=*/true);
                }
              }
              background.start(what, [write, ckpt = std::move(ckpt)] { write(ckpt); });
            },
            /*wait_for_write=*/!asynchronous);
      };
      save();
      if (switched) use_evaluation_weights(t, false);
    };
  }

  /// Waits for the asynchronous save in flight; a failed one is an Error on
  /// every rank. Every rank calls it at the same point (a collective).
  static void finish(T& t, BackgroundSave& background) {
    if (!t.checkpoint_options_.asynchronous) return;
    const auto error = background.wait();
    const auto failed = t.parallel_.max(error.empty() ? 0 : t.parallel_.rank() + 1,
                                        "agree that the last checkpoint was written");
    if (!error.empty()) throw Error(error);
    if (failed > 0) {
      throw Error("trainkit: the asynchronous save of rank " + std::to_string(failed - 1) +
                  "'s checkpoint failed (its error is in that rank's log)");
    }
  }

  /// A gather of texts over a process group of its own (every rank makes
  /// it at the same save), for a writer thread to use beside the steps'
  /// collectives; one process needs none.
  static ShardedState::Gather writer_gather(T& t) {
    if constexpr (requires { t.parallel_.process_group(); }) {
      if (t.parallel_.world_size() > 1) {
        static int made = 0;  // the same count on every rank: they make theirs together
        std::vector<int> ranks(size_t(t.parallel_.world_size()));
        std::iota(ranks.begin(), ranks.end(), 0);
        auto group = t.parallel_.process_group().subgroup(
            "trainkit/checkpoint_writers_" + std::to_string(made++), ranks);
        return [group](const std::string& mine) {
          return group->all_gather(mine, "gather of a sharded checkpoint's entries");
        };
      }
    }
    return [](const std::string& mine) { return std::vector<std::string>{mine}; };
  }

  /// At fit's start (after the writer is set): the signal's checkpoint
  /// codec checked now (not when the signal comes), and the resume
  /// `options` ask for. Returns where the fit starts; `by_samples` when
  /// its epoch goes on after the samples another number of ranks took.
  template <class Data, class Hooks>
  static ResumePoint start(T& t, const FitOptions& options, TrainState& state, Hooks& hooks) {
    if (!options.checkpoint_on_signal.empty())
      io::checkpoint_codec("fit.checkpoint_on_signal", options.checkpoint_on_signal.string());
    t.resume_at_ = {};
    if (!options.resume_from.empty()) {
      resume(t, options.resume_from, options.resume_if_present, state, hooks);
      t.apply_schedule(state);
    }
    use_evaluation_weights(t, false);  // the weights the steps take
    auto start = t.resume_at_;
    start.by_samples = start.by_samples && !options.data_is_per_rank;
    if constexpr (!HasSetStartSample<Data>) {
      if (start.by_samples) {
        throw Error("trainkit: fit.resume_from = \"" + options.resume_from.string() +
                    "\": its epoch was interrupted on another number of ranks, and the "
                    "training data (" +
                    c10::demangle_type<Data>() +
                    ") cannot go on after the samples those ranks took (it has no "
                    "set_start_sample): use data::Loader with a library sampler or "
                    "data::TensorBatches, or resume on the same number of ranks");
      }
    }
    return start;
  }

  /// Puts `data` at `epoch`'s start (its order), and the resumed epoch
  /// where it goes on: after the samples all ranks took (`start.by_samples`)
  /// or at this rank's batch. Returns the batches to skip (data without
  /// set_start skips them by reading).
  template <class Data>
  static int64_t enter_epoch(T& t, Data& data, int64_t epoch, const ResumePoint& start) {
    const bool resumed = epoch == start.epoch && start.batch > 0;
    const int64_t skip = resumed && !start.by_samples ? start.batch : 0;
    t.epoch_resharded_ = resumed && start.by_samples;
    if constexpr (HasSetEpoch<Data>) data.set_epoch(epoch);
    if constexpr (HasSetStartSample<Data>) {
      if (t.epoch_resharded_) data.set_start_sample(start.samples);
    }
    if constexpr (HasSetStart<Data>) {
      if (skip > 0) data.set_start(skip);
    }
    if (!resumed) t.epoch_loss_.reset(), t.epoch_samples_ = 0;
    return skip;
  }

  /// Restores everything from `from` (a file, or a folder's newest
  /// checkpoint; of a folder PyTorch's dcp.save wrote, the model and the
  /// optimizer), or nothing: on any error the trainer is put back as it was
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
      if (found->checkpoint.written_by_pytorch) {
        // the model and the optimizer only; the run goes on at its step count
        state.step = ShardedState::load_pytorch(t.parallel_, state_view(t), found->checkpoint);
        state.resumed = true;
        return;
      }
      check_trainer_signature(found->checkpoint, T::signature(), kParallelRole);
      if (found->checkpoint.sharded) {
        auto others = parts(t, state, hooks, /*whole_model=*/false);
        ShardedState::load(t.parallel_, state_view(t), others, found->checkpoint);
      } else {
        // under full sharding: loaded whole, each rank keeps its slice
        [[maybe_unused]] auto whole = parallel::gathered_parameters(t.parallel_);
        parts(t, state, hooks).load(found->checkpoint);
      }
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
  static OptimizerLayout optimizer_layout(const T& t) {
    OptimizerLayout layout{elementwise_state(t), {}};
    if constexpr (requires { t.optimizer_.per_group_values(); })
      layout.per_group_values = t.optimizer_.per_group_values();
    return layout;
  }

  /// The optimizer's part of one file: every rank's state gathered, per
  /// parameter (so any strategy's groups read it); a checkpoint from before
  /// that form loads by group, as it was written.
  static void add_whole_optimizer(T& t, CheckpointParts& parts) {
    if constexpr (HasStateDict<std::remove_cvref_t<decltype(t.optimizer_)>>) {
      parts.add(
          "optim",
          [&t] {
            const auto layout = optimizer_layout(t);
            auto whole =
                t.parallel_.gather_optimizer_state(t.optimizer_.state_dict(), layout.elementwise);
            if (layout.elementwise.empty()) return whole;
            return optimizer_state_by_parameter(whole, layout,
                                                param_slots(t.model_.module(), t.flat_));
          },
          [&t](const StateDict& d) {
            const auto layout = optimizer_layout(t);
            const auto by_group =
                is_by_parameter(d)
                    ? optimizer_state_by_group(d, layout, param_slots(t.model_.module(), t.flat_),
                                               t.flat_)
                    : d;
            t.optimizer_.load_state_dict(
                t.parallel_.shard_optimizer_state(by_group, layout.elementwise));
          });
    }
  }

  /// What the sharded form reads and writes of `t`.
  static TrainerStateView state_view(T& t) {
    TrainerStateView view{t.model_.module(),
                          t.flat_,
                          param_slots(t.model_.module(), t.flat_),
                          parallel::optimized_params(t.parallel_, t.flat_),
                          parallel::held_share(t.parallel_),
                          parallel::written_share(t.parallel_),
                          optimizer_layout(t),
                          {},
                          {},
                          [&t] { t.parallel_.after_step(t.flat_); }};
    if constexpr (HasStateDict<std::remove_cvref_t<decltype(t.optimizer_)>>) {
      view.optimizer_state = [&t] { return t.optimizer_.state_dict(); };
      view.load_optimizer_state = [&t](const StateDict& d) { t.optimizer_.load_state_dict(d); };
    }
    return view;
  }
};

}  // namespace trainkit::detail
