#pragma once
// What the finders share: a fit of a given number of steps over data
// repeated as needed, and a snapshot of what such a fit changes in a
// trainer (parameters, buffers, optimizer and precision state, the learning
// rate and the random generators), put back afterwards. The copies live in
// CPU memory, so that a finder measuring device memory is not measuring
// them too.
#include <torch/types.h>

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainkit/concepts.hpp"
#include "trainkit/state.hpp"
#include "trainkit/state_dict.hpp"
#include "trainkit/trainer/detail/checkpoint_parts.hpp"

namespace trainkit::finders::detail {

/// Ends a fit when a whole epoch gave no step: data that stops giving
/// batches would otherwise loop through empty epochs up to the step count.
struct EndWhenDataRunsOut {
  int64_t steps_before_epoch = 0;
  void on_epoch_begin(TrainState& state) { steps_before_epoch = state.step; }
  void on_epoch_end(TrainState& state) {
    if (state.step == steps_before_epoch) state.request_stop("no more batches");
  }
};

/// `steps` optimizer steps of `trainer` over `data`, repeated as needed.
template <class TrainerT, class TaskT, class Data, class... Callbacks>
void fit_steps(TrainerT& trainer, TaskT&& task, Data&& data, int64_t steps, int64_t log_every,
               Callbacks&&... callbacks) {
  trainer.fit(
      std::forward<TaskT>(task), std::forward<Data>(data),
      {.epochs = std::numeric_limits<int32_t>::max(), .log_every = log_every, .max_steps = steps},
      std::forward<Callbacks>(callbacks)..., EndWhenDataRunsOut{});
}

/// A copy of what training changes, put back by restore().
template <class TrainerT>
class Snapshot {
 public:
  explicit Snapshot(TrainerT& t) : trainer_(t) {
    torch::NoGradGuard no_grad;
    for (const auto& g : weights(t)) params_.push_back(host_copy(g.data));
    for (const auto& b : t.model().buffers()) buffers_.push_back(host_copy(b));
    if constexpr (HasStateDict<std::remove_reference_t<decltype(t.optimizer())>>)
      optim_ = cloned(t.optimizer().state_dict());
    if constexpr (HasStateDict<std::remove_reference_t<decltype(t.precision())>>)
      precision_ = cloned(t.precision().state_dict());
    lr_ = t.optimizer().lr();
    rng_ = trainkit::detail::RngPart{}.state_dict();  // dropout draws as if no sweep ran
  }
  void restore() {
    torch::NoGradGuard no_grad;
    auto groups = weights(trainer_);
    for (size_t i = 0; i < params_.size(); ++i) groups[i].data.copy_(params_[i]);
    const auto buffers = trainer_.model().buffers();
    for (size_t i = 0; i < buffers_.size(); ++i) buffers[i].copy_(buffers_[i]);
    if constexpr (HasStateDict<std::remove_reference_t<decltype(trainer_.optimizer())>>)
      trainer_.optimizer().load_state_dict(optim_);
    if constexpr (HasStateDict<std::remove_reference_t<decltype(trainer_.precision())>>)
      trainer_.precision().load_state_dict(precision_);
    trainer_.optimizer().set_lr(lr_);
    trainkit::detail::RngPart{}.load_state_dict(rng_);
    trainer_.gradients().zero_grad();
  }

 private:
  // The flat buffers that hold the weights between steps: under full
  // sharding this rank's shard (the whole buffers are empty then).
  static auto weights(TrainerT& t) {
    if constexpr (requires { t.parallel().unit_of(); }) {
      return t.parallel().shard().groups();
    } else {
      return t.flat_params().groups();
    }
  }
  static at::Tensor host_copy(const at::Tensor& t) {
    return t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
  }
  static StateDict cloned(StateDict d) {
    for (auto& [name, t] : d.tensors) t = host_copy(t);
    return d;
  }
  TrainerT& trainer_;
  std::vector<at::Tensor> params_, buffers_;
  StateDict optim_, precision_, rng_;
  double lr_ = 0;
};

}  // namespace trainkit::finders::detail
