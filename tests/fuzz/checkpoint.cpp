// libFuzzer target: the checkpoint reader, twice per input: on the bytes as
// they are (the CRC rejects almost every mutation), then with the CRC
// recomputed, so the mutated header and data reach the parser behind it.
#include <cstdio>
#include <cstring>
#include <trainkit/io/checkpoint.hpp>

#include "fuzz.hpp"

namespace {
/// `bytes` with a correct CRC, when they have the CRC field where the reader looks.
std::string with_valid_crc(std::string bytes) {
  using namespace trainkit::io::detail;
  uint64_t n = 0;
  if (bytes.size() < 8) return bytes;
  std::memcpy(&n, bytes.data(), 8);
  const auto key = bytes.find(kCrcKey, 8);
  if (n > bytes.size() - 8 || key == std::string::npos || key >= 8 + n) return bytes;
  const auto at = key + std::strlen(kCrcKey);
  if (at + 8 > 8 + n) return bytes;
  bytes.replace(at, 8, "00000000");
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc_of(bytes));
  bytes.replace(at, 8, hex);
  return bytes;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  trainkit::fuzz::run(data, size, [](std::string bytes) {
    trainkit::io::from_checkpoint_bytes(bytes, "fuzz.ckpt");
  });
  return trainkit::fuzz::run(data, size, [](std::string bytes) {
    trainkit::io::from_checkpoint_bytes(with_valid_crc(std::move(bytes)), "fuzz.ckpt");
  });
}
