// libFuzzer target: the safetensors reader on arbitrary bytes.
#include <trainkit/io/safetensors.hpp>

#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return trainkit::fuzz::run(data, size, [](std::string bytes) {
    trainkit::io::from_safetensors(bytes, "fuzz.safetensors");
  });
}
