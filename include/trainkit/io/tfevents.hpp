#pragma once
// TensorBoard event files, written without TensorFlow or protobuf: Debian's
// protobuf needs generated code and a library to link, which a header-only
// library cannot ship, so the few messages TensorBoard reads are encoded by
// hand here (tests/observe_test.cpp decodes them with an independent reader).
//
// A file is a sequence of records:
//   uint64 length | uint32 masked_crc32c(length) | payload | uint32 masked_crc32c(payload)
// each payload an `Event` message, each record appended whole (AppendFile).
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "trainkit/io/append_file.hpp"

namespace trainkit::io {

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
inline uint32_t crc32c(std::string_view bytes) {
  static constexpr auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xFFFFFFFFu;
  for (const char ch : bytes) crc = table[(crc ^ uint8_t(ch)) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

/// TFRecord's mask: rotate right by 15, add a constant.
inline uint32_t masked_crc32c(std::string_view bytes) {
  const uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/// Protocol-buffer wire format, the subset the event messages need.
class ProtoWriter {
 public:
  ProtoWriter& varint(int field, uint64_t value) {
    key(field, 0);
    put_varint(value);
    return *this;
  }
  ProtoWriter& f64(int field, double value) {
    key(field, 1);
    put_fixed(std::bit_cast<uint64_t>(value), 8);
    return *this;
  }
  ProtoWriter& f32(int field, float value) {
    key(field, 5);
    put_fixed(std::bit_cast<uint32_t>(value), 4);
    return *this;
  }
  ProtoWriter& bytes(int field, std::string_view value) {
    key(field, 2);
    put_varint(value.size());
    out_.append(value);
    return *this;
  }
  ProtoWriter& message(int field, const ProtoWriter& m) { return bytes(field, m.str()); }
  /// A packed `repeated double`.
  ProtoWriter& packed_f64(int field, std::span<const double> values) {
    key(field, 2);
    put_varint(values.size() * 8);
    for (const double v : values) put_fixed(std::bit_cast<uint64_t>(v), 8);
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  void key(int field, int wire_type) { put_varint(uint64_t(field) << 3 | uint64_t(wire_type)); }
  void put_varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(char(v | 0x80));
      v >>= 7;
    }
    out_.push_back(char(v));
  }
  void put_fixed(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(char(v >> (8 * i)));
  }
  std::string out_;
};

/// Summary statistics and buckets of a TensorBoard histogram.
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit;  ///< right edge of each bucket
  std::vector<double> bucket;        ///< count in each bucket
};

/// A hyperparameter value, as the HParams plugin's google.protobuf.Value.
using HParam = std::variant<double, std::string, bool>;

/// Appends events to one TensorBoard event file in `dir`.
class EventWriter {
 public:
  explicit EventWriter(const std::filesystem::path& dir)
      : file_(dir / file_name(), AppendFile::Mode::truncate) {
    ProtoWriter event;
    event.f64(1, wall_time()).bytes(3, "brain.Event:2");  // file_version
    write_record(event.str());
  }

  void scalar(std::string_view tag, int64_t step, double value) {
    ProtoWriter v;
    v.bytes(1, tag).f32(2, float(value));  // Summary.Value.simple_value
    write_summary(step, v);
  }

  void histogram(std::string_view tag, int64_t step, const Histogram& h) {
    ProtoWriter histo;
    histo.f64(1, h.min).f64(2, h.max).f64(3, h.num).f64(4, h.sum).f64(5, h.sum_squares);
    histo.packed_f64(6, h.bucket_limit).packed_f64(7, h.bucket);
    ProtoWriter v;
    v.bytes(1, tag).message(5, histo);  // Summary.Value.histo
    write_summary(step, v);
  }

  /// Markdown text (TensorBoard's Text tab).
  void text(std::string_view tag, int64_t step, std::string_view markdown) {
    ProtoWriter dim, shape, tensor;
    dim.varint(1, 1);
    shape.message(2, dim);
    tensor.varint(1, kDtString).message(2, shape).bytes(8, markdown);
    ProtoWriter v;
    v.bytes(1, tag).message(8, tensor).message(9, plugin_metadata("text", ""));
    write_summary(step, v);
  }

  /// The HParams plugin's session start: this run's hyperparameters. With no
  /// experiment record, TensorBoard builds the HParams table from the sessions
  /// it finds and offers every scalar tag as a metric.
  void hparams_session_start(const std::map<std::string, HParam>& hparams) {
    ProtoWriter start;
    for (const auto& [name, value] : hparams) {
      ProtoWriter entry, proto_value;
      std::visit(
          [&]<class V>(const V& v) {
            if constexpr (std::is_same_v<V, double>) proto_value.f64(2, v);
            if constexpr (std::is_same_v<V, std::string>) proto_value.bytes(3, v);
            if constexpr (std::is_same_v<V, bool>) proto_value.varint(4, v ? 1 : 0);
          },
          value);
      entry.bytes(1, name).message(2, proto_value);
      start.message(1, entry);  // map<string, Value> hparams = 1
    }
    start.f64(5, wall_time());
    write_hparams("_hparams_/session_start_info", 3, start);
  }

  enum class Status { success = 1, failure = 2 };
  void hparams_session_end(Status status) {
    ProtoWriter end;
    end.varint(1, uint64_t(status)).f64(2, wall_time());
    write_hparams("_hparams_/session_end_info", 4, end);
  }

  const std::filesystem::path& path() const { return file_.path(); }

 private:
  static constexpr int kDtFloat = 1, kDtString = 7;

  /// events.out.tfevents.<seconds>.<host>.<pid>.<n>, TensorBoard's pattern.
  static std::string file_name() {
    char host[256] = "localhost";
    ::gethostname(host, sizeof host - 1);
    static std::atomic<int> counter{0};  // two writers in one process, one second: two files
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    return "events.out.tfevents." +
           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count()) + "." +
           host + "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  }

  static double wall_time() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  static ProtoWriter plugin_metadata(std::string_view plugin, std::string_view content) {
    ProtoWriter plugin_data, metadata;
    plugin_data.bytes(1, plugin).bytes(2, content);
    metadata.message(1, plugin_data);
    return metadata;
  }

  /// HParamsPluginData{version = 0, <field> = data} in a tensor-less value.
  void write_hparams(std::string_view tag, int field, const ProtoWriter& data) {
    ProtoWriter content, tensor, v;
    content.varint(1, 0).message(field, data);
    tensor.varint(1, kDtFloat).f32(5, 0.0f);  // the null tensor TensorBoard substitutes
    v.bytes(1, tag).message(8, tensor).message(9, plugin_metadata("hparams", content.str()));
    write_summary(0, v);
  }

  void write_summary(int64_t step, const ProtoWriter& value) {
    ProtoWriter summary, event;
    summary.message(1, value);
    event.f64(1, wall_time()).varint(2, uint64_t(step)).message(5, summary);
    write_record(event.str());
  }

  void write_record(const std::string& payload) {
    std::string record;
    record.reserve(payload.size() + 16);
    auto put = [&](uint64_t v, int n) {
      for (int i = 0; i < n; ++i) record.push_back(char(v >> (8 * i)));
    };
    put(payload.size(), 8);
    put(masked_crc32c(record), 4);
    record += payload;
    put(masked_crc32c(payload), 4);
    file_.append(record);
  }

  AppendFile file_;
};

}  // namespace trainkit::io
