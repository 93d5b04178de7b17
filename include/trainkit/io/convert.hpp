#pragma once
// Between a sharded checkpoint and one weights file, tensor by tensor:
// a sharded checkpoint's model as `.safetensors` or a `torch.save` state
// dict (`.pt`, `.pth`), each tensor read, written and dropped before the
// next; and a weights file as a sharded folder, split as a
// number of ranks would have written it (for PyTorch's `dcp.load`, or to
// hand weights to a sharded run). `examples/convert_checkpoint.cpp` is the
// command.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint.hpp"
#include "trainkit/io/safetensors.hpp"
#include "trainkit/io/sharded_checkpoint.hpp"
#include "trainkit/io/torch_save.hpp"
#include "trainkit/io/weights.hpp"
#include "trainkit/params.hpp"

namespace trainkit::io {

namespace detail {
/// Writes tensors of `specs` to `to` as its extension says, each asked of
/// `next` in order.
template <class Next>
void write_weights_file(const std::filesystem::path& to, const std::vector<TensorSpec>& specs,
                        Next&& next) {
  const auto ext = to.extension().string();
  if (ext == ".safetensors") {
    SafetensorsWriter out(to, specs, {{"format", "pt"}});
    for (const auto& spec : specs) out.write(next(spec));
    out.commit();
  } else if (ext == ".pt" || ext == ".pth") {
    TorchSaveWriter out(to, specs);
    for (const auto& spec : specs) out.write(next(spec));
    out.commit();
  } else {
    throw Error("trainkit: weights file \"" + to.string() + "\" ends in \"" + ext +
                "\"; accepted: .safetensors, .pt, .pth");
  }
}
}  // namespace detail

/// The model weights of checkpoint `from` (a sharded folder, a checkpoint
/// file, or a run folder's newest) to `to`: `.safetensors`, or `.pt`/`.pth`
/// for Python's `model.load_state_dict(torch.load(path))`. From a sharded
/// folder each tensor is read, written and dropped before the next.
inline void checkpoint_to_weights(const std::filesystem::path& from,
                                  const std::filesystem::path& to) {
  const auto found = read_newest_checkpoint(from, &read_checkpoint, false);
  const auto& ckpt = found->checkpoint;
  if (!ckpt.sharded) {  // one file: its tensors are in memory already
    const auto tensors = checkpoint_model(ckpt, found->file);
    std::vector<TensorSpec> specs;
    for (const auto& [name, t] : tensors) specs.push_back({name, t.scalar_type(), t.sizes().vec()});
    size_t i = 0;
    detail::write_weights_file(to, specs, [&](const TensorSpec&) { return tensors[i++].second; });
    return;
  }
  std::vector<TensorSpec> specs;
  for (const auto& [name, info] : ckpt.sharded->tensors()) {
    if (name.rfind("model.", 0) == 0) specs.push_back({name.substr(6), info.dtype, info.shape});
  }
  if (specs.empty())
    throw Error("trainkit: " + found->file.string() + ": a checkpoint without model tensors");
  detail::write_weights_file(to, specs, [&](const TensorSpec& spec) {
    return ckpt.sharded->read_whole("model." + spec.name);
  });
}

/// The weights `from` holds (read_weights: `.safetensors`, `.pt`, a
/// checkpoint) as the sharded folder `to` (named *.ckpt) that `ranks` ranks
/// would write: each tensor's rows split among them, as FSDP shards a
/// parameter. Its tensors are `model.<name>`; io::read_weights and
/// io::load_weights read it, and so does PyTorch's `dcp.load` (DCP's
/// `.metadata` beside the index: issue 51's item 5).
inline void weights_to_sharded(const std::filesystem::path& from, const std::filesystem::path& to,
                               int ranks = 1) {
  trainkit::detail::require_option(ranks >= 1, "ranks", ranks, "a number of ranks >= 1");
  trainkit::detail::require_option(to.extension() == ".ckpt", "to", to.string(),
                                   "a folder named *.ckpt (a sharded checkpoint)");
  const auto tensors = read_weights(from);
  const auto staging = checkpoint_folder::staging_folder(to);
  std::filesystem::remove_all(staging);
  std::vector<std::string> entries;
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<TensorPiece> pieces;
    for (const auto& [name, t] : tensors) {
      const auto c = t.detach().contiguous();
      TensorBox box{std::vector<int64_t>(size_t(c.dim()), 0), c.sizes().vec()};
      if (c.dim() > 0) {
        const auto [begin, end] = FlatParams::shard_range(c.size(0), rank, ranks);
        if (end == begin && c.numel() > 0) continue;
        box.offsets[0] = begin, box.sizes[0] = end - begin;
        pieces.push_back({"model." + name, c.sizes().vec(), box, c.narrow(0, begin, end - begin)});
      } else if (rank == 0) {
        pieces.push_back({"model." + name, {}, box, c});
      }
    }
    entries.push_back(sharded::write_pieces(staging, rank, pieces));
  }
  Checkpoint values;
  values.parts["model"];
  sharded::commit(staging, to, values, entries);
}

}  // namespace trainkit::io
