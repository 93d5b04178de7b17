#pragma once
// A checkpoint as the Trainer sees it: parts in memory, and the file codec
// that reads and writes them. The codec (io/checkpoint.hpp: safetensors,
// JSON, CRC, atomic files; io/sharded_checkpoint.hpp: a folder of per-rank
// files) registers itself when any source file of the program includes it,
// so the many files that only instantiate a Trainer do not each compile a
// JSON parser (docs/decisions.md, "checkpoint codec").
#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainkit/detail/linkage.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint_folder.hpp"
#include "trainkit/state_dict.hpp"

namespace trainkit::io {

/// A box of a tensor: from `offsets`, `sizes` elements along each dimension.
struct TensorBox {
  std::vector<int64_t> offsets, sizes;
  int64_t numel() const {
    int64_t n = 1;
    for (const auto s : sizes) n *= s;
    return n;
  }
};

/// The tensors of a sharded checkpoint, read box by box from the chunks
/// that hold them (io/sharded_checkpoint.hpp).
class ShardedTensors {
 public:
  struct Info {
    at::ScalarType dtype = at::kFloat;
    std::vector<int64_t> shape;
  };
  virtual ~ShardedTensors() = default;
  virtual const std::map<std::string, Info>& tensors() const = 0;
  /// The elements of tensor `name` in `box` (a CPU tensor of box.sizes).
  virtual at::Tensor read(const std::string& name, const TensorBox& box) const = 0;
  /// All of tensor `name`.
  at::Tensor read_whole(const std::string& name) const {
    const auto it = tensors().find(name);
    const auto shape = it == tensors().end() ? std::vector<int64_t>{} : it->second.shape;
    return read(name, {std::vector<int64_t>(shape.size(), 0), shape});
  }
};

struct Checkpoint {
  std::map<std::string, StateDict> parts;  ///< "trainer", "model", "optim", "callback.0", ...
  /// A sharded checkpoint's tensors (its parts then hold the plain values
  /// and the tensors no rank shards); null for a single file.
  std::shared_ptr<const ShardedTensors> sharded;
  /// A folder PyTorch's dcp.save wrote: tensors by its names ("model.<name>",
  /// "optim.state.<param>.<kind>"), no parts.
  bool written_by_pytorch = false;
};

/// One box of a global tensor that a rank writes to a sharded checkpoint.
struct TensorPiece {
  std::string name;            ///< "model.fc.weight", "optim.state.fc.weight.exp_avg", ...
  std::vector<int64_t> shape;  ///< the whole tensor's
  TensorBox box;
  at::Tensor data;  ///< box.sizes, contiguous
};

namespace detail {
struct CheckpointCodec {
  /// A file, or a sharded checkpoint's folder (its values and its tensors' reader).
  Checkpoint (*read)(const std::filesystem::path&) = nullptr;
  void (*write)(const std::filesystem::path&, const Checkpoint&) = nullptr;
  /// Sharded: writes one rank's pieces into folder `staging` and returns
  /// their index entries (text for the commit).
  std::string (*write_pieces)(const std::filesystem::path& staging, int rank,
                              const std::vector<TensorPiece>& pieces) = nullptr;
  /// Sharded, on one rank once every rank wrote: the index (values, and
  /// the ranks' entries) into `staging`, then `staging` put in place of
  /// `target` in one step.
  void (*commit)(const std::filesystem::path& staging, const std::filesystem::path& target,
                 const Checkpoint& values, const std::vector<std::string>& entries) = nullptr;
};
/// What io/checkpoint.hpp registered (null pointers until a source file includes it).
inline CheckpointCodec& registered_codec() {
  static CheckpointCodec codec;
  return codec;
}
}  // namespace detail

/// A checkpoint and the file it was read from.
struct FoundCheckpoint {
  std::filesystem::path file;
  Checkpoint checkpoint;
};

/// The checkpoint `path` names, read with `read`: the file itself, or in a
/// folder the newest by step of checkpoint_folder::newest_candidates (ties:
/// last.ckpt's). A missing path or a folder without a checkpoint is
/// nullopt when `if_present`, else an Error.
TRAINKIT_INLINE std::optional<FoundCheckpoint> read_newest_checkpoint(
    const std::filesystem::path& path, Checkpoint (*read)(const std::filesystem::path&),
    bool if_present);

/// The registered codec (two pointers, returned by value); `option` and
/// `value` name what asked for it.
TRAINKIT_INLINE detail::CheckpointCodec checkpoint_codec(const char* option,
                                                         const std::string& value);

#if TRAINKIT_DEFINITIONS
TRAINKIT_INLINE std::optional<FoundCheckpoint> read_newest_checkpoint(
    const std::filesystem::path& path, Checkpoint (*read)(const std::filesystem::path&),
    bool if_present) {
  const bool folder = checkpoint_folder::is_run_folder(path);
  const auto files = folder ? checkpoint_folder::newest_candidates(path)
                            : std::vector<std::filesystem::path>{path};
  if (files.empty() || (!folder && !std::filesystem::exists(path))) {
    if (if_present) return std::nullopt;  // the first run of a command that also restarts
    if (folder) {                         // a missing file is the codec's error, which names it
      throw Error("trainkit: no checkpoint to resume from in " + path.string() +
                  " (no last.ckpt, step-*.ckpt or other *.ckpt); fit.resume_if_present = true "
                  "starts fresh when there is none yet");
    }
  }
  std::optional<FoundCheckpoint> newest;
  int64_t newest_step = -1;
  for (const auto& file : files) {
    auto ckpt = read(file);
    const auto trainer = ckpt.parts.find("trainer");
    const int64_t step = trainer == ckpt.parts.end() ? -1 : trainer->second.value<int64_t>("step");
    if (!newest || step > newest_step) {
      newest = FoundCheckpoint{file, std::move(ckpt)};
      newest_step = step;
    }
  }
  return newest;
}

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
