#pragma once
// CIFAR-10 and CIFAR-100 in their binary versions (data_batch_1..5.bin and
// test_batch.bin; train.bin and test.bin), also gzipped. Records are checked
// (file size a multiple of the record, labels in range); errors name the file.
// Images stay uint8 [N, 3, 32, 32] (a quarter of the memory): convert on the
// device with transforms::Normalize.
#include <torch/types.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "trainkit/data/files.hpp"
#include "trainkit/data/tensor_dataset.hpp"
#include "trainkit/error.hpp"

namespace trainkit::data {

namespace detail {

/// The records of one file: `label_bytes` label bytes then 3072 pixel bytes
/// each; `label_at` picks which label byte is the target. `name` names the
/// file in errors.
inline TensorDataset parse_cifar_records(const std::string& bytes, size_t label_bytes,
                                         size_t label_at, int64_t classes,
                                         const std::string& name) {
  constexpr size_t pixels = 3 * 32 * 32;
  const size_t record = label_bytes + pixels;
  if (bytes.empty() || bytes.size() % record != 0) {
    throw Error("trainkit: " + name + ": " + std::to_string(bytes.size()) +
                " bytes is not a whole number of " + std::to_string(record) +
                "-byte CIFAR records");
  }
  const int64_t n = int64_t(bytes.size() / record);
  auto x = at::empty({n, 3, 32, 32}, at::kByte);
  auto y = at::empty({n}, at::kLong);
  for (int64_t i = 0; i < n; ++i) {
    const auto* r = reinterpret_cast<const uint8_t*>(bytes.data()) + size_t(i) * record;
    if (r[label_at] >= classes) {
      throw Error("trainkit: " + name + ": record " + std::to_string(i) + " has label " +
                  std::to_string(r[label_at]) + ", expected < " + std::to_string(classes));
    }
    y.data_ptr<int64_t>()[i] = int64_t(r[label_at]);
    std::memcpy(x.data_ptr<uint8_t>() + size_t(i) * pixels, r + label_bytes, pixels);
  }
  return {x, y};
}

/// Every file's records, in order (files as read_bytes finds them).
inline TensorDataset read_cifar_files(const std::vector<std::filesystem::path>& files,
                                      size_t label_bytes, size_t label_at, int64_t classes) {
  std::vector<at::Tensor> images, labels;
  for (const auto& file : files) {
    auto part =
        parse_cifar_records(read_bytes(file), label_bytes, label_at, classes, file.string());
    images.push_back(part.inputs);
    labels.push_back(part.targets);
  }
  return {at::cat(images), at::cat(labels)};
}

}  // namespace detail

inline TensorDataset read_cifar10(const std::filesystem::path& dir, bool train) {
  std::vector<std::filesystem::path> files;
  if (train) {
    for (int i = 1; i <= 5; ++i)
      files.push_back(dir / ("data_batch_" + std::to_string(i) + ".bin"));
  } else {
    files.push_back(dir / "test_batch.bin");
  }
  return detail::read_cifar_files(files, 1, 0, 10);
}

/// `fine`: the 100 fine labels, else the 20 coarse ones.
inline TensorDataset read_cifar100(const std::filesystem::path& dir, bool train, bool fine = true) {
  return detail::read_cifar_files({dir / (train ? "train.bin" : "test.bin")}, 2, fine ? 1 : 0,
                                  fine ? 100 : 20);
}

}  // namespace trainkit::data
