#pragma once
// safetensors: 8-byte little-endian header length, a JSON header mapping each
// tensor name to {dtype, shape, data_offsets} (plus an optional
// "__metadata__" of strings), then the raw little-endian data. Models written
// here load in Python's `safetensors`/`transformers` and the reverse.
//
// Reading treats the file as hostile: every length and offset is checked
// (header within the file, offsets contiguous from 0 and covering the data
// exactly, each range = numel x dtype size) before any byte is used, and an
// error names the file and the first problem.
#include <torch/nn/module.h>
#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trainkit/detail/sizes.hpp"
#include "trainkit/error.hpp"
#include "trainkit/io/atomic_file.hpp"
#include "trainkit/io/named_tensors.hpp"
#include "trainkit/io/tensor_spec.hpp"

namespace trainkit::io {

static_assert(std::endian::native == std::endian::little,
              "trainkit::io writes little-endian data and supports little-endian hosts only");

struct Safetensors {
  NamedTensors tensors;                         ///< in data order (by offset)
  std::map<std::string, std::string> metadata;  ///< "__metadata__"
};

namespace detail {

inline const std::vector<std::pair<const char*, at::ScalarType>>& dtype_names() {
  static const std::vector<std::pair<const char*, at::ScalarType>> names = {
      {"BOOL", at::kBool}, {"U8", at::kByte},   {"I8", at::kChar},  {"I16", at::kShort},
      {"I32", at::kInt},   {"I64", at::kLong},  {"F16", at::kHalf}, {"BF16", at::kBFloat16},
      {"F32", at::kFloat}, {"F64", at::kDouble}};
  return names;
}

inline std::string dtype_name(at::ScalarType t) {
  for (const auto& [name, type] : dtype_names())
    if (type == t) return name;
  throw Error(std::string("trainkit: safetensors cannot store dtype ") + c10::toString(t));
}

[[noreturn]] inline void bad_file(const std::string& file, const std::string& what) {
  throw Error("trainkit: " + file + ": not a valid safetensors file: " + what);
}

}  // namespace detail

namespace detail {
/// A safetensors file's header (its length, then the JSON, padded to 8
/// bytes) for tensors of `specs` back to back; `data_bytes` gets their total.
inline std::string safetensors_header(const std::vector<TensorSpec>& specs,
                                      const std::map<std::string, std::string>& metadata,
                                      uint64_t& data_bytes) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& spec : specs) {
    if (spec.name == "__metadata__" || header.contains(spec.name)) {
      throw Error("trainkit: safetensors tensor name \"" + spec.name +
                  "\" is reserved or repeated");
    }
    const uint64_t bytes =
        uint64_t(c10::multiply_integers(spec.shape)) * uint64_t(at::elementSize(spec.dtype));
    header[spec.name] = {{"dtype", dtype_name(spec.dtype)},
                         {"shape", spec.shape},
                         {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // the format pads the header to 8 bytes
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  data_bytes = offset;
  return out + json;
}
inline std::string_view bytes_of(const at::Tensor& contiguous) {
  return {static_cast<const char*>(contiguous.data_ptr()),
          size_t(contiguous.numel()) * contiguous.element_size()};
}
}  // namespace detail

/// The bytes of a safetensors file holding `tensors` and `metadata`.
inline std::string to_safetensors(const NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata = {}) {
  std::vector<TensorSpec> specs;
  std::vector<at::Tensor> contiguous;
  for (const auto& [name, t] : tensors) {
    contiguous.push_back(t.detach().to(at::kCPU).contiguous());
    specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  }
  uint64_t data_bytes = 0;
  auto out = detail::safetensors_header(specs, metadata, data_bytes);
  out.reserve(out.size() + data_bytes);
  for (const auto& c : contiguous) out += detail::bytes_of(c);
  return out;
}

/// A safetensors file written tensor by tensor, atomically: the header
/// first, from `specs`, so the tensors need not all be at hand (io/convert.hpp).
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                    const std::map<std::string, std::string>& metadata = {})
      : specs_(std::move(specs)), file_(path) {
    uint64_t data_bytes = 0;
    file_.write(detail::safetensors_header(specs_, metadata, data_bytes));
  }
  /// The next tensor, in the specs' order.
  void write(const at::Tensor& t) {
    detail::next_spec(specs_, written_++, t);
    file_.write(detail::bytes_of(t.detach().to(at::kCPU).contiguous()));
  }
  /// Puts the file in place: every tensor must be written.
  void commit() {
    detail::require_all_written(specs_, written_);
    file_.commit();
  }

 private:
  std::vector<TensorSpec> specs_;
  size_t written_ = 0;
  AtomicFile file_;
};

/// Parses and checks a whole safetensors file held in `bytes`; `file` names it in errors.
inline Safetensors from_safetensors(const std::string& bytes, const std::string& file) {
  using detail::bad_file;
  if (bytes.size() < 8) bad_file(file, "shorter than the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > (uint64_t(100) << 20)) bad_file(file, "header length " + std::to_string(n) + " > 100 MB");
  if (n > bytes.size() - 8) {
    bad_file(file, "header length " + std::to_string(n) + " runs past the end of the file (" +
                       std::to_string(bytes.size()) + " bytes)");
  }
  if (n == 0 || bytes[8] != '{') bad_file(file, "the header does not start with '{'");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + int64_t(n));
  } catch (const nlohmann::json::exception& e) {
    bad_file(file, std::string("the header is not valid JSON (") + e.what() + ")");
  }
  if (!header.is_object()) bad_file(file, "the header is not a JSON object");
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;

  Safetensors out;
  struct Range {
    uint64_t begin, end;
    std::string name;
    size_t index;  // in out.tensors
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad_file(file, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) bad_file(file, "__metadata__[\"" + key + "\"] is not a string");
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const auto where = "tensor \"" + name + "\"";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets") || !entry["dtype"].is_string() ||
        !entry["shape"].is_array() || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      bad_file(file, where + " needs dtype, shape and data_offsets [begin, end]");
    }
    const auto dtype = entry["dtype"].get<std::string>();
    at::ScalarType type = at::kFloat;
    bool known = false;
    for (const auto& [dname, t] : detail::dtype_names()) {
      if (dtype == dname) type = t, known = true;
    }
    if (!known) bad_file(file, where + " has unknown or unsupported dtype \"" + dtype + "\"");
    std::vector<uint64_t> dims;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) bad_file(file, where + " has a shape entry that is not a size");
      dims.push_back(d.get<uint64_t>());
    }
    // Overflow checked: a byte count that wraps around could match a small range.
    const auto numel = trainkit::detail::checked_numel(dims);
    uint64_t expected = 0;
    if (!numel || c10::mul_overflows(*numel, uint64_t(at::elementSize(type)), &expected) ||
        expected > uint64_t(std::numeric_limits<int64_t>::max())) {
      bad_file(file, where + " is too large (shape [" + trainkit::detail::join_sizes(dims) +
                         "] of " + dtype + ")");
    }
    const std::vector<int64_t> shape(dims.begin(), dims.end());
    const auto& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      bad_file(file, where + " has data_offsets that are not sizes");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (end < begin || end - begin != expected) {
      bad_file(file, where + " has data_offsets [" + std::to_string(begin) + ", " +
                         std::to_string(end) + "] but its dtype and shape need " +
                         std::to_string(expected) + " bytes");
    }
    if (end > data_size) {
      bad_file(file, where + " ends at byte " + std::to_string(end) + " of a " +
                         std::to_string(data_size) + "-byte data section (truncated?)");
    }
    ranges.push_back({begin, end, name, out.tensors.size()});
    auto t = at::empty(shape, at::TensorOptions().dtype(type));
    if (expected > 0) std::memcpy(t.data_ptr(), data + begin, expected);
    if (type == at::kBool) {  // a bool other than 0 or 1 is undefined behaviour to read
      const auto* b = reinterpret_cast<const uint8_t*>(data + begin);
      if (std::any_of(b, b + expected, [](uint8_t x) { return x > 1; }))
        bad_file(file, where + " is BOOL but holds bytes other than 0 and 1");
    }
    out.tensors.emplace_back(name, std::move(t));
  }
  std::stable_sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  uint64_t cursor = 0;
  for (const auto& r : ranges) {
    if (r.begin != cursor) {
      bad_file(file,
               "tensor \"" + r.name + "\" starts at byte " + std::to_string(r.begin) +
                   (r.begin < cursor ? ", overlapping the tensor before it"
                                     : ", leaving a gap after byte " + std::to_string(cursor)));
    }
    cursor = r.end;
  }
  if (cursor != data_size) {
    bad_file(file, "the tensors cover " + std::to_string(cursor) + " of the " +
                       std::to_string(data_size) + " data bytes");
  }
  // In data order: a file's one order whatever its header's key order (so a
  // round trip keeps the writer's order).
  NamedTensors in_data_order;
  for (const auto& r : ranges) in_data_order.push_back(std::move(out.tensors[r.index]));
  out.tensors = std::move(in_data_order);
  return out;
}

/// Writes `tensors` (and string `metadata`) to `path` atomically.
inline void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                             const std::map<std::string, std::string>& metadata = {}) {
  write_file_atomically(path, to_safetensors(tensors, metadata));
}

inline Safetensors load_safetensors(const std::filesystem::path& path) {
  return from_safetensors(read_file(path), path.string());
}

/// Saves a module's weights; they load in Python with safetensors.torch.load_file.
inline void save_safetensors(const std::filesystem::path& path, torch::nn::Module& module) {
  save_safetensors(path, module_tensors(module), {{"format", "pt"}});
}

/// Loads weights into `module` in place, strictly (nothing changes unless
/// every name and shape matches); io/weights.hpp loads the other formats,
/// non-strictly and renamed.
inline LoadReport load_safetensors(const std::filesystem::path& path, torch::nn::Module& module,
                                   const LoadOptions& options = {}) {
  return load_weights(module, load_safetensors(path).tensors, options, path.string());
}

}  // namespace trainkit::io
