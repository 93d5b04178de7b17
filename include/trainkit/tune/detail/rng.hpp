#pragma once
// Samplers draw from a generator seeded by (sampler seed, trial number,
// parameter name): a trial's draws do not depend on which worker runs it or
// on what other trials drew, so a seeded study is reproducible. The
// conversions to doubles are written out because std::*_distribution
// differ between standard libraries.
#include <cmath>
#include <cstdint>
#include <random>
#include <string_view>

namespace trainkit::tune::detail {

/// FNV-1a: a stable hash of a name (std::hash may differ between builds).
inline uint64_t stable_hash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(mix(seed)) {}
  Rng(uint64_t seed, int64_t trial_number, std::string_view name = {})
      : engine_(mix(mix(seed) ^ mix(static_cast<uint64_t>(trial_number) + 0x9e37) ^
                    stable_hash(name))) {}

  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  /// Uniform in {0, ..., n - 1}.
  int64_t index(int64_t n) { return static_cast<int64_t>(uniform() * static_cast<double>(n)) % n; }

 private:
  // splitmix64's finaliser: nearby seeds give unrelated streams.
  static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  std::mt19937_64 engine_;
};

}  // namespace trainkit::tune::detail
