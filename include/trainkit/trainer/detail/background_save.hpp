#pragma once
// The thread an asynchronous checkpoint is written on (CheckpointOptions::
// asynchronous): one save at a time, a second one waits for the first, and
// the error of one is kept until the next save or fit's end asks for it.
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <utility>

namespace trainkit::detail {

class BackgroundSave {
 public:
  BackgroundSave() = default;
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;
  /// Waits for the save in flight; an error nobody asked for is printed,
  /// not lost (fit is already leaving with another one).
  ~BackgroundSave() {
    if (const auto error = wait(); !error.empty()) std::fprintf(stderr, "%s\n", error.c_str());
  }

  /// Starts `write` (of the checkpoint `what` names) once the save before
  /// it ended; call wait() first to hear how that one went.
  void start(std::string what, std::function<void()> write) {
    join();
    what_ = std::move(what);
    thread_ = std::thread([this, write = std::move(write)] {
      try {
        write();
      } catch (const std::exception& e) {
        error_ = e.what();
      } catch (...) {
        error_ = "an exception that is not a std::exception";
      }
    });
  }

  /// Waits for the save in flight; returns its error ("" when it was
  /// written, or when there was none), once.
  std::string wait() {
    join();
    if (error_.empty()) return "";
    return "trainkit: the asynchronous save of " + std::exchange(what_, "") +
           " failed: " + std::exchange(error_, "");
  }

 private:
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::thread thread_;
  std::string what_, error_;  // error_ is written by the thread, read after join()
};

}  // namespace trainkit::detail
