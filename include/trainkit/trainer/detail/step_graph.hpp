#pragma once
// The recorded step behind capture::CudaGraph: record a step body once,
// then replay it after new data was copied into its static buffers. On CUDA
// the body is captured into a CUDA graph (ATen's CUDAGraph) on a side
// stream, and a replay launches the whole step at once; with `emulate` the
// body is kept and run again on each replay, on any device.
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <c10/util/ScopeExit.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "trainkit/data/batch_traits.hpp"
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

/// Thrown in a step run under HostSyncTrap where PyTorch reports a host
/// synchronisation: the kind of error the probe falls back on.
class HostSync : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// While alive, a host synchronisation on CUDA (`.item()`, a blocking copy)
/// throws HostSync instead of waiting: the probe step before a capture runs
/// under it, so a step that reads the device fails there, where it can fall
/// back, rather than inside the capture, which cannot be undone. PyTorch
/// reports a synchronisation by a warning from one function in its sync
/// debug mode (c10::cuda::warn_or_error_on_sync); this handler turns that
/// report, and no other warning, into HostSync, which the probe catches by
/// type. Other warnings go on to the handler that was installed.
class HostSyncTrap
#if TRAINKIT_HAS_CUDA
    : c10::WarningHandler
#endif
{
 public:
  explicit HostSyncTrap([[maybe_unused]] const torch::Device& device) {
#if TRAINKIT_HAS_CUDA
    if (!device.is_cuda()) return;
    next_ = c10::WarningUtils::get_warning_handler();
    previous_mode_ = c10::cuda::warning_state().get_sync_debug_mode();
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
    c10::WarningUtils::set_warning_handler(static_cast<c10::WarningHandler*>(this));
#endif
  }
  ~HostSyncTrap() {
#if TRAINKIT_HAS_CUDA
    if (!previous_mode_) return;
    c10::WarningUtils::set_warning_handler(next_);
    c10::cuda::warning_state().set_sync_debug_mode(*previous_mode_);
#endif
  }
  HostSyncTrap(const HostSyncTrap&) = delete;
  HostSyncTrap& operator=(const HostSyncTrap&) = delete;

 private:
#if TRAINKIT_HAS_CUDA
  void process(const c10::Warning& warning) override {
    if (std::string_view(warning.source_location().function) == "warn_or_error_on_sync")
      throw HostSync(warning.msg());
    next_->process(warning);
  }
  c10::WarningHandler* next_ = nullptr;
  std::optional<c10::cuda::SyncDebugMode> previous_mode_;  ///< set when installed
#endif
};

class StepGraph {
 public:
  /// Records `body` without running it: captured into a CUDA graph on
  /// `device`, or kept to be run again when `emulate`. A failed capture
  /// throws trainkit::Error: it leaves the CUDA generator and the graph's
  /// memory pool mid-capture (PyTorch cannot undo that), so the run ends.
  void record(std::function<void()> body, [[maybe_unused]] const torch::Device& device,
              bool emulate, [[maybe_unused]] const char* emulate_option) {
    if (emulate) {
      body_ = std::move(body);
      return;
    }
#if TRAINKIT_HAS_CUDA
    require_option(device.is_cuda(), emulate_option, false, "true where the device is not CUDA");
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
      throw Error(std::string("trainkit: capturing the step failed after a clean probe step, and "
                              "a failed capture cannot be undone on this device; train this "
                              "model without capture (capture::None). The error: ") +
                  e.what());
    }
    graph_ = std::move(graph);
#else
    throw Error("trainkit: capturing steps: this build has no CUDA (TRAINKIT_HAS_CUDA is 0)");
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

  template <class B>
  static WindowShapes of(const std::vector<B>& window) {
    WindowShapes s;
    for (const auto& b : window) {
      data::for_each_tensor(b, [&s](const at::Tensor& t) {
        s.sizes.emplace_back(t.sizes().begin(), t.sizes().end());
        s.types.push_back(t.scalar_type());
      });
    }
    return s;
  }
  /// Whether `window` has these shapes (no allocation).
  template <class B>
  bool match(const std::vector<B>& window) const {
    size_t i = 0;
    bool same = true;
    for (const auto& b : window) {
      data::for_each_tensor(b, [&](const at::Tensor& t) {
        same = same && i < sizes.size() && t.sizes() == c10::IntArrayRef(sizes[i]) &&
               t.scalar_type() == types[i];
        ++i;
      });
    }
    return same && i == sizes.size();
  }
};

}  // namespace trainkit::detail
