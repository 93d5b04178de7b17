#pragma once
// The records of a zip archive as torch.save writes them: stored (not
// compressed) entries, zip64 where the archive is large. The archive is
// hostile input: every offset and size is checked against the bytes before
// it is used, and a problem is an Error naming the file.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainkit/error.hpp"

namespace trainkit::io::detail {

class ZipReader {
 public:
  /// Indexes the archive in `bytes` (which must outlive the reader); errors
  /// are `context` (which names the file) followed by the problem.
  ZipReader(std::string_view bytes, std::string context)
      : bytes_(bytes), context_(std::move(context)) {
    index();
  }

  /// The archive's entries by name, each with its compression method (0: stored).
  const std::map<std::string, uint16_t>& entries() const { return methods_; }

  /// The bytes of entry `name`, which must be stored (torch.save compresses
  /// nothing; TorchScript's code entries are deflated, and not read).
  std::optional<std::string_view> stored(const std::string& name) const {
    const auto found = records_.find(name);
    if (found == records_.end()) return std::nullopt;
    if (const auto method = methods_.at(name); method != 0) {
      fail("entry \"" + name + "\" is compressed (method " + std::to_string(method) +
           "); torch.save stores its entries uncompressed, and only those are read");
    }
    return found->second;
  }

  [[noreturn]] void fail(const std::string& what) const { throw Error(context_ + what); }

 private:
  static constexpr uint32_t kEndOfDirectory = 0x06054b50, kZip64End = 0x06064b50,
                            kZip64Locator = 0x07064b50, kDirectoryEntry = 0x02014b50,
                            kLocalHeader = 0x04034b50;

  template <class T>
  T read(uint64_t at) const {
    if (at > bytes_.size() || sizeof(T) > bytes_.size() - at)
      fail("a zip structure at byte " + std::to_string(at) + " runs past the end of the file");
    T v;
    std::memcpy(&v, bytes_.data() + at, sizeof(T));  // zip is little-endian, as the host
    return v;
  }

  uint64_t find_end_of_directory() const {
    constexpr uint64_t kFixed = 22, kMaxComment = 0xffff;
    if (bytes_.size() < kFixed) fail("too short for a zip archive");
    const uint64_t last = bytes_.size() - kFixed;
    const uint64_t first = last > kMaxComment ? last - kMaxComment : 0;
    for (uint64_t at = last + 1; at-- > first;)
      if (read<uint32_t>(at) == kEndOfDirectory) return at;
    fail("no zip end-of-central-directory record (truncated, or not a zip archive)");
  }

  void index() {
    const uint64_t end = find_end_of_directory();
    uint64_t count = read<uint16_t>(end + 10), size = read<uint32_t>(end + 12),
             offset = read<uint32_t>(end + 16);
    if (count == 0xffff || size == 0xffffffff || offset == 0xffffffff) {  // zip64
      if (end < 20 || read<uint32_t>(end - 20) != kZip64Locator) fail("no zip64 locator");
      const uint64_t z = read<uint64_t>(end - 20 + 8);
      if (read<uint32_t>(z) != kZip64End) fail("no zip64 end-of-central-directory record");
      count = read<uint64_t>(z + 32), size = read<uint64_t>(z + 40),
      offset = read<uint64_t>(z + 48);
    }
    if (offset > bytes_.size() || size > bytes_.size() - offset)
      fail("the central directory lies outside the file");
    uint64_t at = offset;
    for (uint64_t i = 0; i < count; ++i) at = entry(at, offset + size);
    // Each record (local header and bytes) lies apart from the others and
    // from the directory: a record that shares another's bytes is forged.
    spans_.push_back({offset, offset + size, "the central directory"});
    std::sort(spans_.begin(), spans_.end());
    for (size_t i = 1; i < spans_.size(); ++i) {
      if (spans_[i].begin < spans_[i - 1].end)
        fail(spans_[i - 1].what + " and " + spans_[i].what + " overlap in the file");
    }
  }

  // Reads the directory entry at `at` (which must end by `limit`) and its
  // record; returns where the next entry starts.
  uint64_t entry(uint64_t at, uint64_t limit) {
    if (read<uint32_t>(at) != kDirectoryEntry) fail("a central directory entry is corrupt");
    const uint16_t method = read<uint16_t>(at + 10), name_length = read<uint16_t>(at + 28),
                   extra_length = read<uint16_t>(at + 30), comment_length = read<uint16_t>(at + 32);
    uint64_t compressed = read<uint32_t>(at + 20), size = read<uint32_t>(at + 24),
             local = read<uint32_t>(at + 42);
    const uint64_t next = at + 46 + name_length + extra_length + comment_length;
    if (next > limit) fail("a central directory entry runs past the directory");
    const std::string name(bytes_.substr(at + 46, name_length));
    // zip64 sizes and offset, in this order, for the fields that overflowed.
    for (uint64_t x = at + 46 + name_length; x + 4 <= at + 46 + name_length + extra_length;) {
      const uint16_t id = read<uint16_t>(x), length = read<uint16_t>(x + 2);
      uint64_t field = x + 4;
      if (id == 0x0001) {
        for (uint64_t* v : {&size, &compressed, &local}) {
          if (*v != 0xffffffff) continue;
          if (field + 8 > x + 4 + length) fail("entry \"" + name + "\" has a short zip64 field");
          *v = read<uint64_t>(field), field += 8;
        }
      }
      x += 4 + uint64_t(length);
    }
    if (method == 0 && compressed != size)
      fail("entry \"" + name + "\" is stored with two different sizes");
    if (read<uint32_t>(local) != kLocalHeader) fail("entry \"" + name + "\" has no local header");
    const uint64_t data =
        local + 30 + uint64_t(read<uint16_t>(local + 26)) + read<uint16_t>(local + 28);
    if (data > bytes_.size() || compressed > bytes_.size() - data)
      fail("entry \"" + name + "\" runs past the end of the file (truncated?)");
    spans_.push_back({local, data + compressed, "entry \"" + name + "\""});
    if (!records_.emplace(name, bytes_.substr(data, compressed)).second)
      fail("entry \"" + name + "\" appears twice");
    methods_.emplace(name, method);
    return next;
  }

  struct Span {  // [begin, end) of the file
    uint64_t begin, end;
    std::string what;
    bool operator<(const Span& o) const { return begin < o.begin; }
  };

  std::string_view bytes_;
  std::string context_;
  std::vector<Span> spans_;
  std::map<std::string, std::string_view> records_;
  std::map<std::string, uint16_t> methods_;
};

}  // namespace trainkit::io::detail
