// libFuzzer target: the torch.save reader (zip directory, pickle, storages) on arbitrary bytes.
#include <trainkit/io/torch_save.hpp>

#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return trainkit::fuzz::run(
      data, size, [](std::string bytes) { trainkit::io::from_torch_save(bytes, "fuzz.pt"); });
}
