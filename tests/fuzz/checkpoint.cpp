// libFuzzer target: the checkpoint reader, twice per input: on the bytes as
// they are (the CRC rejects almost every mutation), then with the CRC
// recomputed, so the mutated header and data reach the parser behind it.
#include <trainkit/io/checkpoint.hpp>

#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainkit::fuzz::run(data, size, [](std::string bytes) {
    trainkit::io::from_checkpoint_bytes(bytes, "fuzz.ckpt");
  });
  return trainkit::fuzz::run(data, size, [](std::string bytes) {
    trainkit::io::detail::seal(bytes);
    trainkit::io::from_checkpoint_bytes(bytes, "fuzz.ckpt");
  });
}
