// libFuzzer target: the reader of PyTorch's distributed checkpoint index
// (.metadata: an allow-listed pickle of DCP's dataclasses) on arbitrary bytes.
#include <trainkit/io/dcp_metadata.hpp>

#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return trainkit::fuzz::run(data, size, [](std::string bytes) {
    trainkit::io::dcp::read_metadata(bytes, "fuzz/.metadata");
  });
}
