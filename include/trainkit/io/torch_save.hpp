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
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "trainkit/error.hpp"
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/io/detail/pickle.hpp"
#include "trainkit/io/detail/unpickler.hpp"
#include "trainkit/io/detail/zip_reader.hpp"
#include "trainkit/io/named_tensors.hpp"
#include "trainkit/io/tensor_spec.hpp"

namespace trainkit::io {

namespace detail {

// A dict's tensors by dotted name: nested dicts and lists add a level
// ("model" -> {"fc.weight": t} is "model.fc.weight"); numbers, strings and
// None are left out (an optimizer's step counts, say). A pickle may share a
// container through its memo, so a file of a few hundred bytes can reach
// one dict of tensors by millions of paths: the walk enters each container
// once, refuses one of tensors reached twice (a state dict never shares
// one; a shared tuple of betas holds no tensor and is skipped), and bounds
// the names' bytes by the pickle's size, so time and memory stay in
// proportion to the file.
class Flattening {
 public:
  Flattening(std::string context, uint64_t pickle_bytes)
      : context_(std::move(context)),
        name_budget_(kNameBytesPerPickleByte * pickle_bytes + kNameBytesFree) {}

  NamedTensors run(const PyValue& top) {
    walk(top, "", 0);
    return std::move(out_);
  }

  /// The names may total this much per byte of the pickle, plus kNameBytesFree.
  static constexpr uint64_t kNameBytesPerPickleByte = 16, kNameBytesFree = uint64_t(1) << 20;
  static constexpr int kMaxDepth = 32;

 private:
  [[noreturn]] void fail(const std::string& what) const { throw Error(context_ + what); }

  static bool is_container(const PyValue& v) {
    return v.kind == PyValue::Kind::Dict || v.kind == PyValue::Kind::List ||
           v.kind == PyValue::Kind::Tuple;
  }

  // Whether `v` holds a tensor at any depth (each container looked at once;
  // one on the current path counts as holding none, which ends a cycle).
  bool holds_tensor(const PyValue& v, int depth) {
    if (v.kind == PyValue::Kind::Tensor) return true;
    if (!is_container(v)) return false;
    if (depth > kMaxDepth) fail("containers nested more than 32 deep");
    const auto [it, fresh] = holds_.emplace(&v, false);
    if (!fresh) return it->second;
    bool any = false;
    for (const auto* x : v.items) any = any || holds_tensor(*x, depth + 1);
    for (const auto& [k, x] : v.dict) any = any || holds_tensor(*x, depth + 1);
    return holds_[&v] = any;
  }

  std::string key(const PyValue& k) const {
    if (k.kind == PyValue::Kind::String) return k.text;
    if (k.kind == PyValue::Kind::Int) return std::to_string(k.integer);
    fail("a dict key that is neither a string nor an integer");
  }

  void walk(const PyValue& v, const std::string& name, int depth) {
    if (depth > kMaxDepth) fail("containers nested more than 32 deep");
    if (v.kind == PyValue::Kind::Tensor) {
      if (!names_.insert(name).second) fail("two tensors named \"" + name + "\"");
      out_.emplace_back(name, v.tensor);
      return;
    }
    if (!is_container(v)) return;
    const auto [first, fresh] = entered_.emplace(&v, name);
    if (!fresh) {
      if (!holds_tensor(v, depth)) return;  // nothing to name twice
      fail("one container of tensors is both \"" + first->second + "\" and \"" + name +
           "\" (the pickle shares it); a state dict never shares one, and such a file can name "
           "millions of tensors in a few hundred bytes");
    }
    const auto child = [&](const std::string& k) {
      const auto full = name.empty() ? k : name + "." + k;
      if ((name_bytes_ += full.size()) > name_budget_) {
        fail("its names total more than " + std::to_string(name_budget_) + " bytes (" +
             std::to_string(kNameBytesPerPickleByte) +
             " per byte of its pickle, plus 1 MiB): a state dict's names are a fraction of its "
             "pickle");
      }
      return full;
    };
    for (const auto& [k, x] : v.dict) walk(*x, child(key(*k)), depth + 1);
    for (size_t i = 0; i < v.items.size(); ++i)
      walk(*v.items[i], child(std::to_string(i)), depth + 1);
  }

  std::string context_;
  uint64_t name_budget_, name_bytes_ = 0;
  NamedTensors out_;
  std::set<std::string> names_;
  std::unordered_map<const PyValue*, std::string> entered_;  // each container's first path
  std::unordered_map<const PyValue*, bool> holds_;
};

}  // namespace detail

/// Whether `bytes` begin as a torch.save file does: a zip archive (PyTorch
/// 1.6 and later), or the pickled magic number of the format before it
/// (which from_torch_save refuses by name).
inline bool looks_like_torch_save(std::string_view bytes) {
  return bytes.substr(0, 4) == "PK\x03\x04" || bytes.substr(0, 4) == "\x80\x02\x8a\x0a";
}

/// Whether `bytes` begin as a pickle of protocol 2 to 5 does (PROTO n), as
/// a file of Python's pickle.dump does, which is not a torch.save archive.
inline bool looks_like_pickle(std::string_view bytes) {
  return bytes.size() >= 2 && uint8_t(bytes[0]) == 0x80 && bytes[1] >= 2 && bytes[1] <= 5;
}

namespace detail {
/// What a use of a torch.save file's object gets: the object, the context
/// its errors begin with, and the pickle's size.
using TorchSaveUse =
    std::function<void(const PyValue& top, const std::string& context, uint64_t pickle_bytes)>;

/// Calls `use` with the object a torch.save file holds, its tensors read
/// onto the CPU (views of one storage stay views). Not a template: GCC 14
/// fails on the string_view below inside one.
inline void with_torch_save_object(const std::string& bytes, const std::string& file,
                                   const TorchSaveUse& use) {
  const std::string context = "trainkit: " + file + ": not a readable torch.save file: ";
  if (!looks_like_torch_save(bytes)) throw Error(context + "not a zip archive");
  if (bytes.rfind("PK\x03\x04", 0) != 0) {
    throw Error(context +
                "it is in the format before PyTorch 1.6 (_use_new_zipfile_serialization=False), "
                "which is not read; save it again with a newer PyTorch's torch.save");
  }
  const ZipReader zip(bytes, context);
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
  const auto data_pkl = zip.stored(prefix + "data.pkl");
  Unpickler unpickler(*data_pkl, load, context + "data.pkl: ");
  use(unpickler.run(), context, uint64_t(data_pkl->size()));
}
}  // namespace detail

/// The tensors of the object a torch.save file holds (a state dict, or a
/// dict of them: see detail::flatten), read onto the CPU; tensors that were
/// views of one storage stay views of one tensor. `file` names it in errors.
inline NamedTensors from_torch_save(const std::string& bytes, const std::string& file) {
  NamedTensors out;
  detail::with_torch_save_object(
      bytes, file, [&](const detail::PyValue& top, const std::string& context, uint64_t size) {
        if (top.kind != detail::PyValue::Kind::Dict)
          throw Error(context + "it holds no dict of tensors");
        out = detail::Flattening(context, size).run(top);
      });
  return out;
}

/// The tensor a torch.save file of one tensor holds (`torch.save(t, f)`:
/// each chunk of PyTorch's distributed checkpoint is one).
inline at::Tensor tensor_from_torch_save(const std::string& bytes, const std::string& file) {
  at::Tensor out;
  detail::with_torch_save_object(
      bytes, file, [&](const detail::PyValue& top, const std::string& context, uint64_t) {
        if (top.kind != detail::PyValue::Kind::Tensor) throw Error(context + "it holds no tensor");
        out = top.tensor;
      });
  return out;
}

inline NamedTensors load_torch_save(const std::filesystem::path& path) {
  return from_torch_save(read_file(path), path.string());
}

namespace detail {
/// The pickle torch.save writes (protocol 2) and its storages, made value by value.
class TorchSavePickler {
 public:
  void text(const std::string& s) { pickle_.text(s); }
  PickleWriter& pickle() { return pickle_; }
  /// torch._utils._rebuild_tensor_v2 of `t` (copied to the CPU, contiguous);
  /// `what` names it in errors.
  void tensor(const at::Tensor& t, const std::string& what) {
    auto c = t.detach().to(at::kCPU).contiguous();
    reference(c.scalar_type(), c.sizes(), what);
    storages_.push_back(std::move(c));
  }
  /// The same for a tensor of `dtype` and `sizes` (contiguous) whose
  /// storage, the next one, is written later (TorchSaveWriter).
  void reference(at::ScalarType dtype, c10::IntArrayRef sizes, const std::string& what) {
    const auto type = std::find_if(storage_types().begin(), storage_types().end(),
                                   [&](const auto& st) { return st.second == dtype; });
    if (type == storage_types().end()) {
      throw Error("trainkit: to_torch_save: " + what + " has dtype " + c10::toString(dtype) +
                  ", which torch.save's storages do not name");
    }
    pickle_.global("torch._utils", "_rebuild_tensor_v2").op({Op::Mark, Op::Mark}).text("storage");
    pickle_.global("torch", type->first).text(std::to_string(references_++)).text("cpu");
    pickle_.integer(c10::multiply_integers(sizes)).op({Op::Tuple, Op::BinPersId});  // a storage
    pickle_.integer(0).tuple(sizes).tuple(c10::contiguous_strides(sizes));
    pickle_.op({Op::NewFalse}).ordered_dict().op({Op::Tuple, Op::Reduce});  // no grad, no hooks
  }
  /// The pickle so far, ended with STOP.
  std::string pickled() const { return pickle_.finish(); }
  /// The zip archive, the pickle ended with STOP.
  std::string finish() {
    const auto pickled = this->pickled();
    std::string out;
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
      out.append(static_cast<const char*>(data), size);
      return size;
    });
    writer.writeRecord("data.pkl", pickled.data(), pickled.size());
    writer.writeRecord("byteorder", "little", 6);
    for (size_t i = 0; i < storages_.size(); ++i) {
      const auto& c = storages_[i];
      writer.writeRecord("data/" + std::to_string(i), c.data_ptr(), c.nbytes());
    }
    writer.writeEndOfFile();
    return out;
  }

 private:
  PickleWriter pickle_;
  std::vector<at::Tensor> storages_;
  size_t references_ = 0;
};
}  // namespace detail

/// The bytes of a torch.save file holding `tensors` as an OrderedDict by
/// name (what Python's `model.load_state_dict(torch.load(path))` takes, with
/// weights_only too): the pickle torch.save writes for a state dict, one
/// storage per tensor, in LibTorch's own zip writer.
inline std::string to_torch_save(const NamedTensors& tensors) {
  detail::TorchSavePickler pickler;
  pickler.pickle().ordered_dict().op({detail::Op::Mark});
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (!names.insert(name).second)
      throw Error("trainkit: to_torch_save: tensor name \"" + name + "\" is repeated");
    pickler.text(name);
    pickler.tensor(t, "tensor \"" + name + "\"");
  }
  pickler.pickle().op({detail::Op::SetItems});
  return pickler.finish();
}

/// The bytes of `torch.save(t, f)`: one tensor, as PyTorch's distributed
/// checkpoint stores each chunk.
inline std::string to_torch_save(const at::Tensor& t) {
  detail::TorchSavePickler pickler;
  pickler.tensor(t, "the tensor");
  return pickler.finish();
}

/// A torch.save file of a state dict written tensor by tensor, atomically:
/// the pickle first, from `specs`, then each tensor's storage as it comes,
/// so the tensors need not all be at hand (io/convert.hpp).
class TorchSaveWriter {
 public:
  TorchSaveWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs)
      : specs_(std::move(specs)), file_(path) {
    detail::TorchSavePickler pickler;
    pickler.pickle().ordered_dict().op({detail::Op::Mark});
    for (const auto& spec : specs_) {
      pickler.text(spec.name);
      pickler.reference(spec.dtype, spec.shape, "tensor \"" + spec.name + "\"");
    }
    pickler.pickle().op({detail::Op::SetItems});
    const auto pickled = pickler.pickled();
    writer_.writeRecord("data.pkl", pickled.data(), pickled.size());
    writer_.writeRecord("byteorder", "little", 6);
  }
  /// The next tensor, in the specs' order.
  void write(const at::Tensor& t) {
    detail::next_spec(specs_, written_, t);
    const auto c = t.detach().to(at::kCPU).contiguous();
    writer_.writeRecord("data/" + std::to_string(written_++), c.data_ptr(), c.nbytes());
  }
  /// Ends the archive and puts the file in place: every tensor must be written.
  void commit() {
    detail::require_all_written(specs_, written_);
    writer_.writeEndOfFile();
    file_.commit();
  }

 private:
  std::vector<TensorSpec> specs_;
  size_t written_ = 0;
  AtomicFile file_;
  caffe2::serialize::PyTorchStreamWriter writer_{[this](const void* data, size_t size) {
    file_.write(std::string_view(static_cast<const char*>(data), size));
    return size;
  }};
};

/// Writes `tensors` to `path` atomically, for Python's torch.load.
inline void save_torch_save(const std::filesystem::path& path, const NamedTensors& tensors) {
  write_file_atomically(path, to_torch_save(tensors));
}

}  // namespace trainkit::io
