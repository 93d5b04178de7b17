// libFuzzer target: the MNIST IDX parser. The first byte picks the number of
// dimensions (1 to 3, as MNIST's label and image files); the rest is the file.
#include <trainkit/data/mnist.hpp>

#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint32_t dims = 1 + data[0] % 3;
  return trainkit::fuzz::run(data + 1, size - 1, [dims](std::string bytes) {
    trainkit::data::detail::parse_idx_u8(bytes, dims, "fuzz-idx-ubyte");
  });
}
