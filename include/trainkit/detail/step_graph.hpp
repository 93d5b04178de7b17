#pragma once
// The recorded step behind parallel::CudaGraph: record a step body once,
// then replay it after new data was copied into its static buffers. On CUDA
// the body is captured into a CUDA graph (ATen's CUDAGraph) on a side
// stream, and a replay launches the whole step at once; with `emulate` the
// body is kept and run again on each replay, on any device.
#include <ATen/autocast_mode.h>
#include <c10/util/ScopeExit.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/data/batch.hpp"
#include "trainkit/detail/compat.hpp"
#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"

#if TRAINKIT_HAS_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
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
    try {  // after a failed capture the side stream may refuse: the error in flight says why
      at::cuda::CUDAEvent done;
      done.record(side);
      done.block(*caller_);
    } catch (...) {
    }
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

/// While alive, a host synchronisation on CUDA (`.item()`, a blocking copy)
/// throws instead of waiting: the probe step before a capture runs under it,
/// so a step that reads the device fails there, where it can fall back,
/// rather than inside the capture, which cannot be undone.
class SyncIsError {
 public:
  explicit SyncIsError([[maybe_unused]] const torch::Device& device) {
#if TRAINKIT_HAS_CUDA
    if (!device.is_cuda()) return;
    previous_ = c10::cuda::warning_state().get_sync_debug_mode();
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
#endif
  }
  ~SyncIsError() {
#if TRAINKIT_HAS_CUDA
    if (previous_) c10::cuda::warning_state().set_sync_debug_mode(*previous_);
#endif
  }
  SyncIsError(const SyncIsError&) = delete;
  SyncIsError& operator=(const SyncIsError&) = delete;

 private:
#if TRAINKIT_HAS_CUDA
  std::optional<c10::cuda::SyncDebugMode> previous_;
#endif
};

class StepGraph {
 public:
  /// Records `body` without running it: captured into a CUDA graph on
  /// `device`, or kept to be run again when `emulate`. A failed capture
  /// throws trainkit::Error: it leaves the CUDA generator and the graph's
  /// memory pool mid-capture (PyTorch cannot undo that), so the run ends.
  void record(std::function<void()> body, [[maybe_unused]] const torch::Device& device,
              bool emulate) {
    if (emulate) {
      body_ = std::move(body);
      return;
    }
#if TRAINKIT_HAS_CUDA
    require_option(device.is_cuda(), "parallel.emulate", false,
                   "true where the device is not CUDA");
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    SideStream side(device);
    // Autocast's cache of cast weights would be freed behind the graph's
    // back when the outermost autocast region ends: PyTorch's graphs turn it off.
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    const auto restore =
        c10::make_scope_exit([cache] { at::autocast::set_autocast_cache_enabled(cache); });
    try {
      // Thread-local: the loader's worker threads pin memory meanwhile, which
      // the global mode forbids; the autograd thread's kernels on the
      // capturing stream are still captured.
      graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      body();
      graph->capture_end();
    } catch (const std::exception& e) {
      try {
        graph->capture_end();  // ends capture mode on the stream, if it can
      } catch (...) {
      }
      throw Error(std::string("trainkit: parallel::CudaGraph: capturing the step failed after a "
                              "clean probe step, and a failed capture cannot be undone on this "
                              "device; train this model with parallel::Single. The error: ") +
                  e.what());
    }
    graph_ = std::move(graph);
#else
    throw Error("trainkit: parallel::CudaGraph: this build has no CUDA (TRAINKIT_HAS_CUDA is 0)");
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

/// The shapes and dtypes of a window's batches: a graph replays only the
/// window shapes it was recorded for, and warms up per shape.
struct WindowShapes {
  std::vector<std::vector<int64_t>> sizes;
  std::vector<at::ScalarType> types;

  static WindowShapes of(const std::vector<data::Batch>& window);
  /// Whether `window` has these shapes (no allocation).
  bool match(const std::vector<data::Batch>& window) const;
};

/// A Trainer's captured-step state for one fit (parallel::CudaGraph).
struct GraphRun {
  StepGraph graph;
  WindowShapes recorded;            ///< the shapes the graph was recorded for
  std::vector<data::Batch> inputs;  ///< static buffers, one per micro-batch
  std::vector<at::Tensor> losses;   ///< written by each replay
  std::vector<int64_t> batch_sizes;
  at::Tensor grad_norm;    ///< clip's pre-clip norm, written by each replay
  WindowShapes warming;    ///< the shapes of the last eager windows
  int64_t warm_steps = 0;  ///< consecutive eager windows of those shapes
  int64_t replays = 0;
  double momentum = 0;  ///< the optimizer's momentum (beta1) the graph holds
  std::string blocker;  ///< why steps stay eager, or ""

  bool can_replay(const std::vector<data::Batch>& window) const {
    return graph.recorded() && recorded.match(window);
  }
  /// An eager step of `window` ran: one more warm-up step for its shapes.
  void note_eager(const std::vector<data::Batch>& window) {
    if (warm_steps > 0 && warming.match(window)) {
      ++warm_steps;
    } else {
      warming = WindowShapes::of(window);
      warm_steps = 1;
    }
  }
  /// Copies `window` into the static buffers (non-blocking from pinned memory).
  void load(const std::vector<data::Batch>& window) {
    for (size_t k = 0; k < window.size(); ++k) {
      inputs[k].input.copy_(window[k].input, /*non_blocking=*/true);
      inputs[k].target.copy_(window[k].target, /*non_blocking=*/true);
    }
  }
};

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE WindowShapes WindowShapes::of(const std::vector<data::Batch>& window) {
  WindowShapes s;
  for (const auto& b : window) {
    for (const auto* t : {&b.input, &b.target}) {
      s.sizes.emplace_back(t->sizes().begin(), t->sizes().end());
      s.types.push_back(t->scalar_type());
    }
  }
  return s;
}

TRAINKIT_INLINE bool WindowShapes::match(const std::vector<data::Batch>& window) const {
  if (sizes.size() != 2 * window.size()) return false;
  size_t i = 0;
  for (const auto& b : window) {
    for (const auto* t : {&b.input, &b.target}) {
      if (t->sizes() != c10::IntArrayRef(sizes[i]) || t->scalar_type() != types[i]) return false;
      ++i;
    }
  }
  return true;
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::detail
