#pragma once
// The index of PyTorch's distributed checkpoint (DCP), the folder's
// `.metadata`: a pickle of torch.distributed.checkpoint.metadata.Metadata,
// which gives each tensor's dtype, global shape and chunks (boxes), and in
// its storage_data each chunk's file and byte range (there, a torch.save
// archive of the chunk). Read with the allow-listed unpickler, taking only
// the classes PyTorch 2.x's FileSystemWriter pickles; written as it writes
// them, so that dcp.load and dcp_to_torch_save read a trainkit checkpoint.
// Values DCP stores as bytes (an optimizer's param_groups) are not read.
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainkit/error.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/io/detail/pickle.hpp"
#include "trainkit/io/detail/unpickler.hpp"

namespace trainkit::io::dcp {

inline constexpr const char* kMetadataFile = checkpoint_folder::kPytorchIndex;

/// One stored box of a tensor: where its torch.save archive lies.
struct StoredChunk {
  TensorBox box;
  std::string file;  ///< in the checkpoint's folder
  uint64_t offset = 0, length = 0;
  std::optional<uint32_t> crc;  ///< CRC-32 of the bytes, where the index has one (trainkit's)
};
struct StoredTensor {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  std::vector<StoredChunk> chunks;
};
/// A sharded checkpoint's tensors by name ("model.fc.weight", ...).
using StoredTensors = std::map<std::string, StoredTensor>;

/// The tensors the `.metadata` pickle `bytes` lists; `file` names it in errors.
inline StoredTensors read_metadata(std::string_view bytes, const std::string& file);
/// The `.metadata` pickle of `tensors`.
inline std::string metadata_pickle(const StoredTensors& tensors);

namespace detail {
using io::detail::PyValue;
inline constexpr const char* kModule = "torch.distributed.checkpoint.metadata";
inline constexpr const char* kFilesystemModule = "torch.distributed.checkpoint.filesystem";

/// The classes DCP's metadata pickles: its dataclasses, torch.Size, the
/// layout and memory-format codes, and a pathlib path (its checkpoint_id).
inline io::detail::PickleClasses metadata_classes() {
  return {{"torch.distributed.checkpoint.metadata.Metadata",
           "torch.distributed.checkpoint.metadata.TensorStorageMetadata",
           "torch.distributed.checkpoint.metadata.BytesStorageMetadata",
           "torch.distributed.checkpoint.metadata.ChunkStorageMetadata",
           "torch.distributed.checkpoint.metadata.TensorProperties",
           "torch.distributed.checkpoint.metadata.MetadataIndex",
           "torch.distributed.checkpoint.metadata.StorageMeta",
           "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING",
           "torch.distributed.checkpoint.filesystem._StorageInfo", "torch.Size",
           "torch.serialization._get_layout", "pathlib.PosixPath", "pathlib._local.PosixPath",
           "pathlib.PurePosixPath", "pathlib._local.PurePosixPath"},
          /*dtypes=*/true};
}

/// Reads the parts of one Metadata pickle, each check naming what it found.
class MetadataReader {
 public:
  explicit MetadataReader(std::string context) : context_(std::move(context)) {}

  StoredTensors run(const PyValue& top) {
    const auto& metadata = object(top, kModule, "Metadata");
    StoredTensors out;
    std::map<std::pair<std::string, std::vector<int64_t>>, const PyValue*> storage;
    for (const auto& [key, info] : dict(attr(metadata, "storage_data"), "storage_data")) {
      const auto& index = object(*key, kModule, "MetadataIndex");
      // an offset of None (a value stored as bytes) is not among the fields
      const auto* offset = find_attr(index, "offset");
      const auto at = std::make_pair(text(attr(index, "fqn"), "MetadataIndex.fqn"),
                                     !offset || offset->kind == PyValue::Kind::None
                                         ? std::vector<int64_t>{}
                                         : size(*offset, "MetadataIndex.offset"));
      storage[at] = info;
    }
    for (const auto& [key, entry] :
         dict(attr(metadata, "state_dict_metadata"), "state_dict_metadata")) {
      const auto name = text(*key, "a state_dict_metadata key");
      if (entry->kind == PyValue::Kind::Object &&
          entry->text == std::string(kModule) + ".BytesStorageMetadata")
        continue;  // a value stored as bytes, not read
      const auto& md = object(*entry, kModule, "TensorStorageMetadata");
      auto& t = out[name];
      t.dtype = dtype(object(attr(md, "properties"), kModule, "TensorProperties"));
      t.shape = size(attr(md, "size"), "TensorStorageMetadata.size");
      for (const auto* c : items(attr(md, "chunks"), PyValue::Kind::List, "chunks")) {
        const auto& chunk = object(*c, kModule, "ChunkStorageMetadata");
        StoredChunk stored{{size(attr(chunk, "offsets"), "ChunkStorageMetadata.offsets"),
                            size(attr(chunk, "sizes"), "ChunkStorageMetadata.sizes")},
                           {},
                           0,
                           0,
                           std::nullopt};
        const auto it = storage.find({name, stored.box.offsets});
        if (it == storage.end()) fail("no storage_data for a chunk of \"" + name + "\"");
        const auto& info = object(*it->second, kFilesystemModule, "_StorageInfo");
        stored.file = text(attr(info, "relative_path"), "_StorageInfo.relative_path");
        stored.offset = count(attr(info, "offset"), "_StorageInfo.offset");
        stored.length = count(attr(info, "length"), "_StorageInfo.length");
        if (const auto* transforms = find_attr(info, "transform_descriptors");
            transforms && transforms->kind != PyValue::Kind::None &&
            !(transforms->kind == PyValue::Kind::List && transforms->items.empty()))
          fail("a chunk of \"" + name + "\" is stored transformed (compressed), which is not read");
        t.chunks.push_back(std::move(stored));
      }
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error(context_ + what); }

  /// `v`, an instance of `module`.`cls`.
  const PyValue& object(const PyValue& v, const char* module, const std::string& cls) const {
    if (v.kind != PyValue::Kind::Object || v.text != module + ("." + cls))
      fail("expected a " + cls + " where it holds " + describe(v));
    return v;
  }
  /// A dataclass's field (its BUILD state is a dict of them).
  const PyValue* find_attr(const PyValue& obj, const std::string& name) const {
    if (!obj.state || obj.state->kind != PyValue::Kind::Dict)
      fail("a " + obj.text + " without its fields");
    for (const auto& [k, v] : obj.state->dict)
      if (k->kind == PyValue::Kind::String && k->text == name) return v;
    return nullptr;
  }
  const PyValue& attr(const PyValue& obj, const std::string& name) const {
    const auto* v = find_attr(obj, name);
    if (!v) fail("a " + obj.text + " without field " + name);
    return *v;
  }
  const std::vector<std::pair<PyValue*, PyValue*>>& dict(const PyValue& v,
                                                         const std::string& what) const {
    if (v.kind != PyValue::Kind::Dict) fail(what + " is not a dict");
    return v.dict;
  }
  const std::vector<PyValue*>& items(const PyValue& v, PyValue::Kind kind,
                                     const std::string& what) const {
    if (v.kind != kind) fail(what + " is " + describe(v));
    return v.items;
  }
  std::string text(const PyValue& v, const std::string& what) const {
    if (v.kind != PyValue::Kind::String) fail(what + " is " + describe(v) + ", not a string");
    return v.text;
  }
  uint64_t count(const PyValue& v, const std::string& what) const {
    if (v.kind != PyValue::Kind::Int || v.integer < 0) fail(what + " is not a count");
    return uint64_t(v.integer);
  }
  /// torch.Size((n, ...)): a count per dimension.
  std::vector<int64_t> size(const PyValue& v, const std::string& what) const {
    if (v.kind != PyValue::Kind::Object || v.text != "torch.Size" || v.items.size() != 1 ||
        v.items[0]->kind != PyValue::Kind::Tuple)
      fail(what + " is " + describe(v) + ", not a torch.Size");
    std::vector<int64_t> out;
    for (const auto* n : v.items[0]->items) out.push_back(int64_t(count(*n, what)));
    return out;
  }
  /// TensorProperties' state: (dtype, layout, requires_grad, memory format, pin_memory).
  at::ScalarType dtype(const PyValue& properties) const {
    const auto* s = properties.state;
    if (!s || s->kind != PyValue::Kind::Tuple || s->items.size() != 5 ||
        s->items[0]->kind != PyValue::Kind::Dtype)
      fail("a TensorProperties without (dtype, layout, ...)");
    const auto& layout = *s->items[1];
    if (layout.kind != PyValue::Kind::Object || layout.text != "torch.serialization._get_layout" ||
        layout.items.size() != 1 || layout.items[0]->kind != PyValue::Kind::String ||
        layout.items[0]->text != "torch.strided")
      fail("a tensor whose layout is not torch.strided (sparse tensors are not read)");
    return s->items[0]->dtype;
  }
  static std::string describe(const PyValue& v) {
    switch (v.kind) {
      case PyValue::Kind::Object:
        return "a " + v.text;
      case PyValue::Kind::Dict:
        return "a dict";
      case PyValue::Kind::List:
        return "a list";
      case PyValue::Kind::Tuple:
        return "a tuple";
      case PyValue::Kind::None:
        return "None";
      default:
        return "a plain value";
    }
  }
  std::string context_;
};

/// How DCP's flattening reached `name` (Metadata.planner_data), so that
/// dcp_to_torch_save nests it again: ("model", "fc.weight"), ("optim",
/// "state", "fc.weight", "exp_avg"); other names stand alone.
inline std::vector<std::string> planner_path(const std::string& name) {
  if (name.rfind("model.", 0) == 0) return {"model", name.substr(6)};
  const std::string state = "optim.state.";
  const auto kind = name.rfind('.');
  if (name.rfind(state, 0) == 0 && kind > state.size())
    return {"optim", "state", name.substr(state.size(), kind - state.size()),
            name.substr(kind + 1)};
  return {name};
}
}  // namespace detail

inline StoredTensors read_metadata(std::string_view bytes, const std::string& file) {
  const std::string context = "trainkit: " + file + ": not a readable DCP metadata file: ";
  if (bytes.size() < 2 || uint8_t(bytes[0]) != 0x80 || bytes[1] < 2 || bytes[1] > 5)
    throw Error(context + "not a pickle of protocol 2 to 5");
  io::detail::Unpickler unpickler(
      bytes,
      [&](const std::string&, at::ScalarType, uint64_t) -> at::Tensor {
        throw Error(context + "it holds a tensor");
      },
      context, detail::metadata_classes());
  return detail::MetadataReader(context).run(unpickler.run());
}

inline std::string metadata_pickle(const StoredTensors& tensors) {
  using io::detail::Op;
  io::detail::PickleWriter p;
  p.begin_object(detail::kModule, "Metadata")
      .text("state_dict_metadata")
      .op({Op::EmptyDict, Op::Mark});
  for (const auto& [name, t] : tensors) {
    const auto dtype =
        std::find_if(io::detail::python_dtypes().begin(), io::detail::python_dtypes().end(),
                     [&](const auto& d) { return d.second == t.dtype; });
    if (dtype == io::detail::python_dtypes().end())
      throw Error("trainkit: DCP metadata: tensor \"" + name + "\" has dtype " +
                  c10::toString(t.dtype) + ", which has no torch name here");
    p.text(name).begin_object(detail::kModule, "TensorStorageMetadata");
    p.text("properties")
        .global(detail::kModule, "TensorProperties")
        .op({Op::EmptyTuple, Op::NewObj, Op::Mark});
    p.global("torch", dtype->first);
    p.global("torch.serialization", "_get_layout")
        .text("torch.strided")
        .op({Op::Tuple1, Op::Reduce});
    p.op({Op::NewFalse})
        .global(detail::kModule, "_MEM_FORMAT_ENCODING")
        .integer(0)
        .op({Op::Tuple1, Op::Reduce});
    p.op({Op::NewFalse, Op::Tuple,
          Op::Build});  // pin_memory False; BUILD: TensorProperties.__setstate__
    p.text("size").torch_size(t.shape).text("chunks").op({Op::EmptyList, Op::Mark});
    for (const auto& c : t.chunks) {
      p.begin_object(detail::kModule, "ChunkStorageMetadata");
      p.text("offsets").torch_size(c.box.offsets);
      p.text("sizes").torch_size(c.box.sizes).end_object();
    }
    p.op({Op::Appends}).end_object();
  }
  p.op({Op::SetItems}).text("planner_data").op({Op::EmptyDict, Op::Mark});
  for (const auto& [name, t] : tensors) {
    p.text(name).op({Op::Mark});
    for (const auto& key : detail::planner_path(name)) p.text(key);
    p.op({Op::Tuple});
  }
  p.op({Op::SetItems}).text("storage_data").op({Op::EmptyDict, Op::Mark});
  for (const auto& [name, t] : tensors) {
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const auto& c = t.chunks[i];
      p.begin_object(detail::kModule, "MetadataIndex").text("fqn").text(name);
      p.text("offset").torch_size(c.box.offsets);
      p.text("index").integer(int64_t(i)).end_object();
      p.begin_object(detail::kFilesystemModule, "_StorageInfo");
      p.text("relative_path").text(c.file).text("offset").integer(int64_t(c.offset));
      p.text("length").integer(int64_t(c.length)).end_object();
    }
  }
  p.op({Op::SetItems}).text("storage_meta").op({Op::None}).end_object();
  return p.finish();
}

}  // namespace trainkit::io::dcp
