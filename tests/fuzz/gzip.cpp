// libFuzzer target: a gzipped data file, read from disk as the dataset
// readers read it (zlib through data::detail::read_bytes), then parsed as a
// one-dimensional IDX file, MNIST's labels.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <trainkit/data/mnist.hpp>

#include "fuzz.hpp"

namespace {
/// This process's input file, removed at exit.
const std::filesystem::path& input_file() {
  static const auto path = [] {
    std::atexit([] { std::filesystem::remove(input_file()); });
    return std::filesystem::temp_directory_path() /
           ("trainkit-fuzz-" + std::to_string(getpid()) + "-labels-idx1-ubyte.gz");
  }();
  return path;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::ofstream(input_file(), std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return trainkit::fuzz::run(
      data, size, [](std::string) { trainkit::data::detail::read_idx_u8(input_file(), 1); });
}
