#pragma once
// TrainerWith<P...>: a Trainer that changes only the policies named, each
// placed by the role it plays (detail::PolicyRoles); the others keep Trainer's defaults.
//   TrainerWith<clip::Norm>                  == Trainer<optim::AdamW, sched::Constant,
//                                                       precision::Fp32, accumulate::None,
//                                                       clip::Norm, parallel::Single,
//                                                       capture::None>
//   TrainerWith<optim::SGD, sched::OneCycle> == Trainer<optim::SGD, sched::OneCycle>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "trainkit/policy_roles.hpp"
#include "trainkit/trainer.hpp"

namespace trainkit {

namespace detail {
/// The first of `Ps` that plays role `Role`, else the role's default.
template <int Role, class... Ps>
struct pick {
  using type = default_policy_t<Role>;
};
template <int Role, class P, class... Ps>
struct pick<Role, P, Ps...> {
  using type = std::conditional_t<role_of<P>() == Role, P, typename pick<Role, Ps...>::type>;
};

/// How many of `Ps` play role `Role`.
template <int Role, class... Ps>
constexpr int role_count = ((role_of<Ps>() == Role) + ... + 0);

template <class... Ps>
constexpr bool check_trainer_with() {
  static_assert(((role_of<Ps>() >= 0) && ...),
                "TrainerWith<P...>: each P must be a policy of one of the roles "
                "(policy_roles.hpp; docs/policies.md)");
  static_assert(((role_count<role_of<Ps>(), Ps...> == 1) && ...),
                "TrainerWith<P...>: two policies of the same role");
  return true;
}

/// The Trainer with, in each role, its pick (declared only: used in decltype).
template <class... Ps, std::size_t... Role>
auto trainer_picking(std::index_sequence<Role...>)
    -> Trainer<typename pick<int(Role), Ps...>::type...>;

template <class... Ps>
struct trainer_with {
  static_assert(check_trainer_with<Ps...>());
  using type = decltype(trainer_picking<Ps...>(std::make_index_sequence<kPolicyCount>{}));
};
}  // namespace detail

template <class... Policies>
using TrainerWith = typename detail::trainer_with<Policies...>::type;

}  // namespace trainkit
