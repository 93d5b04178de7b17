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
#include "trainkit/error.hpp"

namespace trainkit::data {

namespace detail {

/// Parses an IDX file of unsigned bytes with `dims` dimensions.
inline at::Tensor read_idx_u8(const std::filesystem::path& file, uint32_t dims) {
  const auto bytes = read_bytes(file);
  const auto* b = reinterpret_cast<const uint8_t*>(bytes.data());
  const auto name = file.string();
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
  std::vector<int64_t> shape;
  size_t total = 1;
  for (uint32_t d = 0; d < dims; ++d) {
    shape.push_back(be32(4 + 4 * d));
    total *= size_t(shape.back());
  }
  const size_t header = 4 + 4 * size_t(dims);
  if (bytes.size() != header + total) {
    throw Error("trainkit: " + name + ": truncated or oversized (expected " +
                std::to_string(total) + " bytes of data, found " +
                std::to_string(bytes.size() - header) + ")");
  }
  auto out = at::empty(shape, at::kByte);
  std::memcpy(out.data_ptr<uint8_t>(), bytes.data() + header, total);
  return out;
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
