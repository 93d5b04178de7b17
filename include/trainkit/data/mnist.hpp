#pragma once
// MNIST in its IDX files (train-images-idx3-ubyte, ...), checked for magic
// numbers and sizes; errors name the file. Images come out normalised with
// MNIST's usual mean and std, as [N, 1, 28, 28] float, labels as int64.
#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "trainkit/data/tensor_dataset.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

namespace detail {

inline uint32_t read_be32(std::ifstream& in, const std::filesystem::path& file) {
  unsigned char b[4];
  if (!in.read(reinterpret_cast<char*>(b), 4)) {
    throw Error("trainkit: " + file.string() + ": truncated IDX header");
  }
  return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | uint32_t(b[3]);
}

/// Reads an IDX file of unsigned bytes with `dims` dimensions.
inline at::Tensor read_idx_u8(const std::filesystem::path& file, uint32_t dims) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error("trainkit: cannot open MNIST file " + file.string());
  const uint32_t magic = read_be32(in, file), expected = 0x00000800u | dims;
  if (magic != expected) {
    throw Error("trainkit: " + file.string() + ": bad IDX magic " + std::to_string(magic) +
                " (expected " + std::to_string(expected) + ")");
  }
  std::vector<int64_t> shape;
  int64_t total = 1;
  for (uint32_t d = 0; d < dims; ++d) {
    shape.push_back(read_be32(in, file));
    total *= shape.back();
  }
  auto out = at::empty(shape, at::kByte);
  if (!in.read(reinterpret_cast<char*>(out.data_ptr<uint8_t>()), total)) {
    throw Error("trainkit: " + file.string() + ": truncated (expected " + std::to_string(total) +
                " bytes of data)");
  }
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
