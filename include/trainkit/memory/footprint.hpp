#pragma once
// memory::footprint(trainer): the bytes of parameters, gradients and
// optimizer state that this rank holds between steps, counted from the
// tensors themselves (any device). What a sharding strategy saves is read
// here and compared with the ZeRO paper's formulas (docs/sharding.md).
#include <torch/types.h>

#include <cstdint>
#include <type_traits>

#include "trainkit/concepts.hpp"

namespace trainkit::memory {

struct Footprint {
  int64_t parameters = 0;       ///< the flat parameter buffers (whole, or this rank's shard)
  int64_t gradients = 0;        ///< the gradients the update reads (whole, or a shard)
  int64_t optimizer_state = 0;  ///< the optimizer's state tensors on this rank
  /// Kept by the optimizer between steps besides its state (trainkit's
  /// unfused Adam and SGD keep one buffer of their parameters' size).
  int64_t optimizer_workspace = 0;
  int64_t total() const { return parameters + gradients + optimizer_state + optimizer_workspace; }
};

/// This rank's footprint of `trainer` (a trainkit::Trainer) at rest.
template <class TrainerT>
Footprint footprint(TrainerT& trainer) {
  Footprint f;
  // the bytes the buffers hold now (full sharding frees its units' between uses)
  for (const auto& g : trainer.flat_params().groups())
    f.parameters += int64_t(g.data.storage().nbytes());
  if constexpr (requires { trainer.parallel().unit_of(); }) {
    for (const auto& g : trainer.gradients().groups()) f.parameters += int64_t(g.data.nbytes());
  }
  for (const auto& g : trainer.gradients().groups()) f.gradients += int64_t(g.grad.nbytes());
  if constexpr (HasStateDict<std::remove_reference_t<decltype(trainer.optimizer())>>) {
    for (const auto& [name, t] : trainer.optimizer().state_dict().tensors)
      f.optimizer_state += int64_t(t.nbytes());
  }
  if constexpr (requires { trainer.optimizer().workspace_bytes(); })
    f.optimizer_workspace = trainer.optimizer().workspace_bytes();
  return f;
}

}  // namespace trainkit::memory
