#pragma once
// parallel::CudaGraph: the older spelling of parallel::Single with
// capture::CudaGraph (one device, whole steps captured; docs/design.md,
// "Captured steps"). The Trainer recognises it and runs the same capture
// code; its checkpoints still name it, so they resume as before.
#include <cstdint>
#include <optional>
#include <type_traits>

#include "trainkit/capture/cuda_graph.hpp"
#include "trainkit/parallel/single.hpp"

namespace trainkit::parallel {

class CudaGraph : public Single {
 public:
  static constexpr const char* stable_name(std::type_identity<CudaGraph>) {
    return "trainkit::parallel::CudaGraph";
  }
  struct Options {
    std::optional<torch::Device> device{};  ///< as Single's
    int64_t warmup_steps = 3;               ///< as capture::CudaGraph's
    bool emulate = false;                   ///< as capture::CudaGraph's
  };
  CudaGraph() : CudaGraph(Options{}) {}
  explicit CudaGraph(const Options& o)
      : Single(Single::Options{o.device}), capture_({o.warmup_steps, o.emulate}, "parallel") {}
  const capture::CudaGraph::Options& graph_options() const { return capture_.graph_options(); }

 private:
  capture::CudaGraph capture_;
};

}  // namespace trainkit::parallel
