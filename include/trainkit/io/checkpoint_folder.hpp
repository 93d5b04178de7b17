#pragma once
// The layout of a checkpoint folder, in one place: step checkpoints named
// step-<9-digit step>.ckpt (so names sort by step), last.ckpt a symlink to
// the newest, best.ckpt for a monitored metric. callbacks::ModelCheckpoint
// writes it; fit's `resume_from` reads its newest checkpoint by step, which
// may be another file in it (checkpoint_on_signal's). A checkpoint is a
// file, or a sharded checkpoint's folder of that name (its index inside).
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
/// Where a sharded save writes the folder `target` before putting it in
/// place (not named *.ckpt: never taken for a checkpoint).
inline std::filesystem::path staging_folder(std::filesystem::path target) {
  return target += ".partial";
}
/// Where a sharded checkpoint's folder goes while it is deleted (not named
/// *.ckpt: a crash while its files go leaves no unreadable checkpoint).
inline std::filesystem::path removal_folder(std::filesystem::path checkpoint) {
  return checkpoint += ".removing";
}
/// Deletes a checkpoint: a file at once, a sharded checkpoint's folder by
/// renaming it to removal_folder() first (removing its files is not atomic).
inline void remove_checkpoint(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(fs::symlink_status(path))) {
    fs::remove(path);
    return;
  }
  const auto doomed = removal_folder(path);
  fs::remove_all(doomed);  // what a crash left of an earlier removal
  fs::rename(path, doomed);
  fs::remove_all(doomed);
}
/// A sharded checkpoint's index, in its folder (io/sharded_checkpoint.hpp),
/// and the index of one PyTorch's dcp.save wrote (io/dcp_metadata.hpp).
inline constexpr const char* kShardedIndex = "trainkit.json";
inline constexpr const char* kPytorchIndex = ".metadata";
/// Whether `path` is a sharded checkpoint (a folder with either index), not
/// a folder of checkpoints.
inline bool is_sharded_checkpoint(const std::filesystem::path& path) {
  return std::filesystem::is_directory(path) && (std::filesystem::exists(path / kShardedIndex) ||
                                                 std::filesystem::exists(path / kPytorchIndex));
}

/// The step checkpoints in `dir`, oldest first.
TRAINKIT_INLINE std::vector<std::filesystem::path> step_files(const std::filesystem::path& dir);

/// Whether `path` is a folder of checkpoints, not one sharded checkpoint
/// (a folder with an index, or named *.ckpt: one whose save did not finish
/// is refused by name, not searched).
inline bool is_run_folder(const std::filesystem::path& path) {
  return std::filesystem::is_directory(path) && path.extension() != ".ckpt" &&
         !is_sharded_checkpoint(path);
}

/// Points last.ckpt at `file_name` (in the same folder), atomically: a new
/// link renamed over the old one.
TRAINKIT_INLINE void link_last(const std::filesystem::path& dir, const std::string& file_name);

/// The checkpoints that may be the folder's newest, to be read for their
/// steps: last.ckpt's target (else the greatest step-*.ckpt) and every other
/// *.ckpt but best.ckpt (the signal's interrupted.ckpt, say), each once.
TRAINKIT_INLINE std::vector<std::filesystem::path> newest_candidates(
    const std::filesystem::path& dir);

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE std::vector<std::filesystem::path> step_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && e.path().extension() == ".ckpt" &&
        (e.is_regular_file() || is_sharded_checkpoint(e.path())))
      out.push_back(e.path());
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

TRAINKIT_INLINE std::vector<std::filesystem::path> newest_candidates(
    const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  const auto add = [&](const fs::path& file) {
    const auto real = fs::weakly_canonical(file);
    if (std::find(out.begin(), out.end(), real) == out.end()) out.push_back(real);
  };
  if (fs::exists(last_link(dir))) {
    add(last_link(dir));
  } else if (const auto steps = step_files(dir); !steps.empty()) {
    add(steps.back());
  }
  if (!fs::is_directory(dir)) return out;
  std::vector<fs::path> others;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if ((e.is_regular_file() || is_sharded_checkpoint(e.path())) &&
        e.path().extension() == ".ckpt" && name.rfind("step-", 0) != 0 &&
        e.path() != best_file(dir) && e.path() != last_link(dir))
      others.push_back(e.path());
  }
  std::sort(others.begin(), others.end());
  for (const auto& file : others) add(file);
  return out;
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::io::checkpoint_folder
