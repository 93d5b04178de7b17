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

/// The gradients `parallel`'s update reads: what its optional
/// `gradients(flat)` names (a shard under ZeRO-2), else all of `flat`.
template <class Parallel>
FlatParams& gradients_of(Parallel& parallel, FlatParams& flat) {
  if constexpr (requires { parallel.gradients(flat); }) return parallel.gradients(flat);
  return flat;
}

}  // namespace trainkit::parallel
