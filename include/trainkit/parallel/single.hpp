#pragma once
// parallel::Single: one process, one device (CUDA when available, else CPU,
// unless `device` says otherwise). The one-rank case of the Parallel
// interface: nothing to synchronise, every collective is the identity.
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <type_traits>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/detail/scope.hpp"
#include "trainkit/params.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::parallel {

class Single {
 public:
  static constexpr const char* stable_name(std::type_identity<Single>) {
    return "trainkit::parallel::Single";
  }
  struct Options {
    std::optional<torch::Device> device{};
  };
  Single() : Single(Options{}) {}
  explicit Single(const Options& o)
      : device_(o.device.value_or(torch::cuda::is_available() ? torch::Device(torch::kCUDA)
                                                              : torch::Device(torch::kCPU))) {}

  torch::Device device() const { return device_; }
  void prepare(torch::nn::Module& model) { model.to(device_); }
  FlatParams& attach(FlatParams& params) { return params; }

  detail::NoScope defer_sync() { return {}; }
  void finish_sync(FlatParams&) {}
  void after_step(FlatParams&) {}

  int rank() const { return 0; }
  int world_size() const { return 1; }
  bool is_main() const { return true; }

  std::vector<double> sum(std::vector<double> values, const std::string&) { return values; }
  int64_t max(int64_t value, const std::string&) { return value; }
  std::vector<std::string> all_gather(const std::string& mine, const std::string&) {
    return {mine};
  }
  void barrier(const std::string&) {}
  void check_same(const std::string&, const std::string&) {}

  StateDict gather_optimizer_state(StateDict local, const ElementwiseState&) { return local; }
  StateDict shard_optimizer_state(const StateDict& full, const ElementwiseState&) const {
    return full;
  }

 private:
  torch::Device device_;
};

/// The sharding unit of each parameter, for FlatParams: what `parallel`'s
/// optional `unit_of()` gives (full sharding), else none.
template <class Parallel>
FlatParams::UnitOf units_of(const Parallel& parallel) {
  if constexpr (requires { parallel.unit_of(); }) {
    return parallel.unit_of();
  } else {
    return nullptr;
  }
}

/// Open around a forward and its backward: full sharding gathers the
/// parameters no unit holds for that long; other policies do nothing.
template <class Parallel>
auto forward_scope(Parallel& parallel) {
  if constexpr (requires { parallel.forward_scope(); }) {
    return parallel.forward_scope();
  } else {
    return detail::NoScope{};
  }
}

/// Whole parameters for the scope's length (a collective under full
/// sharding, which alone holds them in shards at rest).
template <class Parallel>
auto gathered_parameters(Parallel& parallel) {
  if constexpr (requires { parallel.gather_parameters(); }) {
    return parallel.gather_parameters();
  } else {
    return detail::NoScope{};
  }
}

/// The flat parameters `parallel`'s optimizer updates: its optional
/// `shard()` (ZeRO and full sharding), else all of `flat`.
template <class Parallel>
FlatParams& optimized_params(Parallel& parallel, FlatParams& flat) {
  if constexpr (requires { parallel.shard(); }) return parallel.shard();
  return flat;
}
/// Which part of each flat group optimized_params holds: its optional
/// `held_share()`, else all.
template <class Parallel>
GroupShare held_share(const Parallel& parallel) {
  if constexpr (requires { parallel.held_share(); }) return parallel.held_share();
  return {};
}
/// Which part of what it holds the rank writes to a sharded checkpoint (the
/// ranks that hold the same write a part each): its optional
/// `written_share()`, else all.
template <class Parallel>
GroupShare written_share(const Parallel& parallel) {
  if constexpr (requires { parallel.written_share(); }) return parallel.written_share();
  return {};
}
/// Whether checkpoints are sharded unless asked otherwise: `Parallel`'s
/// optional kShardedCheckpoints (ZeRO-2 and full sharding).
template <class Parallel>
constexpr bool sharded_checkpoints_by_default() {
  if constexpr (requires { Parallel::kShardedCheckpoints; }) return Parallel::kShardedCheckpoints;
  return false;
}

/// The gradients `parallel`'s update reads: what its optional
/// `gradients(flat)` names (a shard under ZeRO-2), else all of `flat`.
template <class Parallel>
FlatParams& gradients_of(Parallel& parallel, FlatParams& flat) {
  if constexpr (requires { parallel.gradients(flat); }) return parallel.gradients(flat);
  return flat;
}

}  // namespace trainkit::parallel
