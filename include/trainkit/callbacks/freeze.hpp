#pragma once
// callbacks::Freeze: keeps a parameter group frozen for the first epochs of
// a run and trains it after (fine-tuning: the pretrained backbone waits
// while the new head settles). While frozen, the group's parameters do not
// require grad (backward computes nothing for them) and the optimizer skips
// them, state included. The group is named as in TrainerOptions::param_groups.
// Under parallel::DDP, frozen parameters get no gradient: set
// parallel.find_unused_parameters. Under capture, a change drops the
// recorded step, which is recorded again after the warm-up steps.
#include <cstdint>
#include <string>

#include "trainkit/error.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state.hpp"

namespace trainkit::callbacks {

class Freeze {
 public:
  struct Options {
    std::string group;        ///< a parameter group's name
    int64_t until_epoch = 1;  ///< frozen in epochs [0, until_epoch), trained from then on
  };

  /// `params` is the trainer's (Trainer::flat_params()).
  Freeze(FlatParams& params, const Options& o)
      : params_(&params), group_(params.param_group(o.group)), until_(o.until_epoch) {
    detail::require_option(o.until_epoch >= 0, "callbacks::Freeze.until_epoch", o.until_epoch,
                           "an epoch >= 0");
  }

  // Both: a resumed run starts mid-epoch, after on_fit_begin's epoch.
  void on_fit_begin(TrainState& state) { apply(state); }
  void on_epoch_begin(TrainState& state) { apply(state); }
  /// Unfrozen at the end: the model trains as usual after the run.
  void on_fit_end(TrainState&) { params_->set_frozen(group_, false); }

 private:
  void apply(const TrainState& state) { params_->set_frozen(group_, state.epoch < until_); }

  FlatParams* params_;
  size_t group_;
  int64_t until_;
};

}  // namespace trainkit::callbacks
