#pragma once
// One static_assert per requirement, each message the expected signature:
// Trainer<...> calls these so a wrong policy fails with a sentence, not with
// "constraints not satisfied".
#include <cstdint>
#include <type_traits>
#include <utility>

#include "trainkit/concepts.hpp"
#include "trainkit/error.hpp"
#include "trainkit/trainer/detail/callback_set.hpp"

namespace trainkit::detail {

template <class P>
struct options_of {
  struct type {};
};
template <HasOptions P>
struct options_of<P> {
  using type = typename P::Options;
};
/// P::Options, or an empty struct so a missing one reports once.
template <class P>
using options_t = typename options_of<P>::type;

template <class O>
constexpr bool check_optimizer() {
  static_assert(
      HasOptions<O>,
      "Optimizer policy is missing a nested `struct Options`; see docs/policies.md#optimizer");
  static_assert(HasDefaultOptions<O>,
                "Optimizer policy's `Options` must be default-constructible (an aggregate with "
                "defaults); see docs/policies.md#optimizer");
  static_assert(OptimizerConstructible<O>,
                "Optimizer policy is missing the constructor `O(FlatParams& params, const Options& "
                "options)`; see docs/policies.md#optimizer");
  static_assert(HasStep<O>,
                "Optimizer policy is missing `void step()`; see docs/policies.md#optimizer");
  static_assert(HasLr<O>,
                "Optimizer policy is missing `double lr() const`; see docs/policies.md#optimizer");
  static_assert(
      HasSetLr<O>,
      "Optimizer policy is missing `void set_lr(double lr)`; see docs/policies.md#optimizer");
  return true;
}

template <class S>
constexpr bool check_scheduler() {
  static_assert(
      HasOptions<S>,
      "Scheduler policy is missing a nested `struct Options`; see docs/policies.md#scheduler");
  static_assert(
      HasDefaultOptions<S>,
      "Scheduler policy's `Options` must be default-constructible; see docs/policies.md#scheduler");
  static_assert(SchedulerConstructible<S>,
                "Scheduler policy is missing the constructor `explicit S(const Options& options)`; "
                "see docs/policies.md#scheduler");
  static_assert(HasStart<S>,
                "Scheduler policy is missing `void start(const sched::ScheduleContext& context)`; "
                "see docs/policies.md#scheduler");
  static_assert(HasLrAt<S>,
                "Scheduler policy is missing `double lr_at(int64_t step) const`; see "
                "docs/policies.md#scheduler");
  return true;
}

template <class P>
constexpr bool check_precision() {
  static_assert(
      HasOptions<P>,
      "Precision policy is missing a nested `struct Options`; see docs/policies.md#precision");
  static_assert(
      HasDefaultOptions<P>,
      "Precision policy's `Options` must be default-constructible; see docs/policies.md#precision");
  static_assert(PrecisionConstructible<P>,
                "Precision policy is missing the constructor `P(const Options& options, "
                "torch::Device device)`; see docs/policies.md#precision");
  static_assert(HasAutocast<P>,
                "Precision policy is missing `Scope autocast() const` (an RAII scope entered "
                "around the forward pass); see docs/policies.md#precision");
  static_assert(HasBackward<P>,
                "Precision policy is missing `void backward(const at::Tensor& loss)`; see "
                "docs/policies.md#precision");
  static_assert(HasUnscale<P>,
                "Precision policy is missing `void unscale(FlatParams& params)`; see "
                "docs/policies.md#precision");
  static_assert(HasGuardedStep<P>,
                "Precision policy is missing `template <class F> void step(F&& optimizer_step)`; "
                "see docs/policies.md#precision");
  static_assert(HasUpdate<P>,
                "Precision policy is missing `void update()`; see docs/policies.md#precision");
  return true;
}

template <class A>
constexpr bool check_accumulate() {
  static_assert(
      HasOptions<A>,
      "Accumulate policy is missing a nested `struct Options`; see docs/policies.md#accumulate");
  static_assert(HasDefaultOptions<A>,
                "Accumulate policy's `Options` must be default-constructible; see "
                "docs/policies.md#accumulate");
  static_assert(AccumulateConstructible<A>,
                "Accumulate policy is missing the constructor `explicit A(const Options& "
                "options)`; see docs/policies.md#accumulate");
  static_assert(
      HasSteps<A>,
      "Accumulate policy is missing `int64_t steps() const`; see docs/policies.md#accumulate");
  return true;
}

template <class C>
constexpr bool check_clip() {
  static_assert(HasOptions<C>,
                "Clip policy is missing a nested `struct Options`; see docs/policies.md#clip");
  static_assert(HasDefaultOptions<C>,
                "Clip policy's `Options` must be default-constructible; see docs/policies.md#clip");
  static_assert(ClipConstructible<C>,
                "Clip policy is missing the constructor `explicit C(const Options& options)`; see "
                "docs/policies.md#clip");
  static_assert(
      HasClip<C>,
      "Clip policy is missing `void clip(FlatParams& params)`; see docs/policies.md#clip");
  return true;
}

template <class C>
constexpr bool check_capture() {
  static_assert(
      HasOptions<C>,
      "Capture policy is missing a nested `struct Options`; see docs/policies.md#capture");
  static_assert(HasDefaultOptions<C>,
                "Capture policy's `Options` must be default-constructible; see "
                "docs/policies.md#capture");
  static_assert(CaptureConstructible<C>,
                "Capture policy is missing the constructor `explicit C(const Options& options)`; "
                "see docs/policies.md#capture");
  static_assert(HasRecordsFlag<C>,
                "Capture policy is missing `static constexpr bool records`; see "
                "docs/policies.md#capture");
  if constexpr (HasRecordsFlag<C>) {
    static_assert(!C::records || HasGraphCapture<C>,
                  "Capture policy that records is missing `graph_options()` with `warmup_steps` "
                  "and `emulate`; see docs/policies.md#capture");
  }
  return true;
}

template <class P>
constexpr bool check_parallel() {
  static_assert(
      HasOptions<P>,
      "Parallel policy is missing a nested `struct Options`; see docs/policies.md#parallel");
  static_assert(
      HasDefaultOptions<P>,
      "Parallel policy's `Options` must be default-constructible; see docs/policies.md#parallel");
  static_assert(ParallelConstructible<P>,
                "Parallel policy is missing the constructor `explicit P(const Options& options)`; "
                "see docs/policies.md#parallel");
  static_assert(
      HasDevice<P>,
      "Parallel policy is missing `torch::Device device() const`; see docs/policies.md#parallel");
  static_assert(HasPrepare<P>,
                "Parallel policy is missing `void prepare(torch::nn::Module& model)`; see "
                "docs/policies.md#parallel");
  static_assert(HasAttach<P>,
                "Parallel policy is missing `FlatParams& attach(FlatParams& params)` (what "
                "the optimizer steps; derive from parallel::Single for the defaults); see "
                "docs/policies.md#parallel");
  static_assert(HasSync<P>,
                "Parallel policy is missing `Scope defer_sync()`, `void finish_sync(FlatParams&)` "
                "or `void after_step(FlatParams&)`; see docs/policies.md#parallel");
  static_assert(HasRanks<P>,
                "Parallel policy is missing `int rank() const`, `int world_size() const` or "
                "`bool is_main() const`; see docs/policies.md#parallel");
  static_assert(HasCollectives<P>,
                "Parallel policy is missing a collective: `std::vector<double> "
                "sum(std::vector<double>, const std::string&)`, `int64_t max(int64_t, const "
                "std::string&)`, `void barrier(const std::string&)` or `void check_same(const "
                "std::string&, const std::string&)`; see docs/policies.md#parallel");
  static_assert(HasOptimizerStateTransforms<P>,
                "Parallel policy is missing `StateDict gather_optimizer_state(StateDict, const "
                "ElementwiseState&)` or `StateDict shard_optimizer_state(const StateDict&, const "
                "ElementwiseState&) const`; see docs/policies.md#parallel");
  return true;
}

template <class D>
constexpr bool check_training_data() {
  static_assert(
      requires(D & d) {
        std::begin(d);
        std::end(d);
      },
      "fit's training data must be a range of batches (begin() and end()); see docs/data.md");
  return true;
}

/// The batch type B of training or validation data.
template <class B>
constexpr bool check_batch() {
  static_assert(TrainingBatch<B>,
                "trainkit cannot see the tensors of this batch type: make it data::Batch, an "
                "aggregate struct, tuple or std::map<std::string, ...> of tensors, or specialise "
                "the customization point trainkit::BatchTraits<YourBatch> with "
                "for_each_tensor (concepts.hpp); see docs/models.md");
  return true;
}

template <class T, class B>
constexpr bool check_task() {
  static_assert(Task<T, B>,
                "Task is missing `trainkit::StepOutput step(Model& model, const Batch& batch)` "
                "for the training data's batch type (Model: the model's own type or "
                "trainkit::ModelRef); see docs/models.md");
  return true;
}

#define TRAINKIT_HOOK_NAME(name, Tag) " " #name
#define TRAINKIT_CHECK_HOOK(name, Tag)                                         \
  static_assert(HookWellFormed<C, Tag>,                                        \
                "Callback member `" #name "` must be callable as `void " #name \
                "(trainkit::TrainState& state)`; "                             \
                "see docs/callbacks.md");
template <class C>
constexpr bool check_callback() {
  static_assert(
      NamesAnyHook<C>,
      "A callback must define at least one hook, each `void NAME(trainkit::TrainState& "
      "state)`; the hooks:" TRAINKIT_FOR_EACH_HOOK(TRAINKIT_HOOK_NAME) "; see docs/callbacks.md");
  TRAINKIT_FOR_EACH_HOOK(TRAINKIT_CHECK_HOOK)
  return true;
}
#undef TRAINKIT_CHECK_HOOK
#undef TRAINKIT_HOOK_NAME

/// `C` as fit deduced it; a const callback's hooks could never run.
template <class C>
constexpr bool check_callback_mutable() {
  using Held =
      std::remove_reference_t<decltype(unwrap(std::declval<std::remove_reference_t<C>&>()))>;
  static_assert(!std::is_const_v<Held>,
                "A callback passed to fit must not be const: its hooks change it. Pass it by "
                "non-const reference (used in place) or by value (moved in); see "
                "docs/callbacks.md");
  return true;
}

/// fit's template arguments: the data, its batch type, the task, the callbacks.
template <class TaskT, class Data, class... Callbacks>
constexpr bool check_fit() {
  static_assert(check_training_data<Data>());
  static_assert(check_batch<batch_of_t<Data>>());
  static_assert(check_task<std::remove_cvref_t<TaskT>, batch_of_t<Data>>());
  static_assert((check_callback<callback_t<Callbacks>>() && ...));
  static_assert((check_callback_mutable<Callbacks>() && ...));
  return true;
}

/// At fit's start: a schedule that cycles momentum needs an optimizer with set_momentum.
template <class Optimizer, class Scheduler>
void check_momentum_schedule(const Scheduler& scheduler) {
  if constexpr (HasMomentumAt<Scheduler> && !HasSetMomentum<Optimizer>) {
    require_option(!scheduler.momentum_at(0).has_value(), "sched.cycle_momentum", true,
                   "false for an optimizer without momentum (no set_momentum)");
  }
}

/// Micro-batches per step when the Accumulate policy fixes them at compile
/// time (accumulate::None, Every<N>), else 0.
template <class Accumulate>
constexpr int64_t fixed_steps() {
  if constexpr (requires { std::integral_constant<int64_t, Accumulate::steps()>{}; }) {
    return int64_t{Accumulate::steps()};
  } else {
    return int64_t{0};
  }
}

}  // namespace trainkit::detail
