#pragma once
// TrainerWith<P...>: a Trainer that changes only the policies named, each
// placed by the family it belongs to; the others keep Trainer's defaults.
//   TrainerWith<clip::Norm>                  == Trainer<optim::AdamW, sched::Constant,
//                                                       precision::Fp32, accumulate::None,
//                                                       clip::Norm, parallel::Single>
//   TrainerWith<optim::SGD, sched::OneCycle> == Trainer<optim::SGD, sched::OneCycle>
#include <type_traits>

#include "trainkit/concepts.hpp"
#include "trainkit/trainer.hpp"

namespace trainkit {

namespace detail {
/// Trainer's parameter position of a policy's family (-1: none).
template <class P>
constexpr int family_of() {
  if constexpr (OptimizerPolicy<P>)
    return 0;
  else if constexpr (SchedulerPolicy<P>)
    return 1;
  else if constexpr (PrecisionPolicy<P>)
    return 2;
  else if constexpr (AccumulatePolicy<P>)
    return 3;
  else if constexpr (ClipPolicy<P>)
    return 4;
  else if constexpr (ParallelPolicy<P>)
    return 5;
  else
    return -1;
}

/// The first of `Ps` whose family is `Family`, else `Default`.
template <int Family, class Default, class... Ps>
struct pick {
  using type = Default;
};
template <int Family, class Default, class P, class... Ps>
struct pick<Family, Default, P, Ps...> {
  using type =
      std::conditional_t<family_of<P>() == Family, P, typename pick<Family, Default, Ps...>::type>;
};

/// How many of `Ps` belong to family `Family`.
template <int Family, class... Ps>
constexpr int family_count = ((family_of<Ps>() == Family) + ... + 0);

template <class... Ps>
constexpr bool check_trainer_with() {
  static_assert(((family_of<Ps>() >= 0) && ...),
                "TrainerWith<P...>: each P must be a policy of one family (optimizer, scheduler, "
                "precision, accumulate, clip, parallel); see docs/policies.md");
  static_assert(((family_count<family_of<Ps>(), Ps...> == 1) && ...),
                "TrainerWith<P...>: two policies of the same family");
  return true;
}

template <class... Ps>
struct trainer_with {
  static_assert(check_trainer_with<Ps...>());
  using type = Trainer<
      typename pick<0, optim::AdamW, Ps...>::type, typename pick<1, sched::Constant, Ps...>::type,
      typename pick<2, precision::Fp32, Ps...>::type,
      typename pick<3, accumulate::None, Ps...>::type, typename pick<4, clip::None, Ps...>::type,
      typename pick<5, parallel::Single, Ps...>::type>;
};
}  // namespace detail

template <class... Policies>
using TrainerWith = typename detail::trainer_with<Policies...>::type;

}  // namespace trainkit
