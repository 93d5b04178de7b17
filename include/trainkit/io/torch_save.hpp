#pragma once
// PyTorch's own file format, as torch.save writes it since PyTorch 1.6: a zip
// archive of <name>/data.pkl, a pickle of the saved object whose tensors
// point at storages stored as <name>/data/<key>. Reading takes what a state
// dict is made of (io/detail/unpickler.hpp: dicts, OrderedDicts, lists,
// numbers, strings, tensors) and treats the file as hostile. Writing gives
// the pickle torch.save writes for a state dict, in LibTorch's own zip
// writer; LibTorch's pickle_save is not used, as it tags its dict with a
// type that Python's weights_only loading refuses.
//
// Not read, each with an Error that says so: the pre-1.6 format
// (_use_new_zipfile_serialization=False), TorchScript archives
// (torch.jit.save: use torch::jit::load), compressed entries, big-endian
// files, and objects other than the containers above (a whole pickled
// nn.Module, NumPy arrays, quantized or sparse tensors).
#include <caffe2/serialize/inline_container.h>
#include <torch/types.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>

#include "trainkit/error.hpp"
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/io/detail/unpickler.hpp"
#include "trainkit/io/detail/zip_reader.hpp"
#include "trainkit/io/named_tensors.hpp"

namespace trainkit::io {

namespace detail {

// A dict's tensors by dotted name: nested dicts and lists add a level
// ("model" -> {"fc.weight": t} is "model.fc.weight"); numbers, strings and
// None are left out (an optimizer's step counts, say). A pickle may share a
// container (or hold it in itself): the depth and the values visited are
// bounded, so such a file is an Error, never a stack overflow or an
// exponential walk.
struct Flattening {
  NamedTensors out;
  std::set<std::string> names;
  uint64_t visits = 0;
  std::string context;
};
inline void flatten(const PyValue& v, const std::string& name, int depth, Flattening& f) {
  auto& [out, seen, visits, context] = f;
  if (depth > 32) throw Error(context + "containers nested more than 32 deep");
  if (++visits > (uint64_t(1) << 24)) throw Error(context + "more than 2^24 values");
  const auto key = [&](const PyValue& k) {
    if (k.kind == PyValue::Kind::String) return k.text;
    if (k.kind == PyValue::Kind::Int) return std::to_string(k.integer);
    throw Error(context + "a dict key that is neither a string nor an integer");
  };
  const auto child = [&](const std::string& k) { return name.empty() ? k : name + "." + k; };
  switch (v.kind) {
    case PyValue::Kind::Tensor:
      if (!seen.insert(name).second) throw Error(context + "two tensors named \"" + name + "\"");
      out.emplace_back(name, v.tensor);
      break;
    case PyValue::Kind::Dict:
      for (const auto& [k, x] : v.dict) flatten(*x, child(key(*k)), depth + 1, f);
      break;
    case PyValue::Kind::List:
    case PyValue::Kind::Tuple:
      for (size_t i = 0; i < v.items.size(); ++i)
        flatten(*v.items[i], child(std::to_string(i)), depth + 1, f);
      break;
    default:
      break;
  }
}

}  // namespace detail

/// Whether `bytes` begin as a torch.save file does: a zip archive (PyTorch
/// 1.6 and later), or the pickled magic number of the format before it
/// (which from_torch_save refuses by name).
inline bool looks_like_torch_save(std::string_view bytes) {
  return bytes.substr(0, 4) == "PK\x03\x04" || bytes.substr(0, 4) == "\x80\x02\x8a\x0a";
}

/// The tensors of the object a torch.save file holds (a state dict, or a
/// dict of them: see detail::flatten), read onto the CPU; tensors that were
/// views of one storage stay views of one tensor. `file` names it in errors.
inline NamedTensors from_torch_save(const std::string& bytes, const std::string& file) {
  const std::string context = "trainkit: " + file + ": not a readable torch.save file: ";
  if (!looks_like_torch_save(bytes)) throw Error(context + "not a zip archive");
  if (bytes.rfind("PK\x03\x04", 0) != 0) {
    throw Error(context +
                "it is in the format before PyTorch 1.6 (_use_new_zipfile_serialization=False), "
                "which is not read; save it again with a newer PyTorch's torch.save");
  }
  const detail::ZipReader zip(bytes, context);
  std::string prefix;
  for (const auto& [name, method] : zip.entries()) {
    const auto slash = name.find('/');
    if (slash != std::string::npos && name.substr(slash) == "/data.pkl")
      prefix = name.substr(0, slash + 1);
  }
  if (prefix.empty()) throw Error(context + "no <name>/data.pkl in the archive");
  if (zip.entries().count(prefix + "constants.pkl")) {
    throw Error(context +
                "it is a TorchScript module (torch.jit.save), not a saved object: "
                "load it with torch::jit::load");
  }
  const auto order = zip.stored(prefix + "byteorder");
  if (order && *order != "little")
    throw Error(context + "byteorder \"" + std::string(*order) + "\" (only little is read)");

  const auto load = [&](const std::string& key, at::ScalarType dtype, uint64_t numel) {
    const auto data = zip.stored(prefix + "data/" + key);
    if (!data) throw Error(context + "no record data/" + key);
    const uint64_t element = uint64_t(at::elementSize(dtype));
    if (numel > data->size() / element || numel * element != data->size()) {
      throw Error(context + "storage " + key + " holds " + std::to_string(data->size()) +
                  " bytes, not " + std::to_string(numel) + " elements of " + c10::toString(dtype));
    }
    if (dtype == at::kBool &&
        data->find_first_not_of(std::string_view("\0\1", 2)) != std::string_view::npos) {
      throw Error(context + "storage " + key + " is bool but holds bytes other than 0 and 1");
    }
    auto t = at::empty({int64_t(numel)}, at::TensorOptions().dtype(dtype));
    if (numel > 0) std::memcpy(t.data_ptr(), data->data(), data->size());
    return t;
  };
  detail::Unpickler unpickler(*zip.stored(prefix + "data.pkl"), load, context);
  const auto& top = unpickler.run();
  if (top.kind != detail::PyValue::Kind::Dict) throw Error(context + "it holds no dict of tensors");
  detail::Flattening flattened{{}, {}, 0, context};
  detail::flatten(top, "", 0, flattened);
  return std::move(flattened.out);
}

inline NamedTensors load_torch_save(const std::filesystem::path& path) {
  return from_torch_save(read_file(path), path.string());
}

/// The bytes of a torch.save file holding `tensors` as an OrderedDict by
/// name (what Python's `model.load_state_dict(torch.load(path))` takes, with
/// weights_only too): the pickle torch.save writes for a state dict, one
/// storage per tensor, in LibTorch's own zip writer.
inline std::string to_torch_save(const NamedTensors& tensors) {
  std::string pickle = "\x80\x02";  // protocol 2, as torch.save
  const auto text = [&](const std::string& s) {
    const auto n = uint32_t(s.size());
    pickle += 'X';
    pickle.append(reinterpret_cast<const char*>(&n), 4);
    pickle += s;
  };
  const auto integer = [&](int64_t v) {  // LONG1 of 8 bytes
    pickle += "\x8a\x08";
    pickle.append(reinterpret_cast<const char*>(&v), 8);
  };
  const auto tuple = [&](c10::IntArrayRef values) {
    pickle += '(';
    for (const auto v : values) integer(v);
    pickle += 't';
  };
  const std::string ordered_dict = "ccollections\nOrderedDict\n)R";
  pickle += ordered_dict + "(";
  std::vector<at::Tensor> storages;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (!names.insert(name).second)
      throw Error("trainkit: to_torch_save: tensor name \"" + name + "\" is repeated");
    const auto type = std::find_if(detail::storage_types().begin(), detail::storage_types().end(),
                                   [&](const auto& st) { return st.second == t.scalar_type(); });
    if (type == detail::storage_types().end()) {
      throw Error(std::string("trainkit: to_torch_save: tensor \"") + name + "\" has dtype " +
                  c10::toString(t.scalar_type()) + ", which torch.save's storages do not name");
    }
    auto c = t.detach().to(at::kCPU).contiguous();
    text(name);
    pickle += "ctorch._utils\n_rebuild_tensor_v2\n(";
    pickle += "(";
    text("storage");
    pickle += "ctorch\n" + type->first + "\n";
    text(std::to_string(storages.size()));
    text("cpu");
    integer(c.numel());
    pickle += "tQ";  // the persistent id: a storage
    integer(0);
    tuple(c.sizes());
    tuple(c.strides());
    pickle += "\x89" + ordered_dict + "tR";  // requires_grad False, no hooks
    storages.push_back(std::move(c));
  }
  pickle += "u.";
  std::string out;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      out.append(static_cast<const char*>(data), size);
      return size;
    });
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeRecord("byteorder", "little", 6);
    for (size_t i = 0; i < storages.size(); ++i) {
      const auto& c = storages[i];
      writer.writeRecord("data/" + std::to_string(i), c.data_ptr(), c.nbytes());
    }
    writer.writeEndOfFile();
  }
  return out;
}

/// Writes `tensors` to `path` atomically, for Python's torch.load.
inline void save_torch_save(const std::filesystem::path& path, const NamedTensors& tensors) {
  write_file_atomically(path, to_torch_save(tensors));
}

}  // namespace trainkit::io
