#pragma once
// Pretrained weights from any of the files a run meets, for fine-tuning:
// safetensors (Hugging Face, trainkit's save_safetensors), a trainkit
// checkpoint's model part (a file, a sharded folder, or a run folder's
// newest checkpoint), the model of a folder PyTorch's dcp.save wrote
// (tensors "model.<name>"), and a state
// dict saved by Python's torch.save. The format is told from the file's
// bytes, not its name.
//
//   auto report = io::load_weights(model, "pretrained.pt",
//                                  {.rename = {{"backbone.", "encoder."}}, .strict = false});
//   std::cout << report.summary() << "\n";  // the new head is missing: trained from its init
#include <torch/nn/module.h>

#include <filesystem>
#include <string>

#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint.hpp"
#include "trainkit/io/named_tensors.hpp"
#include "trainkit/io/safetensors.hpp"
#include "trainkit/io/torch_save.hpp"

namespace trainkit::io {

/// The model part of checkpoint `ckpt` (read from `file`), by the model's
/// names; a sharded one's tensors are read whole.
inline NamedTensors checkpoint_model(const Checkpoint& ckpt, const std::filesystem::path& file) {
  const auto part = ckpt.parts.find("model");
  if (part == ckpt.parts.end() && !ckpt.written_by_pytorch)
    throw Error("trainkit: " + file.string() + ": a checkpoint without a model part");
  NamedTensors out;
  if (part != ckpt.parts.end())
    out.assign(part->second.tensors.begin(), part->second.tensors.end());
  if (ckpt.sharded) {
    for (const auto& [name, info] : ckpt.sharded->tensors()) {
      if (name.rfind("model.", 0) == 0)
        out.emplace_back(name.substr(6), ckpt.sharded->read_whole(name));
    }
  }
  return out;
}

/// The tensors of a weights file (see above), or of the newest checkpoint
/// in a run folder; a checkpoint gives its model part, by the model's names.
inline NamedTensors read_weights(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) {
    const auto found = read_newest_checkpoint(path, &read_checkpoint, false);
    return checkpoint_model(found->checkpoint, found->file);
  }
  if (!std::filesystem::exists(path)) throw Error("trainkit: no weights file " + path.string());
  auto bytes = read_file(path);
  if (looks_like_torch_save(bytes)) return from_torch_save(bytes, path.string());
  if (looks_like_pickle(bytes)) {
    throw Error("trainkit: " + path.string() +
                ": a plain Python pickle (pickle.dump, or a torch.save whose file is not a zip "
                "archive), not a weights file trainkit reads: save it with torch.save (PyTorch "
                "1.6 or later) or as safetensors");
  }
  auto st = from_safetensors(bytes, path.string());
  // A checkpoint is a safetensors file; read again as one, its CRC is checked.
  if (st.metadata.count("trainkit.checkpoint"))
    return checkpoint_model(from_checkpoint_bytes(std::move(bytes), path.string()), path);
  return std::move(st.tensors);
}

/// Loads the weights `path` holds (read_weights) into `module`.
inline LoadReport load_weights(torch::nn::Module& module, const std::filesystem::path& path,
                               const LoadOptions& options = {}) {
  return load_weights(module, read_weights(path), options, path.string());
}

/// Saves `module`'s parameters and buffers by name: `.safetensors` for
/// Python's safetensors (and read_weights), `.pt` or `.pth` as a state dict
/// for Python's `model.load_state_dict(torch.load(path))`.
inline void save_weights(const std::filesystem::path& path, torch::nn::Module& module) {
  const auto ext = path.extension().string();
  if (ext == ".safetensors") {
    save_safetensors(path, module);
  } else if (ext == ".pt" || ext == ".pth") {
    save_torch_save(path, module_tensors(module));
  } else {
    throw Error("trainkit: save_weights: path \"" + path.string() + "\" ends in \"" + ext +
                "\"; accepted: .safetensors, .pt, .pth");
  }
}

}  // namespace trainkit::io
