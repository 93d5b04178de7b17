// Compile-time checks of the contracts: every ready policy satisfies its
// family concept, and near-misses do not.
#include <trainkit/trainkit.hpp>

using namespace trainkit;

static_assert(OptimizerPolicy<optim::SGD>);
static_assert(OptimizerPolicy<optim::Adam>);
static_assert(OptimizerPolicy<optim::AdamW>);
static_assert(OptimizerPolicy<optim::Wrap<torch::optim::RMSprop>>);
static_assert(HasSetMomentum<optim::AdamW> && HasSetMomentum<optim::SGD>);
static_assert(!HasSetMomentum<optim::Wrap<torch::optim::Adagrad>>);
static_assert(SchedulerPolicy<sched::Constant> && SchedulerPolicy<sched::Step> &&
              SchedulerPolicy<sched::MultiStep> && SchedulerPolicy<sched::Exponential> &&
              SchedulerPolicy<sched::Cosine> && SchedulerPolicy<sched::WarmupCosine> &&
              SchedulerPolicy<sched::OneCycle> && SchedulerPolicy<sched::Linear>);
static_assert(HasMomentumAt<sched::OneCycle> && !HasMomentumAt<sched::Cosine>);
static_assert(PrecisionPolicy<precision::Fp32> && PrecisionPolicy<precision::Bf16> &&
              PrecisionPolicy<precision::Fp16>);
static_assert(HasLossScale<precision::Fp16> && !HasLossScale<precision::Fp32>);
static_assert(AccumulatePolicy<accumulate::None> && AccumulatePolicy<accumulate::Every<4>> &&
              AccumulatePolicy<accumulate::Steps>);
static_assert(ClipPolicy<clip::None> && ClipPolicy<clip::Norm> && ClipPolicy<clip::Value>);
static_assert(HasLastNorm<clip::Norm> && !HasLastNorm<clip::Value>);
static_assert(ParallelPolicy<parallel::Single>);
static_assert(Task<task::Classification> && Task<task::Regression>);
// the training-data protocol: ranges of batches, with optional members
static_assert(TrainingData<std::vector<data::Batch>> && TrainingData<data::TensorBatches> &&
              HasSize<data::TensorBatches> && !TrainingData<std::vector<int>>);
static_assert(TrainerCallback<callbacks::EarlyStopping> &&
              TrainerCallback<callbacks::ProgressBar> && TrainerCallback<callbacks::CsvLogger>);

namespace near_misses {
struct NoStep {
  struct Options {};
  NoStep(FlatParams&, const Options&) {}
  double lr() const { return 0; }
  void set_lr(double) {}
};
static_assert(!OptimizerPolicy<NoStep> && !trainkit::detail::HasStep<NoStep> &&
              trainkit::detail::HasLr<NoStep>);

struct NoOptions {
  explicit NoOptions(int) {}
  double lr_at(int64_t) const { return 0; }
};
static_assert(!SchedulerPolicy<NoOptions> && !trainkit::detail::HasOptions<NoOptions> &&
              trainkit::detail::HasLrAt<NoOptions>);

struct GoodHook {
  void on_step_end(TrainState&) {}
};
struct ConstStateHook {
  void on_epoch_end(const TrainState&) const {}
};
struct WrongArity {
  void on_step_end() {}
};
struct TemplateHook {
  template <class T>
  void on_fit_end(T&, int) {}
};
struct DataMember {
  int on_epoch_begin = 0;
};
struct Unrelated {
  void step() {}
};
static_assert(TrainerCallback<GoodHook> && TrainerCallback<ConstStateHook>);
// named like a hook but not callable as one: detected, then rejected
static_assert(trainkit::detail::NamesOnStepEnd<WrongArity> &&
              !trainkit::detail::HasOnStepEnd<WrongArity> && !TrainerCallback<WrongArity>);
static_assert(trainkit::detail::NamesOnFitEnd<TemplateHook> && !TrainerCallback<TemplateHook>);
static_assert(trainkit::detail::NamesOnEpochBegin<DataMember> && !TrainerCallback<DataMember>);
static_assert(!trainkit::detail::NamesAnyHook<Unrelated> && !TrainerCallback<Unrelated>);
}  // namespace near_misses

// Every hook of the one list, both ways: a callback with only that hook is
// one; a callback whose every other hook is good but whose this one is
// malformed is not.
namespace every_hook {
struct AllGood {
#define TRAINKIT_GOOD_HOOK(name, Tag) \
  void name(TrainState&) {}
  TRAINKIT_FOR_EACH_HOOK(TRAINKIT_GOOD_HOOK)
#undef TRAINKIT_GOOD_HOOK
};
#define TRAINKIT_CHECK_HOOK(name, Tag)                                             \
  struct Only_##name {                                                             \
    void name(TrainState&) {}                                                      \
  };                                                                               \
  struct Malformed_##name : AllGood {                                              \
    void name(int) {}                                                              \
  };                                                                               \
  static_assert(TrainerCallback<Only_##name> && Tag::callable<Only_##name>);       \
  static_assert(Tag::named<Malformed_##name> && !Tag::callable<Malformed_##name>); \
  static_assert(!TrainerCallback<Malformed_##name>, "malformed " #name " accepted");
TRAINKIT_FOR_EACH_HOOK(TRAINKIT_CHECK_HOOK)
#undef TRAINKIT_CHECK_HOOK
}  // namespace every_hook

// TrainerWith: each policy in its family's place, defaults elsewhere.
static_assert(std::is_same_v<TrainerWith<clip::Norm>,
                             Trainer<optim::AdamW, sched::Constant, precision::Fp32,
                                     accumulate::None, clip::Norm, parallel::Single>>);
static_assert(
    std::is_same_v<TrainerWith<sched::OneCycle, optim::SGD, accumulate::Every<4>>,
                   Trainer<optim::SGD, sched::OneCycle, precision::Fp32, accumulate::Every<4>>>);
static_assert(std::is_same_v<TrainerWith<>, Trainer<>>);

// A stable name belongs to the type that declares it, not to types derived from it.
namespace derived_policy {
struct MyClip : clip::Norm {
  using clip::Norm::Norm;
};
static_assert(HasStableName<clip::Norm> && !HasStableName<MyClip>);
}  // namespace derived_policy
