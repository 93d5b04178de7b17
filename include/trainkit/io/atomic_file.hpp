#pragma once
// Writing a file so that a crash never leaves a half-written one in its place:
// write a temporary file in the same folder, flush and fsync it, rename it
// over the target (atomic on POSIX), then fsync the folder so the rename
// itself survives a power cut. On any error the temporary file is removed.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
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

/// A file written in pieces that replaces `path` atomically at commit();
/// destroyed uncommitted (an error, a crash), it leaves `path` as it was.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path) : path_(std::move(path)) {
    const auto dir = path_.parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);
    tmp_ = path_;
    tmp_ += ".tmp." + std::to_string(::getpid());
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      throw Error("trainkit: cannot create " + tmp_.string() + ": " + std::strerror(errno));
    }
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ < 0) return;
    ::close(fd_);
    std::error_code ignored;
    std::filesystem::remove(tmp_, ignored);
  }
  void write(std::string_view bytes) {
    detail::write_all(fd_, bytes.data(), bytes.size(), tmp_.string());
    size_ += bytes.size();
  }
  /// Bytes written so far.
  uint64_t size() const { return size_; }
  /// fsync, rename over `path`, fsync of the folder.
  void commit() {
    if (::fsync(fd_) != 0) {
      throw Error("trainkit: fsync of " + tmp_.string() + " failed: " + std::strerror(errno));
    }
    ::close(fd_);
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      std::filesystem::remove(tmp_);
      throw Error("trainkit: cannot rename " + tmp_.string() + " to " + path_.string() + ": " +
                  why);
    }
    detail::fsync_dir(path_.parent_path());
  }

 private:
  std::filesystem::path path_, tmp_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

/// Replaces `path` with `contents`, atomically.
inline void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

}  // namespace trainkit::io
