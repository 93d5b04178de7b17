#pragma once
// The sharded checkpoint: a folder that no rank has to hold whole. Each rank
// writes the boxes of the tensors it holds to its own file, in the layout of
// PyTorch's distributed checkpoint (DCP): `__<rank>_0.distcp`, each box a
// torch.save archive of one tensor, back to back. One rank then writes the
// index, `trainkit.json` (every tensor's dtype and shape, each box's file,
// byte range and CRC-32, and the parts' plain values), and DCP's index of
// the same tensors, `.metadata` (io/dcp_metadata.hpp), and puts the whole
// folder in place of the target in one rename: a folder named *.ckpt is
// always complete, and a crash at any point of a save leaves the previous
// checkpoint the newest one. Reading parses the index and reads, for each box
// a rank asks for, only the stored boxes that overlap it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/safe_numerics.h>
#include <nlohmann/json.hpp>

#include "trainkit/io/atomic_file.hpp"
#include "trainkit/io/checkpoint_codec.hpp"
#include "trainkit/io/checkpoint_values.hpp"
#include "trainkit/io/dcp_metadata.hpp"
#include "trainkit/io/safetensors.hpp"
#include "trainkit/io/torch_save.hpp"

namespace trainkit::io {

namespace sharded {

inline constexpr const char* kIndexFile = checkpoint_folder::kShardedIndex;
inline constexpr int kVersion = 1;

/// Rank `rank`'s data file, as DCP names it.
inline std::string data_file(int rank) {
  return "__" + std::to_string(rank) + "_0.distcp";
}

namespace detail {
/// The dtype a name of the index stands for (safetensors' names: "F32").
inline at::ScalarType dtype_of(const std::string& name, const std::string& where) {
  for (const auto& [n, t] : io::detail::dtype_names())
    if (n == name) return t;
  throw Error(where + "unknown dtype \"" + name + "\"");
}
/// Bytes [offset, offset + length) of `file`.
inline std::string read_range(const std::filesystem::path& file, uint64_t offset, uint64_t length) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("trainkit: cannot open " + file.string() + ": " + std::strerror(errno));
  std::string out(length, '\0');
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, out.data() + done, length - done, off_t(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw Error("trainkit: " + file.string() + " ends before byte " +
                  std::to_string(offset + length) + ": truncated");
    }
    done += uint64_t(n);
  }
  ::close(fd);
  return out;
}
/// The tensors of a trainkit.json index (make_index's "tensors").
inline dcp::StoredTensors stored_tensors(const nlohmann::json& tensors, const std::string& where) {
  dcp::StoredTensors out;
  for (const auto& [name, t] : tensors.items()) {
    auto& stored = out[name];
    stored.dtype = dtype_of(t.at("dtype").get<std::string>(), where);
    stored.shape = t.at("shape").get<std::vector<int64_t>>();
    for (const auto& c : t.at("chunks")) {
      stored.chunks.push_back(
          {{c.at("offsets").get<std::vector<int64_t>>(), c.at("sizes").get<std::vector<int64_t>>()},
           c.at("file").get<std::string>(),
           c.at("offset").get<uint64_t>(),
           c.at("length").get<uint64_t>(),
           c.at("crc32").get<uint32_t>()});
    }
  }
  return out;
}
}  // namespace detail

/// Writes `pieces` to `staging`/__<rank>_0.distcp; returns their index
/// entries (a JSON array).
inline std::string write_pieces(const std::filesystem::path& staging, int rank,
                                const std::vector<TensorPiece>& pieces) {
  const auto name = data_file(rank);
  AtomicFile file(staging / name);
  auto entries = nlohmann::json::array();
  for (const auto& piece : pieces) {
    const auto bytes = to_torch_save(piece.data);
    entries.push_back({{"name", piece.name},
                       {"dtype", io::detail::dtype_name(piece.data.scalar_type())},
                       {"shape", piece.shape},
                       {"offsets", piece.box.offsets},
                       {"sizes", piece.box.sizes},
                       {"file", name},
                       {"offset", file.size()},
                       {"length", bytes.size()},
                       {"crc32", io::detail::crc_of(bytes)}});
    file.write(bytes);
  }
  file.commit();
  return entries.dump();
}

/// The index from every rank's entries and the parts' values; checks that
/// each tensor's boxes lie inside it and add up to it.
inline nlohmann::json make_index(const Checkpoint& values,
                                 const std::vector<std::string>& entries) {
  nlohmann::json index = {{"trainkit.sharded_checkpoint", kVersion},
                          {"values", values_to_json(values)},
                          {"tensors", nlohmann::json::object()}};
  auto& tensors = index["tensors"];
  std::map<std::string, int64_t> covered;
  for (const auto& text : entries) {
    for (auto& e : nlohmann::json::parse(text)) {
      const auto name = e.at("name").get<std::string>();
      auto& t = tensors[name];
      if (t.is_null()) {
        t = {{"dtype", e.at("dtype")},
             {"shape", e.at("shape")},
             {"chunks", nlohmann::json::array()}};
      } else if (t["dtype"] != e.at("dtype") || t["shape"] != e.at("shape")) {
        throw Error("trainkit: sharded checkpoint: ranks disagree on tensor \"" + name + "\" (" +
                    t["dtype"].dump() + t["shape"].dump() + " and " + e.at("dtype").dump() +
                    e.at("shape").dump() + ")");
      }
      const TensorBox box{e.at("offsets").get<std::vector<int64_t>>(),
                          e.at("sizes").get<std::vector<int64_t>>()};
      covered[name] += box.numel();
      for (const auto key : {"name", "dtype", "shape"}) e.erase(key);
      t["chunks"].push_back(std::move(e));
    }
  }
  for (const auto& [name, t] : tensors.items()) {
    int64_t numel = 1;
    for (const auto& s : t["shape"]) numel *= s.get<int64_t>();
    if (covered[name] != numel) {
      throw Error("trainkit: sharded checkpoint: the ranks' boxes of \"" + name + "\" hold " +
                  std::to_string(covered[name]) + " elements, the tensor " + std::to_string(numel));
    }
  }
  return index;
}

/// Writes the index into `staging` and puts `staging` in place of `target`:
/// renamed, or exchanged with an older `target` (renameat2) that is then
/// removed. On filesystems without the exchange the old one is moved aside
/// first, so a crash between the two renames leaves neither under `target`
/// (an older checkpoint in the folder stays the newest).
inline void commit(const std::filesystem::path& staging, const std::filesystem::path& target,
                   const Checkpoint& values, const std::vector<std::string>& entries) {
  const auto index = make_index(values, entries);
  // PyTorch's index too: dcp.load reads the model (docs/checkpoints.md)
  write_file_atomically(staging / dcp::kMetadataFile, dcp::metadata_pickle(detail::stored_tensors(
                                                          index["tensors"], "trainkit: ")));
  write_file_atomically(staging / kIndexFile, index.dump(1));
  namespace fs = std::filesystem;
  if (!fs::exists(target)) {
    fs::rename(staging, target);
  } else if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) ==
             0) {
    fs::remove_all(staging);  // the older checkpoint, now under the staging name
  } else {
    auto aside = target;
    aside += ".old";
    fs::remove_all(aside);
    fs::rename(target, aside);
    fs::rename(staging, target);
    fs::remove_all(aside);
  }
  io::detail::fsync_dir(target.parent_path());
}

/// The tensors of a sharded checkpoint, read on demand.
class Reader final : public ShardedTensors {
 public:
  /// `stored` as its index (trainkit.json or DCP's .metadata) lists them.
  Reader(std::filesystem::path dir, dcp::StoredTensors stored, const std::string& index)
      : dir_(std::move(dir)), stored_(std::move(stored)) {
    const auto where = "trainkit: " + (dir_ / index).string() + ": ";
    for (const auto& [name, t] : stored_) {
      info_[name] = {t.dtype, t.shape};
      // Each chunk is a torch.save archive of its box, so the whole tensor
      // (allocated before its chunks are read) is no larger than they are.
      for (const auto s : t.shape) {
        if (s < 0) throw Error(where + "\"" + name + "\" has a negative size");
      }
      uint64_t numel = 0;
      const bool overflows = c10::safe_multiplies_u64(t.shape, &numel);
      uint64_t stored_bytes = 0;
      for (const auto& chunk : t.chunks) {
        if (chunk.box.offsets.size() != t.shape.size() || chunk.box.sizes.size() != t.shape.size())
          throw Error(where + "a box of \"" + name + "\" has another number of dimensions");
        for (size_t d = 0; d < t.shape.size(); ++d) {
          if (chunk.box.offsets[d] < 0 || chunk.box.sizes[d] < 0 ||
              chunk.box.sizes[d] > t.shape[d] - chunk.box.offsets[d])
            throw Error(where + "a box of \"" + name + "\" lies outside it");
        }
        if (chunk.file.find('/') != std::string::npos || chunk.file.rfind("..", 0) == 0)
          throw Error(where + "a box of \"" + name + "\" names file \"" + chunk.file + "\"");
        stored_bytes += std::min(chunk.length, ~uint64_t(0) - stored_bytes);
      }
      if (overflows || numel > stored_bytes / c10::elementSize(t.dtype)) {
        throw Error(where + "\"" + name + "\" of shape " + c10::str(c10::IntArrayRef(t.shape)) +
                    " is larger than the " + std::to_string(stored_bytes) +
                    " bytes its chunks hold");
      }
    }
  }

  const std::map<std::string, Info>& tensors() const override { return info_; }

  at::Tensor read(const std::string& name, const TensorBox& box) const override {
    const auto it = info_.find(name);
    if (it == info_.end())
      throw Error("trainkit: " + dir_.string() + ": no tensor \"" + name + "\"");
    auto out = at::empty(box.sizes, at::TensorOptions().dtype(it->second.dtype));
    int64_t filled = 0;
    for (size_t i = 0; i < stored_.at(name).chunks.size(); ++i) {
      const auto& chunk = stored_.at(name).chunks[i];
      auto target = out;
      bool overlaps = true;
      std::vector<std::pair<int64_t, int64_t>>
          ranges;  // per dimension: (first, count) of the overlap
      for (size_t d = 0; d < box.sizes.size() && overlaps; ++d) {
        const auto lo = std::max(box.offsets[d], chunk.box.offsets[d]);
        const auto hi =
            std::min(box.offsets[d] + box.sizes[d], chunk.box.offsets[d] + chunk.box.sizes[d]);
        overlaps = hi > lo;
        ranges.push_back({lo, hi - lo});
      }
      if (!overlaps || box.numel() == 0) continue;
      auto source = load(name, i);
      for (size_t d = 0; d < ranges.size(); ++d) {
        const auto [lo, len] = ranges[d];
        target = target.narrow(int64_t(d), lo - box.offsets[d], len);
        source = source.narrow(int64_t(d), lo - chunk.box.offsets[d], len);
      }
      target.copy_(source);
      filled += target.numel();
    }
    if (filled != box.numel()) {
      throw Error("trainkit: " + dir_.string() + ": the stored boxes of \"" + name + "\" hold " +
                  std::to_string(filled) + " of the " + std::to_string(box.numel()) +
                  " elements asked for");
    }
    return out;
  }

 private:
  /// Chunk `i` of `name`, checked (the last one read is kept: a tensor's
  /// boxes often overlap one stored box several times).
  at::Tensor load(const std::string& name, size_t i) const {
    if (cached_name_ == name && cached_index_ == i) return cached_;
    const auto& chunk = stored_.at(name).chunks[i];
    const auto file = dir_ / chunk.file;
    const auto bytes = detail::read_range(file, chunk.offset, chunk.length);
    const auto where = file.string() + " at byte " + std::to_string(chunk.offset);
    if (chunk.crc && io::detail::crc_of(bytes) != *chunk.crc)
      throw Error("trainkit: " + where + ": checksum mismatch: the file is truncated or corrupt");
    auto t = tensor_from_torch_save(bytes, where);
    if (t.sizes() != c10::IntArrayRef(chunk.box.sizes) || t.scalar_type() != info_.at(name).dtype)
      throw Error("trainkit: " + where + ": the stored box of \"" + name +
                  "\" is not what the index says");
    cached_name_ = name, cached_index_ = i, cached_ = t;
    return t;
  }

  std::filesystem::path dir_;
  dcp::StoredTensors stored_;
  std::map<std::string, Info> info_;
  mutable std::string cached_name_;
  mutable size_t cached_index_ = 0;
  mutable at::Tensor cached_;
};

/// A folder PyTorch's dcp.save wrote (no trainkit.json): its tensors, no parts.
inline Checkpoint read_pytorch(const std::filesystem::path& dir) {
  const auto file = dir / dcp::kMetadataFile;
  Checkpoint ckpt;
  ckpt.sharded = std::make_shared<Reader>(dir, dcp::read_metadata(read_file(file), file.string()),
                                          dcp::kMetadataFile);
  ckpt.written_by_pytorch = true;
  return ckpt;
}

/// A sharded checkpoint's values (the parts, with the tensors whose names
/// hold a '/', read whole: "<part>/<name>") and the reader of the others;
/// or a folder of PyTorch's (read_pytorch).
inline Checkpoint read(const std::filesystem::path& dir) {
  const auto index_file = dir / kIndexFile;
  if (!std::filesystem::exists(index_file) && std::filesystem::exists(dir / dcp::kMetadataFile))
    return read_pytorch(dir);
  const auto where = "trainkit: " + index_file.string() + ": ";
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_file(index_file));
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "not a sharded checkpoint's index (" + e.what() + ")");
  }
  if (!index.is_object() || index.value("trainkit.sharded_checkpoint", 0) != kVersion)
    throw Error(where + "not a sharded checkpoint's index of version " + std::to_string(kVersion));
  Checkpoint ckpt;
  std::shared_ptr<Reader> reader;
  try {
    ckpt = values_from_json(index.at("values"));
    reader = std::make_shared<Reader>(dir, detail::stored_tensors(index.at("tensors"), where),
                                      kIndexFile);
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "unreadable (" + e.what() + ")");
  }
  for (const auto& [name, info] : reader->tensors()) {
    const auto slash = name.find('/');
    if (slash == std::string::npos) continue;
    ckpt.parts[name.substr(0, slash)].tensors[name.substr(slash + 1)] = reader->read_whole(name);
  }
  ckpt.sharded = std::move(reader);
  return ckpt;
}

}  // namespace sharded

}  // namespace trainkit::io
