#pragma once
// capture::CudaGraph: the whole step (forward, backward, gradient sync, clip,
// optimizer step) recorded once as a CUDA graph and replayed, with any
// Parallel policy: under parallel::DDP or ZeroSharded the collectives are
// recorded in the graph too (NCCL). docs/design.md, "Captured steps".
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "trainkit/error.hpp"

namespace trainkit::capture {

class CudaGraph {
 public:
  static constexpr const char* stable_name(std::type_identity<CudaGraph>) {
    return "trainkit::capture::CudaGraph";
  }
  struct Options {
    /// Eager steps of a window's shapes before it is captured: lazy state
    /// (cuBLAS handles, cuDNN's autotuned plans, optimizer moments,
    /// communicators) must exist first.
    int64_t warmup_steps = 3;
    /// Replay by running the recorded step again instead of a graph, on any
    /// device: the captured path's data flow without a GPU (tests).
    bool emulate = false;
  };
  static constexpr bool records = true;
  CudaGraph() : CudaGraph(Options{}) {}
  explicit CudaGraph(const Options& o) : options_(o) {
    detail::require_option(o.warmup_steps >= 1, "capture.warmup_steps", o.warmup_steps,
                           "a number of eager steps >= 1");
  }
  const Options& graph_options() const { return options_; }

 private:
  Options options_;
};

}  // namespace trainkit::capture
