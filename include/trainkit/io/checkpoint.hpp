#pragma once
// The training-state checkpoint file: a safetensors file (so its tensors are
// readable anywhere) whose tensors are named "<part>/<name>" and whose
// metadata holds each part's plain values as JSON, plus a CRC-32 over the
// whole file (computed with the CRC field zeroed). Reading checks the CRC
// before anything else: a truncated, flipped or foreign file is an error that
// names the file, never a half-loaded state. Including this header (in any
// one source file of a program) registers the codec that Trainer::fit uses
// for resume_from, checkpoint_on_signal and TrainState::save_checkpoint.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>

#include "trainkit/io/atomic_file.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/io/checkpoint_values.hpp"
#include "trainkit/io/safetensors.hpp"
#include "trainkit/io/sharded_checkpoint.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::io {

namespace detail {
inline constexpr const char* kCrcKey = "\"trainkit.crc32\":\"";
inline constexpr int kCheckpointVersion = 1;

/// Writes the CRC of checkpoint `bytes` into its trainkit.crc32 field, found
/// where the reader looks for it (the writer's last step; tests and the fuzz
/// target use it to reach the parsers behind the checksum). Bytes without
/// the field are left as they are.
inline void seal(std::string& bytes) {
  uint64_t n = 0;
  if (bytes.size() < 8) return;
  std::memcpy(&n, bytes.data(), 8);
  const auto key = bytes.find(kCrcKey, 8);
  if (n > bytes.size() - 8 || key == std::string::npos || key >= 8 + n) return;
  const auto at = key + std::strlen(kCrcKey);
  if (at + 8 > 8 + n) return;
  bytes.replace(at, 8, "00000000");
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc_of(bytes));
  bytes.replace(at, 8, hex);
}
[[noreturn]] inline void bad_checkpoint(const std::string& file, const std::string& what) {
  throw Error("trainkit: " + file + ": " + what);
}

}  // namespace detail

inline std::string to_checkpoint_bytes(const Checkpoint& ckpt) {
  NamedTensors tensors;
  const auto values = values_to_json(ckpt);
  for (const auto& [part, dict] : ckpt.parts) {
    for (const auto& [name, t] : dict.tensors) tensors.emplace_back(part + "/" + name, t);
  }
  auto bytes =
      to_safetensors(tensors, {{"format", "pt"},
                               {"trainkit.checkpoint", std::to_string(detail::kCheckpointVersion)},
                               {"trainkit.crc32", "00000000"},
                               {"trainkit.values", values.dump()}});
  detail::seal(bytes);
  return bytes;
}

/// Parses and checks checkpoint `bytes`; `file` names it in errors.
inline Checkpoint from_checkpoint_bytes(std::string bytes, const std::string& file) {
  using detail::bad_checkpoint;
  uint64_t n = 0;
  if (bytes.size() >= 8) std::memcpy(&n, bytes.data(), 8);
  if (bytes.size() < 8 || n > bytes.size() - 8) {
    bad_checkpoint(file, "truncated or not a checkpoint (" + std::to_string(bytes.size()) +
                             " bytes, header length " + std::to_string(n) + ")");
  }
  const auto key = bytes.find(detail::kCrcKey, 8);
  if (key == std::string::npos || key >= 8 + n) {
    bad_checkpoint(file, "not a trainkit checkpoint (no trainkit.crc32 in its header)");
  }
  const auto at = key + std::strlen(detail::kCrcKey);
  if (at + 8 > 8 + n) bad_checkpoint(file, "corrupt header");
  const std::string stored = bytes.substr(at, 8);
  bytes.replace(at, 8, "00000000");
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", detail::crc_of(bytes));
  if (stored != hex) {
    bad_checkpoint(file, "checksum mismatch (stored " + stored + ", computed " + hex +
                             "): the file is truncated or corrupt");
  }
  const auto st = from_safetensors(bytes, file);
  const auto version = st.metadata.find("trainkit.checkpoint");
  if (version == st.metadata.end() ||
      version->second != std::to_string(detail::kCheckpointVersion)) {
    bad_checkpoint(file, "unsupported checkpoint version");
  }
  Checkpoint ckpt;
  try {
    ckpt = values_from_json(nlohmann::json::parse(st.metadata.at("trainkit.values")));
  } catch (const std::exception& e) {
    bad_checkpoint(file, std::string("unreadable state values (") + e.what() + ")");
  }
  for (const auto& [name, t] : st.tensors) {
    const auto slash = name.find('/');
    if (slash == std::string::npos) bad_checkpoint(file, "tensor \"" + name + "\" has no part");
    ckpt.parts[name.substr(0, slash)].tensors[name.substr(slash + 1)] = t;
  }
  return ckpt;
}

inline void write_checkpoint(const std::filesystem::path& path, const Checkpoint& ckpt) {
  write_file_atomically(path, to_checkpoint_bytes(ckpt));
}

/// A checkpoint file, or a sharded checkpoint's folder (its values, and
/// Checkpoint::sharded to read its tensors box by box).
inline Checkpoint read_checkpoint(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) {
    if (!checkpoint_folder::is_sharded_checkpoint(path)) {
      throw Error("trainkit: " + path.string() + " is a folder without " + sharded::kIndexFile +
                  ": not a sharded checkpoint (or one whose save did not finish)");
    }
    return sharded::read(path);
  }
  if (!std::filesystem::exists(path))
    throw Error("trainkit: cannot open checkpoint " + path.string());
  return from_checkpoint_bytes(read_file(path), path.string());
}

namespace detail {
// Registers the codec once per program, before main (see checkpoint_codec.hpp).
inline const bool checkpoint_codec_registered = [] {
  registered_codec() = {&read_checkpoint, &write_checkpoint, &sharded::write_pieces,
                        &sharded::commit};
  return true;
}();
}  // namespace detail

}  // namespace trainkit::io
