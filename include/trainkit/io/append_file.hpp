#pragma once
// A log file written by appending whole records: each append is one write(2)
// on an O_APPEND descriptor, so a crash leaves whole records only (a reader
// never sees half a line or half an event).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "trainkit/error.hpp"
#include "trainkit/io/atomic_file.hpp"

namespace trainkit::io {

class AppendFile {
 public:
  enum class Mode { truncate, append };
  AppendFile(std::filesystem::path path, Mode mode) : path_(std::move(path)) {
    if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path());
    const int flags =
        O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (mode == Mode::truncate ? O_TRUNC : 0);
    fd_ = ::open(path_.c_str(), flags, 0644);
    if (fd_ < 0) {
      throw Error("trainkit: cannot open " + path_.string() +
                  " for writing: " + std::strerror(errno));
    }
  }
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile() { ::close(fd_); }

  void append(std::string_view record) {
    detail::write_all(fd_, record.data(), record.size(), path_.string());
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace trainkit::io
