#pragma once
// Every contract a user can implement, in one file (the data::Loader's
// datasets and samplers come from data/concepts.hpp): read this first.
//
// A policy is a type with a nested aggregate `Options` and the members below.
// Each family concept is composed of small named ones (in detail::), so a
// compiler error names the missing part; Trainer<...> checks them one by one
// with static_asserts whose text is the expected signature
// (docs/policies.md). The optional capabilities (Has*) and the family,
// task, callback and training-data concepts are the public contracts.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <concepts>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "trainkit/data/batch.hpp"
#include "trainkit/data/batch_traits.hpp"  // the customization point BatchTraits
#include "trainkit/data/concepts.hpp"      // datasets and samplers of data::Loader
#include "trainkit/data/shard.hpp"         // HasSetShard
#include "trainkit/params.hpp"
#include "trainkit/sched/context.hpp"
#include "trainkit/state.hpp"
#include "trainkit/state_dict.hpp"
#include "trainkit/task.hpp"

namespace trainkit {

// ---- shared parts ----------------------------------------------------------
/// Optional for every policy and callback: saved in and restored from checkpoints.
template <class T>
concept HasStateDict = requires(const T& c, T& m, const StateDict& d) {
  { c.state_dict() } -> std::same_as<StateDict>;
  m.load_state_dict(d);
};
/// Optional for every policy: the name checkpoints record it by,
///   static constexpr const char* stable_name(std::type_identity<MyClip>) { return "my::Clip"; }
/// It stays when the type is renamed or moved, so checkpoints keep loading;
/// without one, the C++ type name is used. The parameter names the type, so
/// a policy derived from another does not inherit its name.
template <class P>
concept HasStableName = requires {
  { P::stable_name(std::type_identity<P>{}) } -> std::convertible_to<std::string>;
};
namespace detail {
template <class P>
concept HasOptions = requires {
  typename P::Options;
};
template <class P>
concept HasDefaultOptions = HasOptions<P> && std::default_initializable<typename P::Options>;
}  // namespace detail

// ---- optimizer: steps the flat parameters ----------------------------------
//   struct MyOpt {
//     struct Options { double lr = 0.1; };
//     MyOpt(FlatParams& params, const Options& options);
//     void step();  double lr() const;  void set_lr(double);
//   };
namespace detail {
template <class O>
concept OptimizerConstructible =
    HasOptions<O> && std::constructible_from<O, FlatParams&, const typename O::Options&>;
template <class O>
concept HasStep = requires(O& o) {
  o.step();
};
template <class O>
concept HasLr = requires(const O& o) {
  { o.lr() } -> std::convertible_to<double>;
};
template <class O>
concept HasSetLr = requires(O& o, double lr) {
  o.set_lr(lr);
};
}  // namespace detail
/// Optional: momentum (SGD) or beta1 (Adam) for schedules that cycle it.
template <class O>
concept HasSetMomentum = requires(O& o, double m) {
  o.set_momentum(m);
};
/// Optional: a step a CUDA graph can capture (capture::CudaGraph):
/// after make_capturable() the step reads no host value, and
/// step_unless_inf(found_inf) changes nothing where the device flag is set.
/// capturable() says whether this instance can (optim::AdamW: when fused).
template <class O>
concept HasCapturableStep = requires(O& o, const O& c, const at::Tensor& found_inf) {
  { c.capturable() } -> std::convertible_to<bool>;
  o.make_capturable();
  o.step_unless_inf(found_inf);
};
/// Optional: weights to evaluate and save other than those it steps
/// (optim::ScheduleFreeAdamW's average): the Trainer puts them in the
/// parameters for validation, checkpoints and after fit, and the training
/// weights back before stepping; evaluating() says which are in.
template <class O>
concept HasEvaluationWeights = requires(O& o, const O& c) {
  o.use_evaluation_weights();
  o.use_training_weights();
  { c.evaluating() } -> std::convertible_to<bool>;
};
template <class O>
concept OptimizerPolicy = detail::HasDefaultOptions<O> && detail::OptimizerConstructible<O> &&
    detail::HasStep<O> && detail::HasLr<O> && detail::HasSetLr<O>;

// ---- scheduler: learning rate as a function of the optimizer step ----------
//   struct MySched {
//     struct Options {};
//     explicit MySched(const Options&);
//     void start(const sched::ScheduleContext&);  // base lr and run length
//     double lr_at(int64_t step) const;
//   };
namespace detail {
template <class S>
concept SchedulerConstructible =
    HasOptions<S> && std::constructible_from<S, const typename S::Options&>;
template <class S>
concept HasStart = requires(S& s, const sched::ScheduleContext& ctx) {
  s.start(ctx);
};
template <class S>
concept HasLrAt = requires(const S& s, int64_t step) {
  { s.lr_at(step) } -> std::convertible_to<double>;
};
}  // namespace detail
/// Optional: a momentum schedule (OneCycle).
template <class S>
concept HasMomentumAt = requires(const S& s, int64_t step) {
  { s.momentum_at(step) } -> std::same_as<std::optional<double>>;
};
/// Optional: a schedule that reads each epoch's metrics (ReduceLROnPlateau),
/// given after validation.
template <class S>
concept ObservesMetrics = requires(S& s, const std::map<std::string, double>& metrics) {
  s.observe(metrics);
};
template <class S>
concept SchedulerPolicy = detail::HasDefaultOptions<S> && detail::SchedulerConstructible<S> &&
    detail::HasStart<S> && detail::HasLrAt<S>;

// ---- precision: autocast around forward, (scaled) backward, guarded step ----
//   struct MyPrecision {
//     struct Options {};
//     MyPrecision(const Options&, torch::Device);
//     Scope autocast() const;                       // RAII, entered around the task
//     void backward(const at::Tensor& loss);
//     void unscale(FlatParams&);                     // before clipping
//     template <class F> void step(F&& optimizer_step);  // may skip the step
//     void update();                                 // after each boundary
//   };
namespace detail {
inline void nothing() {}
template <class P>
concept PrecisionConstructible =
    HasOptions<P> && std::constructible_from<P, const typename P::Options&, torch::Device>;
template <class P>
concept HasAutocast = requires(const P& p) {
  p.autocast();
};
template <class P>
concept HasBackward = requires(P& p, const at::Tensor& loss) {
  p.backward(loss);
};
template <class P>
concept HasUnscale = requires(P& p, FlatParams& params) {
  p.unscale(params);
};
template <class P>
concept HasGuardedStep = requires(P& p) {
  p.step(detail::nothing);
};
template <class P>
concept HasUpdate = requires(P& p) {
  p.update();
};
}  // namespace detail
/// Optional: the loss scale, for logging.
template <class P>
concept HasLossScale = requires(const P& p) {
  { p.loss_scale() } -> std::convertible_to<at::Tensor>;
};
/// Optional: the device flag unscale() sets on inf/NaN, for a step that skips
/// on the device (a captured step) instead of reading it in step().
template <class P>
concept HasFoundInf = requires(const P& p) {
  { p.found_inf() } -> std::convertible_to<at::Tensor>;
};
template <class P>
concept PrecisionPolicy = detail::HasDefaultOptions<P> && detail::PrecisionConstructible<P> &&
    detail::HasAutocast<P> && detail::HasBackward<P> && detail::HasUnscale<P> &&
    detail::HasGuardedStep<P> && detail::HasUpdate<P>;

// ---- accumulate: micro-batches per optimizer step ---------------------------
//   struct MyAccumulate { struct Options {}; explicit MyAccumulate(const Options&);
//                         int64_t steps() const; };
namespace detail {
template <class A>
concept AccumulateConstructible =
    HasOptions<A> && std::constructible_from<A, const typename A::Options&>;
template <class A>
concept HasSteps = requires(const A& a) {
  { a.steps() } -> std::convertible_to<int64_t>;
};
}  // namespace detail
template <class A>
concept AccumulatePolicy =
    detail::HasDefaultOptions<A> && detail::AccumulateConstructible<A> && detail::HasSteps<A>;

// ---- clip: acts on unscaled gradients before the step -----------------------
//   struct MyClip { struct Options {}; explicit MyClip(const Options&);
//                   void clip(FlatParams&); };
namespace detail {
template <class C>
concept ClipConstructible = HasOptions<C> && std::constructible_from<C, const typename C::Options&>;
template <class C>
concept HasClip = requires(C& c, FlatParams& params) {
  c.clip(params);
};
}  // namespace detail
/// Optional: the pre-clip total norm (a device tensor).
template <class C>
concept HasLastNorm = requires(const C& c) {
  { c.last_norm() } -> std::convertible_to<at::Tensor>;
};
template <class C>
concept ClipPolicy =
    detail::HasDefaultOptions<C> && detail::ClipConstructible<C> && detail::HasClip<C>;

// ---- parallel: placement, gradient synchronisation, the ranks' agreement ----
// One interface for one process and many: parallel::Single is the one-rank
// case (identity collectives, a no-op barrier, identity attach and state
// transforms); derive from it to write a policy that changes some of it.
//   struct MyParallel {
//     struct Options {};  explicit MyParallel(const Options&);
//     torch::Device device() const;  void prepare(torch::nn::Module&);
//     FlatParams& attach(FlatParams&);    // the parameters this rank's optimizer steps
//     Scope defer_sync();  void finish_sync(FlatParams&);  void after_step(FlatParams&);
//     int rank() const;  int world_size() const;  bool is_main() const;
//     std::vector<double> sum(std::vector<double>, const std::string& what);
//     int64_t max(int64_t, const std::string& what);
//     void barrier(const std::string& what);
//     void check_same(const std::string& what, const std::string& description);
//     StateDict gather_optimizer_state(StateDict local, const ElementwiseState&);
//     StateDict shard_optimizer_state(const StateDict& full, const ElementwiseState&) const;
//     // optional: the gradients the update reads, when not `flat` (a shard)
//     FlatParams& gradients(FlatParams& flat);
//   };
namespace detail {
template <class P>
concept ParallelConstructible =
    HasOptions<P> && std::constructible_from<P, const typename P::Options&>;
template <class P>
concept HasDevice = requires(const P& p) {
  { p.device() } -> std::convertible_to<torch::Device>;
};
template <class P>
concept HasPrepare = requires(P& p, torch::nn::Module& m) {
  p.prepare(m);
};
template <class P>
concept HasAttach = requires(P& p, FlatParams& params) {
  { p.attach(params) } -> std::same_as<FlatParams&>;
};
template <class P>
concept HasSync = requires(P& p, FlatParams& params) {
  p.defer_sync();
  p.finish_sync(params);
  p.after_step(params);
};
template <class P>
concept HasRanks = requires(const P& p) {
  { p.rank() } -> std::convertible_to<int>;
  { p.world_size() } -> std::convertible_to<int>;
  { p.is_main() } -> std::convertible_to<bool>;
};
template <class P>
concept HasCollectives = requires(P& p, std::vector<double> v, int64_t i, const std::string& s) {
  { p.sum(v, s) } -> std::same_as<std::vector<double>>;
  { p.max(i, s) } -> std::convertible_to<int64_t>;
  p.barrier(s);
  p.check_same(s, s);
};
template <class P>
concept HasOptimizerStateTransforms = requires(P& p, const P& c, StateDict d,
                                               const ElementwiseState& e) {
  { p.gather_optimizer_state(d, e) } -> std::same_as<StateDict>;
  { c.shard_optimizer_state(d, e) } -> std::same_as<StateDict>;
};
}  // namespace detail
template <class P>
concept ParallelPolicy = detail::HasDefaultOptions<P> && detail::ParallelConstructible<P> &&
    detail::HasDevice<P> && detail::HasPrepare<P> && detail::HasAttach<P> && detail::HasSync<P> &&
    detail::HasRanks<P> && detail::HasCollectives<P> && detail::HasOptimizerStateTransforms<P>;

// ---- capture: whether whole steps are recorded and replayed -----------------
//   struct MyCapture { struct Options {}; explicit MyCapture(const Options&);
//                      static constexpr bool records = false; };
// A policy that records also has graph_options() (HasGraphCapture).
namespace detail {
template <class C>
concept CaptureConstructible =
    HasOptions<C> && std::constructible_from<C, const typename C::Options&>;
template <class C>
concept HasRecordsFlag = requires {
  {std::bool_constant<C::records>{}};
};
}  // namespace detail
template <class C>
concept CapturePolicy =
    detail::HasDefaultOptions<C> && detail::CaptureConstructible<C> && detail::HasRecordsFlag<C>;

/// The capture settings of capture::CudaGraph: the Trainer compiles the
/// capture code only then.
template <class P>
concept HasGraphCapture = requires(const P& p) {
  { p.graph_options().warmup_steps } -> std::convertible_to<int64_t>;
  { p.graph_options().emulate } -> std::convertible_to<bool>;
};

/// Optional for optimizers: the state tensors that follow the parameters
/// element by element, so a sharding Parallel policy can shard them.
template <class O>
concept HasElementwiseState = requires(const O& o) {
  { o.elementwise_state() } -> std::same_as<ElementwiseState>;
};

// ---- batch: what a task takes ----------------------------------------------
// Any copyable type trainkit can see tensors in: data::Batch, an aggregate
// struct of tensors (`struct TokenBatch { at::Tensor tokens, mask, targets;
// std::vector<int64_t> lengths; };`), std::tuple, std::pair, std::array,
// std::vector, std::optional, a string-keyed map of tensors, and nestings of
// these; values without tensors ride along. For anything else (a class with
// constructors, private members or bases), specialise the customization
// point trainkit::BatchTraits<B> (data/batch_traits.hpp):
//   template <> struct trainkit::BatchTraits<MyBatch> {
//     template <class F> static void for_each_tensor(MyBatch& b, F&& f);  // f(at::Tensor&)
//     static int64_t size(const MyBatch& b);  // optional: samples in the batch
//   };
template <class B>
concept TrainingBatch = std::copyable<B> && data::has_tensors<B>;

// ---- task: a batch in, a loss out -------------------------------------------
//   struct MyTask { StepOutput step(MyModel& model, const MyBatch& batch); };
// The model arrives as a ModelRef, which converts to the model's own type
// (holder or module class); `ModelRef&` itself suits one-tensor forwards.
template <class T, class B = data::Batch>
concept Task = requires(T& t, ModelRef& model, const B& batch) {
  { t.step(model, batch) } -> std::same_as<StepOutput>;
};

// ---- callbacks: any type with one or more hooks -----------------------------
// Each hook is `void NAME(TrainState&)`. A member that is *named* like a hook
// but cannot be called that way is a compile error, never silently ignored:
// the name is detected on its own (through an ambiguous-lookup probe that
// sees data members, overloads and templates alike), then the call is checked.
namespace detail::hooks {
template <class T, class Probe>
struct Mix : T, Probe {};
}  // namespace detail::hooks

/// The hooks, in the order a run first calls them: `X(member name, tag type)`.
/// The one list: the concepts below, Trainer's checks, the callback tests and
/// docs/callbacks.md's check are generated from it. A new hook is one entry
/// here plus its dispatch site in the trainer.
#define TRAINKIT_FOR_EACH_HOOK(X)           \
  X(on_fit_begin, OnFitBegin)               \
  X(on_epoch_begin, OnEpochBegin)           \
  X(on_before_step, OnBeforeStep)           \
  X(on_step_end, OnStepEnd)                 \
  X(on_validation_begin, OnValidationBegin) \
  X(on_validation_end, OnValidationEnd)     \
  X(on_epoch_end, OnEpochEnd)               \
  X(on_fit_end, OnFitEnd)                   \
  X(on_exception, OnException)

#define TRAINKIT_DEFINE_HOOK(name, Tag)                                           \
  namespace detail {                                                              \
  namespace hooks {                                                               \
  struct Probe_##name {                                                           \
    void name();                                                                  \
  };                                                                              \
  }                                                                               \
  template <class T>                                                              \
  concept Names##Tag = std::is_class_v<T> &&                                      \
                       (std::is_final_v<T> ? requires { &T::name; } : !requires { \
                         &hooks::Mix<T, hooks::Probe_##name>::name;               \
                       });                                                        \
  template <class T>                                                              \
  concept Has##Tag = requires(T & t, TrainState& s) {                             \
    t.name(s);                                                                    \
  };                                                                              \
  }                                                                               \
  /** The hook's tag: Trainer dispatches by it. */                                \
  struct Tag {                                                                    \
    template <class T>                                                            \
    static void call(T& t, TrainState& s) {                                       \
      if constexpr (detail::Has##Tag<T>) t.name(s);                               \
    }                                                                             \
    template <class T>                                                            \
    static constexpr bool named = detail::Names##Tag<T>;                          \
    template <class T>                                                            \
    static constexpr bool callable = detail::Has##Tag<T>;                         \
  };
TRAINKIT_FOR_EACH_HOOK(TRAINKIT_DEFINE_HOOK)
#undef TRAINKIT_DEFINE_HOOK

namespace detail {
template <class C, class Hook>
concept HookWellFormed = !Hook::template named<C> || Hook::template callable<C>;

// clang-format off
#define TRAINKIT_NAMES_HOOK(name, Tag) Tag::named<C> ||
template <class C>
concept NamesAnyHook = TRAINKIT_FOR_EACH_HOOK(TRAINKIT_NAMES_HOOK) false;
#undef TRAINKIT_NAMES_HOOK
// clang-format on
}  // namespace detail

// clang-format off
#define TRAINKIT_HOOK_WELL_FORMED(name, Tag) detail::HookWellFormed<C, Tag> &&
/// A callback: at least one hook, and every member named like a hook callable as one.
template <class C>
concept TrainerCallback =
    detail::NamesAnyHook<C> && TRAINKIT_FOR_EACH_HOOK(TRAINKIT_HOOK_WELL_FORMED) true;
#undef TRAINKIT_HOOK_WELL_FORMED
// clang-format on

// ---- training data: what fit trains on --------------------------------------
// Any range of a TrainingBatch (a std::vector<Batch>, data::TensorBatches,
// data::Loader, a std::vector<MyBatch>). Optional members, used when present:
//   int64_t size() const;                 // batches per epoch (run length, progress)
//   void set_epoch(int64_t epoch);        // a new order each epoch
//   void set_shard(int64_t rank, int64_t world_size);  // this rank's part (DDP)
//   void set_start(int64_t batch);        // resume mid-epoch without reading the skipped part
//   void set_start_sample(int64_t samples);  // go on after the samples all ranks took (a
//                                            // resume on another number of ranks)
template <class D>
concept TrainingData = requires(D& d) {
  std::begin(d);
  std::end(d);
}
&&TrainingBatch<batch_of_t<D>>;
template <class D>
concept HasSize = requires(D& d) {
  { d.size() } -> std::convertible_to<int64_t>;
};
template <class D>
concept HasSetEpoch = requires(D& d, int64_t epoch) {
  d.set_epoch(epoch);
};
template <class D>
concept HasSetStart = requires(D& d, int64_t batch) {
  d.set_start(batch);
};
template <class D>
concept HasSetStartSample = requires(D& d, int64_t samples) {
  d.set_start_sample(samples);
};

}  // namespace trainkit
