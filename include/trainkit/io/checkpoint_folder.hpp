#pragma once
// The layout of a checkpoint folder, in one place: step checkpoints named
// step-<9-digit step>.ckpt (so names sort by step), last.ckpt a symlink to
// the newest, best.ckpt for a monitored metric. callbacks::ModelCheckpoint
// writes it; fit's `resume_from` reads it.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"

namespace trainkit::io::checkpoint_folder {

inline std::string step_file_name(int64_t step) {
  char name[48];
  std::snprintf(name, sizeof name, "step-%09lld.ckpt", static_cast<long long>(step));
  return name;
}
inline std::filesystem::path last_link(const std::filesystem::path& dir) {
  return dir / "last.ckpt";
}
inline std::filesystem::path best_file(const std::filesystem::path& dir) {
  return dir / "best.ckpt";
}

/// The step checkpoints in `dir`, oldest first.
TRAINKIT_INLINE std::vector<std::filesystem::path> step_files(const std::filesystem::path& dir);

/// Points last.ckpt at `file_name` (in the same folder), atomically: a new
/// link renamed over the old one.
TRAINKIT_INLINE void link_last(const std::filesystem::path& dir, const std::string& file_name);

/// The folder's latest checkpoint: last.ckpt when present, else the
/// greatest step-*.ckpt.
TRAINKIT_INLINE std::filesystem::path latest(const std::filesystem::path& dir);

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE std::vector<std::filesystem::path> step_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && e.path().extension() == ".ckpt") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TRAINKIT_INLINE void link_last(const std::filesystem::path& dir, const std::string& file_name) {
  auto tmp = last_link(dir);
  tmp += ".tmp." + std::to_string(::getpid());
  std::filesystem::remove(tmp);
  std::filesystem::create_symlink(file_name, tmp);
  std::filesystem::rename(tmp, last_link(dir));
}

TRAINKIT_INLINE std::filesystem::path latest(const std::filesystem::path& dir) {
  if (std::filesystem::exists(last_link(dir))) return last_link(dir);
  const auto steps = step_files(dir);
  if (steps.empty())
    throw Error("trainkit: no checkpoint (last.ckpt or step-*.ckpt) in " + dir.string());
  return steps.back();
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::io::checkpoint_folder
