#pragma once
// The Trainer's policy roles, listed once, in template order: each with its
// name (reports, a run's configuration), its default, the concept its
// policies satisfy, its check (a sentence per missing member) and whether a
// checkpoint's signature names it. Trainer's defaults, its policies' names and TrainerWith's
// placement are derived from this list; the docs' tables are tested against it.
#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "trainkit/accumulate/none.hpp"
#include "trainkit/capture/none.hpp"
#include "trainkit/clip/none.hpp"
#include "trainkit/concepts.hpp"
#include "trainkit/optim/adamw.hpp"
#include "trainkit/parallel/single.hpp"
#include "trainkit/precision/fp32.hpp"
#include "trainkit/sched/constant.hpp"
#include "trainkit/trainer/detail/policy_checks.hpp"

namespace trainkit::detail {

// A role: its name, its default, the concept its policies satisfy, the
// check that names what a policy lacks, and whether checkpoints name it.
#define TRAINKIT_POLICY_ROLE(Role, Name, DefaultPolicy, Concept, checker, Checkpointed) \
  struct Role {                                                                         \
    static constexpr const char* name = Name;                                           \
    using Default = DefaultPolicy;                                                      \
    template <class P>                                                                  \
    static constexpr bool accepts = Concept<P>;                                         \
    template <class P>                                                                  \
    static constexpr bool check() {                                                     \
      return checker<P>();                                                              \
    }                                                                                   \
    static constexpr bool checkpointed = Checkpointed;                                  \
  };

TRAINKIT_POLICY_ROLE(OptimizerRole, "optimizer", optim::AdamW, OptimizerPolicy, check_optimizer,
                     true)
TRAINKIT_POLICY_ROLE(SchedulerRole, "scheduler", sched::Constant, SchedulerPolicy, check_scheduler,
                     true)
TRAINKIT_POLICY_ROLE(PrecisionRole, "precision", precision::Fp32, PrecisionPolicy, check_precision,
                     true)
TRAINKIT_POLICY_ROLE(AccumulateRole, "accumulate", accumulate::None, AccumulatePolicy,
                     check_accumulate, true)
TRAINKIT_POLICY_ROLE(ClipRole, "clip", clip::None, ClipPolicy, check_clip, true)
TRAINKIT_POLICY_ROLE(ParallelRole, "parallel", parallel::Single, ParallelPolicy, check_parallel,
                     true)
// Whether steps are recorded: the same state either way, so captured and
// eager runs resume from each other's checkpoints.
TRAINKIT_POLICY_ROLE(CaptureRole, "capture", capture::None, CapturePolicy, check_capture, false)
#undef TRAINKIT_POLICY_ROLE

/// The roles in Trainer's template order.
using PolicyRoles = std::tuple<OptimizerRole, SchedulerRole, PrecisionRole, AccumulateRole,
                               ClipRole, ParallelRole, CaptureRole>;
inline constexpr std::size_t kPolicyCount = std::tuple_size_v<PolicyRoles>;
template <std::size_t I>
using role_t = std::tuple_element_t<I, PolicyRoles>;
template <std::size_t I>
using default_policy_t = typename role_t<I>::Default;

/// The roles' names, in template order.
inline constexpr std::array<const char*, kPolicyCount> kPolicyRoles =
    []<std::size_t... I>(std::index_sequence<I...>) {
  return std::array<const char*, kPolicyCount>{role_t<I>::name...};
}
(std::make_index_sequence<kPolicyCount>{});

/// How many roles a checkpoint's signature names: the first ones.
inline constexpr std::size_t kCheckpointedRoles = []<std::size_t... I>(std::index_sequence<I...>) {
  return (std::size_t{role_t<I>::checkpointed} + ...);
}
(std::make_index_sequence<kPolicyCount>{});
static_assert(
    []<std::size_t... I>(std::index_sequence<I...>) {
      return ((role_t<I>::checkpointed == (I < kCheckpointedRoles)) && ...);
    }(std::make_index_sequence<kPolicyCount>{}),
    "the checkpointed roles come first");

/// Each policy of the tuple `Policies` checked against its role: a missing
/// member fails with a sentence naming it (trainer/detail/policy_checks.hpp).
template <class Policies>
constexpr bool check_policies() {
  static_assert(std::tuple_size_v<Policies> == kPolicyCount);
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (role_t<I>::template check<std::tuple_element_t<I, Policies>>() && ...);
  }
  (std::make_index_sequence<kPolicyCount>{});
}

/// The Parallel role's place among the roles (and in a checkpoint's signature).
inline constexpr std::size_t kParallelRole = 5;
static_assert(std::is_same_v<role_t<kParallelRole>, ParallelRole>);

/// The position of the first role `P` plays, or -1 for none.
template <class P>
constexpr int role_of() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    int found = -1;
    ((found < 0 && role_t<I>::template accepts<P> ? found = int(I) : 0), ...);
    return found;
  }
  (std::make_index_sequence<kPolicyCount>{});
}

}  // namespace trainkit::detail
