#pragma once
// parallel::unit(module, forward): runs `forward` as the forward of one
// sharding unit. Under parallel::FullShard a unit's parameters are sharded
// across the ranks between uses and gathered for its forward and its
// backward; LibTorch's C++ modules have no forward hooks, so this call is
// where a unit says it starts. Under any other policy, or outside a
// Trainer, or for a module the wrap rule did not make a unit, it calls
// `forward()` and nothing else: a model written with it trains anywhere.
//   for (const auto& block : *h)
//     x = parallel::unit(block, [&] { return block->as<BlockImpl>()->forward(x, mask); });
// With activation checkpointing, checkpoint inside the unit:
//   x = parallel::unit(block, [&] { return memory::checkpoint(fn, x); });
#include <torch/nn/module.h>

#include <atomic>
#include <type_traits>
#include <vector>

#include "trainkit/data/batch_traits.hpp"

namespace trainkit::parallel {

/// What a sharding policy does around a unit's forward (FullShard is one).
class UnitRunner {
 public:
  virtual ~UnitRunner() = default;
  /// Before `module`'s forward: its parameters gathered.
  virtual void enter(const torch::nn::Module& module) = 0;
  /// After it, with the tensors it returned (hooks for their backward).
  virtual void leave(const torch::nn::Module& module, std::vector<at::Tensor>& outputs) = 0;
};

}  // namespace trainkit::parallel

namespace trainkit::detail {
/// The sharding policy whose model trains now: one per process (a backward
/// may run on autograd's own thread, so not per thread).
inline std::atomic<parallel::UnitRunner*>& active_unit_runner() {
  static std::atomic<parallel::UnitRunner*> runner{nullptr};
  return runner;
}
template <class M>
const torch::nn::Module& unit_module(const M& m) {
  if constexpr (std::is_base_of_v<torch::nn::Module, M>) {
    return m;
  } else {
    return *m;  // a holder, a shared_ptr or a pointer
  }
}
}  // namespace trainkit::detail

namespace trainkit::parallel {

/// `forward()`, as the forward of the unit `module` (a module, its holder or a pointer).
template <class M, class Forward>
auto unit(const M& module, Forward&& forward) {
  auto* runner = trainkit::detail::active_unit_runner().load();
  if (runner == nullptr) return forward();
  const auto& m = trainkit::detail::unit_module(module);
  runner->enter(m);
  auto out = forward();
  std::vector<at::Tensor> tensors;
  auto collect = [&](const at::Tensor& t) { tensors.push_back(t); };
  trainkit::detail::batch::for_each_tensor(out, collect);
  runner->leave(m, tensors);
  return out;
}

}  // namespace trainkit::parallel
