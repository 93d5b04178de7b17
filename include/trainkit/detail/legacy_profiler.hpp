#pragma once
// LibTorch's legacy profiler as a scoped session: started by the constructor,
// stopped by stop() (which returns the events) or, on any early exit, by the
// destructor, so a throw never leaves the thread profiling. The legacy
// profiler is the one every LibTorch has (Debian's is built without Kineto).
#include <torch/csrc/autograd/profiler_legacy.h>

namespace trainkit::detail {

class LegacyProfilerSession {
 public:
  using Events = torch::autograd::profiler::thread_event_lists;

  LegacyProfilerSession(bool record_shapes, bool with_flops) {
    torch::autograd::profiler::enableProfilerLegacy(torch::profiler::impl::ProfilerConfig(
        torch::profiler::impl::ProfilerState::CPU, record_shapes, /*profile_memory=*/false,
        /*with_stack=*/false, with_flops));
  }
  LegacyProfilerSession(const LegacyProfilerSession&) = delete;
  LegacyProfilerSession& operator=(const LegacyProfilerSession&) = delete;
  ~LegacyProfilerSession() {
    if (active_) torch::autograd::profiler::disableProfilerLegacy();
  }

  Events stop() {
    active_ = false;
    return torch::autograd::profiler::disableProfilerLegacy();
  }

 private:
  bool active_ = true;
};

}  // namespace trainkit::detail
