#pragma once
// Timing helpers for the benchmarks: medians of repeated timed runs, printed
// as one JSON object per result so scripts can collect them.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace bench {

/// Median seconds per call of `f`, over `repeats` timings of `iters` calls each.
inline double seconds_per_call(const std::function<void()>& f, int iters, int repeats = 7) {
  for (int i = 0; i < std::max(1, iters / 10); ++i) f();  // warm up
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters);
  }
  std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
  return times[repeats / 2];
}

inline long minor_page_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

inline void report(const std::string& name, const std::string& fields) {
  std::printf("{\"bench\": \"%s\", %s}\n", name.c_str(), fields.c_str());
  std::fflush(stdout);
}

}  // namespace bench
