#pragma once
// Writing a file so that a crash never leaves a half-written one in its place:
// write a temporary file in the same folder, flush and fsync it, rename it
// over the target (atomic on POSIX), then fsync the folder so the rename
// itself survives a power cut. On any error the temporary file is removed.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "trainkit/error.hpp"

namespace trainkit::io {

namespace detail {
inline void write_all(int fd, const char* data, size_t size, const std::string& file) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("trainkit: writing " + file + " failed: " + std::strerror(errno));
    data += n;
    size -= size_t(n);
  }
}
inline void fsync_dir(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // some filesystems do not open folders; the rename has happened
  ::fsync(fd);
  ::close(fd);
}
}  // namespace detail

/// The whole file, in one read (no per-byte stream iteration).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error("trainkit: cannot open " + path.string());
  std::string bytes(size_t(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), std::streamsize(bytes.size()))) {
    throw Error("trainkit: reading " + path.string() + " failed");
  }
  return bytes;
}

/// Replaces `path` with `contents`, atomically.
inline void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  const auto dir = path.parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error("trainkit: cannot create " + tmp.string() + ": " + std::strerror(errno));
  }
  try {
    detail::write_all(fd, contents.data(), contents.size(), tmp.string());
    if (::fsync(fd) != 0) {
      throw Error("trainkit: fsync of " + tmp.string() + " failed: " + std::strerror(errno));
    }
  } catch (...) {
    ::close(fd);
    std::filesystem::remove(tmp);
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::filesystem::remove(tmp);
    throw Error("trainkit: cannot rename " + tmp.string() + " to " + path.string() + ": " + why);
  }
  detail::fsync_dir(dir);
}

}  // namespace trainkit::io
