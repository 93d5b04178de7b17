#pragma once
// MNIST in its IDX files (train-images-idx3-ubyte, ..., also gzipped), checked
// for magic numbers and sizes; errors name the file. Images come out
// normalised with MNIST's usual mean and std, as [N, 1, 28, 28] float,
// labels as int64.
#include <torch/types.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "trainkit/data/files.hpp"
#include "trainkit/data/tensor_dataset.hpp"
#include "trainkit/detail/sizes.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

namespace detail {

/// Parses an IDX file of unsigned bytes with `dims` dimensions; `name`
/// names it in errors.
inline at::Tensor parse_idx_u8(const std::string& bytes, uint32_t dims, const std::string& name) {
  const auto* b = reinterpret_cast<const uint8_t*>(bytes.data());
  auto be32 = [&](size_t at) {
    if (bytes.size() < at + 4) throw Error("trainkit: " + name + ": truncated IDX header");
    return uint32_t(b[at]) << 24 | uint32_t(b[at + 1]) << 16 | uint32_t(b[at + 2]) << 8 |
           uint32_t(b[at + 3]);
  };
  const uint32_t magic = be32(0), expected = 0x00000800u | dims;
  if (magic != expected) {
    throw Error("trainkit: " + name + ": bad IDX magic " + std::to_string(magic) + " (expected " +
                std::to_string(expected) + ")");
  }
  std::vector<uint64_t> shape;
  for (uint32_t d = 0; d < dims; ++d) shape.push_back(be32(4 + 4 * d));
  // 2^31 x 2^31 x 4 must not wrap around to the 0 bytes of a bare header.
  const auto total = trainkit::detail::checked_numel(shape);
  if (!total) {
    throw Error("trainkit: " + name + ": IDX dimensions " +
                trainkit::detail::join_sizes(shape, " x ") + " are too large");
  }
  const size_t header = 4 + 4 * size_t(dims);  // be32 has checked that it is there
  if (*total != bytes.size() - header) {
    throw Error("trainkit: " + name + ": truncated or oversized (expected " +
                std::to_string(*total) + " bytes of data, found " +
                std::to_string(bytes.size() - header) + ")");
  }
  auto out = at::empty(std::vector<int64_t>(shape.begin(), shape.end()), at::kByte);
  if (*total > 0) std::memcpy(out.data_ptr<uint8_t>(), bytes.data() + header, *total);
  return out;
}

/// Reads and parses an IDX file (or its .gz, see read_bytes).
inline at::Tensor read_idx_u8(const std::filesystem::path& file, uint32_t dims) {
  return parse_idx_u8(read_bytes(file), dims, file.string());
}

}  // namespace detail

/// MNIST's training (60k) or test (10k) split from the four IDX files in `dir`.
inline TensorDataset read_mnist(const std::filesystem::path& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  const auto images_file = dir / (prefix + "-images-idx3-ubyte");
  const auto labels_file = dir / (prefix + "-labels-idx1-ubyte");
  const auto images = detail::read_idx_u8(images_file, 3);
  const auto labels = detail::read_idx_u8(labels_file, 1);
  if (images.size(1) != 28 || images.size(2) != 28 || images.size(0) != labels.size(0)) {
    throw Error("trainkit: " + images_file.string() + ": expected N x 28 x 28 images matching " +
                std::to_string(labels.size(0)) + " labels in " + labels_file.string());
  }
  auto x = images.to(at::kFloat).div_(255.0).sub_(0.1307).div_(0.3081).unsqueeze(1);
  return {x.contiguous(), labels.to(at::kLong)};
}

}  // namespace trainkit::data
