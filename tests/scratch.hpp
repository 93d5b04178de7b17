#pragma once
// Where a test process writes its files: a folder of its own, made by
// mkdtemp on first use, so that test processes CTest runs side by side never
// share a path (two once shared "trainkit_observe_test": one emptied it while
// the other took its screenshot). tests/main.cpp removes it at exit unless a
// test failed. The same for ports: free_port() asks the kernel for one. No
// LibTorch here: the search's tests use it too.
#include <netinet/in.h>
#include <stdlib.h>  // mkdtemp
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

namespace tk_test {

namespace detail {
inline std::optional<std::filesystem::path>& process_dir_slot() {
  static std::optional<std::filesystem::path> dir;
  return dir;
}
}  // namespace detail

/// This process's folder under the system's temporary directory.
inline const std::filesystem::path& process_dir() {
  auto& dir = detail::process_dir_slot();
  if (!dir) {
    auto pattern = (std::filesystem::temp_directory_path() / "trainkit-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp(" + pattern + "): " + std::strerror(errno));
    dir = pattern;
  }
  return *dir;
}

/// An empty folder `name` in this process's folder.
inline std::filesystem::path temp_dir(const std::string& name) {
  const auto dir = process_dir() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// A TCP port free on 127.0.0.1 now (the kernel's choice, so two test
/// processes do not pick the same one as a fixed number would).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) throw std::runtime_error(std::string("bind to a free port: ") + std::strerror(error));
  return ntohs(address.sin_port);
}

}  // namespace tk_test
