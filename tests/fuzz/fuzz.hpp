#pragma once
// Shared by the libFuzzer targets: a reader either returns or throws
// trainkit::Error. Anything else (another exception, a sanitizer report, a
// crash) is a finding: libFuzzer stops and keeps the input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "trainkit/error.hpp"

namespace trainkit::fuzz {

template <class F>
int run(const uint8_t* data, size_t size, F&& read) {
  try {
    read(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const trainkit::Error&) {
    // the reader's answer to a bad file: fine
  }
  return 0;
}

}  // namespace trainkit::fuzz
