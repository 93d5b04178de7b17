#pragma once
// Every LibTorch-version-dependent line of trainkit lives here (docs/design.md,
// goals): autocast switched from per-device functions to
// device-typed ones in LibTorch 2.4, and 2.4 serves c10d's TCPStore with
// libuv by default although not every build has it.
#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>

#include <cstdlib>
#include <exception>
#include <string_view>

#if TORCH_VERSION_MAJOR < 1 || (TORCH_VERSION_MAJOR == 1 && TORCH_VERSION_MINOR < 13)
#error "trainkit needs LibTorch >= 1.13"
#endif

#ifndef TRAINKIT_HAS_CUDA
#define TRAINKIT_HAS_CUDA 0
#endif

#define TRAINKIT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// ATen's fused optimizer kernels (torch.optim's fused=True): _fused_adam_,
// _fused_adamw_ and _fused_sgd_ with a tensor learning rate, on CUDA and on
// CPUs, all from LibTorch 2.4 (detail/fused_optim.hpp).
#define TRAINKIT_HAS_FUSED_OPTIMIZERS TRAINKIT_TORCH_AT_LEAST(2, 4)

namespace trainkit::detail {

inline bool autocast_enabled(c10::DeviceType device) {
#if TRAINKIT_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                        : at::autocast::is_enabled();
#endif
}

inline c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if TRAINKIT_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
#if TRAINKIT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

/// Builds a c10d::TCPStore with `make(options)`. LibTorch >= 2.4 asks for
/// the libuv server by default, and a build without libuv (Debian's) refuses
/// at once: then the classic server is used. `USE_LIBUV=0` skips libuv, as it
/// does for PyTorch's own rendezvous.
template <class StoreOptions, class Make>
auto make_tcp_store(StoreOptions options, Make make) {
#if TRAINKIT_TORCH_AT_LEAST(2, 4)
  if (const char* env = std::getenv("USE_LIBUV"); env && std::string_view(env) == "0")
    options.useLibUV = false;
  if (options.useLibUV) {
    try {
      return make(options);
    } catch (const std::exception& e) {
      if (std::string_view(e.what()).find("libuv") == std::string_view::npos) throw;
    }
    options.useLibUV = false;
  }
#endif
  return make(options);
}

/// RAII autocast region, restoring whatever was active before (nesting-safe).
/// A disabled scope does nothing, so policies can return one type either way.
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, c10::ScalarType dtype, bool enabled = true)
      : device_(device), active_(enabled) {
    if (!active_) return;
    was_enabled_ = autocast_enabled(device);
    previous_dtype_ = autocast_dtype(device);
    set_autocast(device_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set_autocast(device_, was_enabled_, previous_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool active_;
  bool was_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Float;
};

}  // namespace trainkit::detail
