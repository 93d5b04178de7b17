#pragma once
// Which weights the model holds outside the steps. An optimizer with
// evaluation weights of its own (HasEvaluationWeights: schedule-free
// AdamW's average) puts them in for validation, checkpoints and after fit,
// and its training weights back before the next step. Under ZeRO each rank
// switches its slice, and the Parallel policy's after_step spreads the
// slices, as after a step: every rank calls these at the same point.
#include <type_traits>

#include "trainkit/concepts.hpp"
#include "trainkit/state.hpp"

namespace trainkit::detail {

/// The optimizer's evaluation weights in trainer `t`'s model (`on`), or its
/// training weights. Returns whether the model's weights changed.
template <class T>
bool use_evaluation_weights(T& t, bool on = true) {
  auto& optimizer = t.optimizer();
  if constexpr (HasEvaluationWeights<std::remove_cvref_t<decltype(optimizer)>>) {
    if (optimizer.evaluating() == on) return false;
    if (on) {
      optimizer.use_evaluation_weights();
    } else {
      optimizer.use_training_weights();
    }
    t.parallel().after_step(t.flat_params());
    return true;
  } else {
    return false;
  }
}

/// Validation in fit: on_validation_begin, the metrics of `data` as
/// "val_<name>", on_validation_end, all on the evaluation weights (what
/// EarlyStopping keeps and ModelCheckpoint saves); the training weights
/// back after. Not in a scope's destructor: the switch may be a collective,
/// and an error in it must reach the caller.
template <class B, class T, class TaskT, class Data, class Hooks>
void validate(T& t, TaskT& task, const Data& data, TrainState& state, Hooks& hooks) {
  const bool switched = use_evaluation_weights(t);
  hooks.template dispatch<OnValidationBegin>(state);
  for (const auto& [name, value] : t.template evaluate<B>(task, data))
    state.metrics["val_" + name] = value;
  hooks.template dispatch<OnValidationEnd>(state);
  if (switched) use_evaluation_weights(t, false);
}

}  // namespace trainkit::detail
