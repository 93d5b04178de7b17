#pragma once
// A checkpoint as the Trainer sees it: parts in memory, and the file codec
// that reads and writes them. The codec (io/checkpoint.hpp: safetensors,
// JSON, CRC, atomic files) registers itself when any source file of the
// program includes it, so the many files that only instantiate a Trainer do
// not each compile a JSON parser (docs/decisions.md, "checkpoint codec").
#include <filesystem>
#include <map>
#include <string>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint_folder.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::io {

struct Checkpoint {
  std::map<std::string, StateDict> parts;  ///< "trainer", "model", "optim", "callback.0", ...
};

namespace detail {
struct CheckpointCodec {
  Checkpoint (*read)(const std::filesystem::path&) = nullptr;
  void (*write)(const std::filesystem::path&, const Checkpoint&) = nullptr;
};
/// What io/checkpoint.hpp registered (null pointers until a source file includes it).
inline CheckpointCodec& registered_codec() {
  static CheckpointCodec codec;
  return codec;
}
}  // namespace detail

/// `path` itself, or for a folder its latest checkpoint (checkpoint_folder::latest).
inline std::filesystem::path resolve_checkpoint(const std::filesystem::path& path) {
  return std::filesystem::is_directory(path) ? checkpoint_folder::latest(path) : path;
}

/// The registered codec (two pointers, returned by value); `option` and
/// `value` name what asked for it.
TRAINKIT_INLINE detail::CheckpointCodec checkpoint_codec(const char* option,
                                                         const std::string& value);

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE detail::CheckpointCodec checkpoint_codec(const char* option,
                                                         const std::string& value) {
  const auto codec = detail::registered_codec();
  if (codec.read == nullptr) {
    throw Error(std::string("trainkit: ") + option + " = \"" + value +
                "\" needs the checkpoint file format: #include <trainkit/io/checkpoint.hpp> (or "
                "<trainkit/io.hpp>) in one source file of the program");
  }
  return codec;
}
#endif  // TRAINKIT_DEFINITIONS

}  // namespace trainkit::io
