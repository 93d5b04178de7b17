#pragma once
// Which process runs a trial (host, pid namespace, pid), whether it still
// runs, and the heartbeat that says so: what lets a Study fail the trial of a
// worker that died.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "trainkit/tune/storage.hpp"

namespace trainkit::tune::detail {

/// The pids this process can look up: this boot's id and this pid
/// namespace's inode ("" where /proc does not say). Two workers with equal
/// hostnames in different containers or machines differ here.
inline std::string pid_space() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat ns {};
  if (boot.empty() || ::stat("/proc/self/ns/pid", &ns) != 0) return "";
  return boot + "/" + std::to_string(ns.st_ino);
}

inline WorkerId this_worker(double heartbeat_s) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  static const std::string space = pid_space();
  return {host, space, static_cast<int64_t>(::getpid()), heartbeat_s};  // pid now: after a fork
}

enum class Liveness { Alive, Gone, Unknown };

/// Whether a trial's worker process still runs, as far as this process can
/// tell: only a worker of the same pid space is looked up (by pid).
inline Liveness liveness(const nlohmann::json& worker, const WorkerId& me) {
  if (!worker.is_object() || me.pid_space.empty() || worker.value("pid_space", "") != me.pid_space)
    return Liveness::Unknown;
  const auto pid = worker.value("pid", int64_t{0});
  if (pid <= 0 || pid == me.pid) return Liveness::Unknown;  // mine: its heartbeat tells
  return ::kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH ? Liveness::Gone
                                                                    : Liveness::Alive;
}

/// Keeps this process's running trials alive in the storage: a beat every
/// `every_s` seconds (none when 0) for each trial added and not removed.
class Heartbeat {
 public:
  Heartbeat(Storage& storage, double every_s) : storage_(storage) {
    if (every_s <= 0) return;
    thread_ = std::jthread([this, every_s](std::stop_token stop) {
      std::unique_lock lock(mutex_);
      while (!stop.stop_requested()) {
        cv_.wait_for(lock, stop, std::chrono::duration<double>(every_s), [&] { return false; });
        for (auto id : running_) {
          try {
            storage_.heartbeat(id);
          } catch (const std::exception&) {  // a busy database: next beat
          }
        }
      }
    });
  }
  void add(int64_t id) {
    std::lock_guard lock(mutex_);
    running_.insert(id);
  }
  void remove(int64_t id) {
    std::lock_guard lock(mutex_);
    running_.erase(id);
  }

 private:
  Storage& storage_;
  std::mutex mutex_;
  std::condition_variable_any cv_;
  std::set<int64_t> running_;
  std::jthread thread_;  // last: stopped and joined before the rest goes
};

}  // namespace trainkit::tune::detail
