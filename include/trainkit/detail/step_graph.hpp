#pragma once
// The recorded step behind the Trainer's cuda_graph option: record a step
// body once, then replay it after new data was copied into its static
// buffers. On CUDA the body is captured into a CUDA graph (ATen's CUDAGraph)
// on a side stream, and a replay launches the whole step at once; with
// `emulate` the body is kept and run again on each replay, on any device.
#include <ATen/autocast_mode.h>
#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>

#include "trainkit/detail/compat.hpp"
#include "trainkit/error.hpp"

#if TRAINKIT_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trainkit::detail {

/// While alive, work on `device` (CUDA) goes to a side stream that first
/// waits for the caller's stream; at the end the caller's stream waits for
/// it. Graph warm-up and capture run on one, as PyTorch's documentation asks
/// (capture cannot use the legacy default stream). Nothing on other devices.
class SideStream {
 public:
  explicit SideStream([[maybe_unused]] const torch::Device& device) {
#if TRAINKIT_HAS_CUDA
    if (!device.is_cuda()) return;
    caller_.emplace(c10::cuda::getCurrentCUDAStream(device.index()));
    const auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
    at::cuda::CUDAEvent ready;
    ready.record(*caller_);
    ready.block(side);
    guard_.emplace(side);
#endif
  }
  ~SideStream() {
#if TRAINKIT_HAS_CUDA
    if (!guard_) return;
    const auto side = guard_->current_stream();
    guard_.reset();
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(*caller_);
#endif
  }
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

 private:
#if TRAINKIT_HAS_CUDA
  std::optional<c10::cuda::CUDAStream> caller_;
  std::optional<c10::cuda::CUDAStreamGuard> guard_;
#endif
};

class StepGraph {
 public:
  /// Records `body` without running it: captured into a CUDA graph on
  /// `device`, or kept to be run again when `emulate`. A body that cannot be
  /// captured (a host read, a synchronising call) throws here.
  void record(std::function<void()> body, [[maybe_unused]] const torch::Device& device,
              bool emulate) {
    if (emulate) {
      body_ = std::move(body);
      return;
    }
#if TRAINKIT_HAS_CUDA
    require_option(device.is_cuda(), "cuda_graph.enabled", true, "true only on a CUDA device");
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    {
      SideStream side(device);
      // Autocast's cache of cast weights would be freed behind the graph's
      // back when the outermost autocast region ends: PyTorch's graphs turn it off.
      const bool cache = at::autocast::is_autocast_cache_enabled();
      at::autocast::set_autocast_cache_enabled(false);
      try {
        graph->capture_begin();
        body();
        graph->capture_end();
      } catch (...) {
        at::autocast::set_autocast_cache_enabled(cache);
        try {
          graph->capture_end();  // leave the stream usable; the first error is the one to report
        } catch (...) {
        }
        throw;
      }
      at::autocast::set_autocast_cache_enabled(cache);
    }
    graph_ = std::move(graph);
#else
    throw Error("trainkit: cuda_graph: this build has no CUDA (TRAINKIT_HAS_CUDA is 0)");
#endif
  }

  bool recorded() const {
#if TRAINKIT_HAS_CUDA
    if (graph_) return true;
#endif
    return static_cast<bool>(body_);
  }

  /// Runs the recorded step once more, on what the static buffers hold now.
  void replay() {
    if (body_) return body_();
#if TRAINKIT_HAS_CUDA
    graph_->replay();
#endif
  }

 private:
  std::function<void()> body_;
#if TRAINKIT_HAS_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
#endif
};

}  // namespace trainkit::detail
