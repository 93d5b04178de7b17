#pragma once
// Seeds derived from (seed, rank, epoch, batch): every random draw of the data
// pipeline is a pure function of where it happens, never of which thread ran
// it, so any number of workers gives the same batches.
#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>
#include <initializer_list>

namespace trainkit::data {

/// splitmix64 over the parts: distinct parts give unrelated seeds.
inline uint64_t mix_seed(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x9E3779B97F4A7C15ULL;
  for (uint64_t p : parts) {
    uint64_t z = (h += p + 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    h = z ^ (z >> 31);
  }
  return h;
}

/// A CPU generator seeded like torch.Generator().manual_seed(seed).
inline at::Generator generator(uint64_t seed) {
  return at::make_generator<at::CPUGeneratorImpl>(seed);
}

}  // namespace trainkit::data
