#pragma once
// One static_assert per requirement, each message the expected signature:
// Trainer<...> calls these so a wrong policy fails with a sentence, not with
// "constraints not satisfied" (STYLE.md, item 4).
#include "trainkit/concepts.hpp"

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
  static_assert(
      HasDeferSync<P>,
      "Parallel policy is missing `Scope defer_sync() const`; see docs/policies.md#parallel");
  static_assert(HasFinishSync<P>,
                "Parallel policy is missing `void finish_sync(FlatParams& params)`; see "
                "docs/policies.md#parallel");
  static_assert(HasIsMain<P>,
                "Parallel policy is missing `bool is_main() const`; see docs/policies.md#parallel");
  return true;
}

template <class T>
constexpr bool check_task() {
  static_assert(Task<T>,
                "Task is missing `trainkit::StepOutput step(trainkit::ModelRef& model, const "
                "trainkit::data::Batch& batch)`; see docs/policies.md#task");
  return true;
}

template <class C>
constexpr bool check_callback() {
  static_assert(
      NamesAnyHook<C>,
      "A callback must define at least one hook, each `void NAME(trainkit::TrainState& "
      "state)`: on_fit_begin, on_epoch_begin, on_before_step, on_step_end, on_validation_end, "
      "on_epoch_end, on_fit_end, on_exception; see docs/callbacks.md");
  static_assert(HookWellFormed<C, OnFitBegin>,
                "Callback member `on_fit_begin` must be callable as `void "
                "on_fit_begin(trainkit::TrainState& state)`; see docs/callbacks.md");
  static_assert(HookWellFormed<C, OnEpochBegin>,
                "Callback member `on_epoch_begin` must be callable as `void "
                "on_epoch_begin(trainkit::TrainState& state)`; see docs/callbacks.md");
  static_assert(HookWellFormed<C, OnBeforeStep>,
                "Callback member `on_before_step` must be callable as `void "
                "on_before_step(trainkit::TrainState& state)`; see docs/callbacks.md");
  static_assert(HookWellFormed<C, OnStepEnd>,
                "Callback member `on_step_end` must be callable as `void "
                "on_step_end(trainkit::TrainState& state)`; see docs/callbacks.md");
  static_assert(HookWellFormed<C, OnValidationEnd>,
                "Callback member `on_validation_end` must be callable as `void "
                "on_validation_end(trainkit::TrainState& state)`; see docs/callbacks.md");
  static_assert(HookWellFormed<C, OnEpochEnd>,
                "Callback member `on_epoch_end` must be callable as `void "
                "on_epoch_end(trainkit::TrainState& state)`; see docs/callbacks.md");
  static_assert(HookWellFormed<C, OnFitEnd>,
                "Callback member `on_fit_end` must be callable as `void "
                "on_fit_end(trainkit::TrainState& state)`; see docs/callbacks.md");
  static_assert(HookWellFormed<C, OnException>,
                "Callback member `on_exception` must be callable as `void "
                "on_exception(trainkit::TrainState& state)`; see docs/callbacks.md");
  return true;
}

}  // namespace trainkit::detail
