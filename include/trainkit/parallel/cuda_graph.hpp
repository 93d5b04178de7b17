#pragma once
// parallel::CudaGraph: one device, as parallel::Single, with the whole
// optimizer step captured as one CUDA graph and replayed (docs/design.md,
// "Captured steps"). A policy rather than a run-time switch, so a Trainer
// that does not capture compiles none of the capture code.
#include <cstdint>
#include <optional>
#include <type_traits>

#include "trainkit/error.hpp"
#include "trainkit/parallel/single.hpp"

namespace trainkit::parallel {

class CudaGraph : public Single {
 public:
  static constexpr const char* stable_name(std::type_identity<CudaGraph>) {
    return "trainkit::parallel::CudaGraph";
  }
  struct Options {
    std::optional<torch::Device> device{};  ///< as Single's
    /// Eager steps of a window's shapes before it is captured: lazy state
    /// (cuBLAS handles, cuDNN's autotuned plans, optimizer moments) must
    /// exist first.
    int64_t warmup_steps = 3;
    /// Replay by running the recorded step again instead of a graph, on any
    /// device: the captured path's data flow without a GPU (tests).
    bool emulate = false;
  };
  CudaGraph() : CudaGraph(Options{}) {}
  explicit CudaGraph(const Options& o) : Single(Single::Options{o.device}), options_(o) {
    detail::require_option(o.warmup_steps >= 1, "parallel.warmup_steps", o.warmup_steps,
                           "a number of eager steps >= 1");
  }
  const Options& graph_options() const { return options_; }

 private:
  Options options_;
};

}  // namespace trainkit::parallel
