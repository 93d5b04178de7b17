#pragma once
// Reading a whole data file into memory, gzip-compressed or not: `path` as
// given, else `path` + ".gz". Errors name the file.
#include <c10/util/ScopeExit.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>

#include "trainkit/error.hpp"
#include "trainkit/io/atomic_file.hpp"

namespace trainkit::data::detail {

inline std::string read_gzip(const std::filesystem::path& file) {
  gzFile gz = gzopen(file.c_str(), "rb");
  if (!gz) throw Error("trainkit: cannot open " + file.string());
  const auto close = c10::make_scope_exit([&] { gzclose(gz); });
  std::string out;
  char chunk[1 << 16];
  int n = 0;
  try {
    while ((n = gzread(gz, chunk, sizeof chunk)) > 0) out.append(chunk, size_t(n));
  } catch (const std::bad_alloc&) {  // a small file can inflate to more than memory holds
    throw Error("trainkit: " + file.string() + ": the decompressed data does not fit in memory (" +
                std::to_string(out.size()) + " bytes read)");
  }
  // A truncated stream ends like a clean one but leaves Z_BUF_ERROR behind.
  int err = Z_OK;
  const std::string message = gzerror(gz, &err);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
    throw Error("trainkit: " + file.string() + ": corrupt gzip data (" + message + ")");
  }
  return out;
}

inline std::string read_bytes(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) {
    auto gz = path;
    gz += ".gz";
    if (std::filesystem::exists(gz)) return read_gzip(gz);
    throw Error("trainkit: cannot open " + path.string() + " (nor " + gz.string() + ")");
  }
  if (path.extension() == ".gz") return read_gzip(path);
  return io::read_file(path);
}

}  // namespace trainkit::data::detail
