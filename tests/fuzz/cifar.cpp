// libFuzzer target: the CIFAR record parser. The first byte picks the layout
// (CIFAR-10; CIFAR-100 fine or coarse labels); the rest is the file.
#include <trainkit/data/cifar.hpp>

#include "fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int layout = data[0] % 3;
  return trainkit::fuzz::run(data + 1, size - 1, [layout](std::string bytes) {
    using trainkit::data::detail::parse_cifar_records;
    if (layout == 0) parse_cifar_records(bytes, 1, 0, 10, "fuzz.bin");
    if (layout == 1) parse_cifar_records(bytes, 2, 1, 100, "fuzz.bin");
    if (layout == 2) parse_cifar_records(bytes, 2, 0, 20, "fuzz.bin");
  });
}
