#pragma once
// The policies' names, and the run's configuration as the Trainer reports
// it (TrainState::config): the policies by role, the learning rate, the run's length, the device
// and its settings. Reports, loggers and hyperparameter records read it.
#include <c10/util/Type.h>

#include <array>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "trainkit/concepts.hpp"
#include "trainkit/detail/linkage.hpp"
#include "trainkit/device_options.hpp"
#include "trainkit/policy_roles.hpp"
#include "trainkit/state.hpp"
#include "trainkit/trainer/detail/checkpoint_parts.hpp"

namespace trainkit::detail {

/// A policy's name in checkpoints and reports: the stable name it declares,
/// else its C++ type as the compiler spells it.
template <class P>
std::string policy_name() {
  if constexpr (HasStableName<P>) {
    return std::string(P::stable_name(std::type_identity<P>{}));
  } else {
    return c10::demangle_type<P>();
  }
}

/// The names of a Trainer's policies (the tuple `Policies`), in the roles' order.
using PolicyNames = std::array<std::string, kPolicyCount>;
template <class Policies>
PolicyNames policy_names() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return PolicyNames{policy_name<std::tuple_element_t<I, Policies>>()...};
  }
  (std::make_index_sequence<kPolicyCount>{});
}

/// "Trainer<...>" of the roles a checkpoint holds state of: which policies wrote it.
template <class Policies>
std::string policy_signature() {
  const auto names = policy_names<Policies>();
  return trainer_signature(std::span(names).template first<kCheckpointedRoles>());
}

/// What a run's description says besides the policies' names.
struct RunFacts {
  double base_lr;
  int64_t accumulation_steps;
  int64_t epochs, log_every, max_steps;
  int world_size;
  std::string device;
  int64_t parameters;
  DeviceSettings device_settings;
};

/// Writes the configuration into `state.config`: `names[i]` under `roles[i]`.
TRAINKIT_INLINE void describe_run(TrainState& state, std::span<const char* const> roles,
                                  std::span<const std::string> names, const RunFacts& facts);

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE void describe_run(TrainState& state, std::span<const char* const> roles,
                                  std::span<const std::string> names, const RunFacts& facts) {
  auto& c = state.config;
  c["trainer"] = trainer_signature(names);
  for (size_t i = 0; i < names.size(); ++i) c[roles[i]] = names[i];
  std::ostringstream lr;
  lr << facts.base_lr;
  c["lr"] = lr.str();
  c["accumulation_steps"] = std::to_string(facts.accumulation_steps);
  c["epochs"] = std::to_string(facts.epochs);
  c["log_every"] = std::to_string(facts.log_every);
  c["max_steps"] = std::to_string(facts.max_steps);
  c["steps_per_epoch"] = std::to_string(state.steps_per_epoch);
  c["world_size"] = std::to_string(facts.world_size);
  c["device"] = facts.device;
  c["parameters"] = std::to_string(facts.parameters);
  const auto on_off = [](bool b) { return std::string(b ? "on" : "off"); };
  c["tf32_matmul"] = on_off(facts.device_settings.tf32_matmul);
  c["tf32_cudnn"] = on_off(facts.device_settings.tf32_cudnn);
  c["cudnn_benchmark"] = on_off(facts.device_settings.cudnn_benchmark);
  c["channels_last"] = on_off(facts.device_settings.channels_last);
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
