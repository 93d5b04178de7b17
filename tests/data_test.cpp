// In-memory batches (order a function of seed and epoch only), the glyph
// dataset, and the MNIST IDX reader with its errors.
#include <zlib.h>
#include <trainkit/data.hpp>

#include <filesystem>
#include <fstream>

#include "../examples/glyphs.hpp"
#include "support.hpp"

using namespace trainkit;

TEST_CASE("shuffled batches depend on (seed, epoch) only, not on the batch size") {
  const auto n = 50;
  data::TensorDataset ds{torch::arange(n).to(at::kFloat).unsqueeze(1), torch::arange(n)};
  data::TensorBatches b7(ds, {.batch_size = 7, .seed = 9}), b10(ds, {.batch_size = 10, .seed = 9});
  auto order = [](const data::TensorBatches& b) {
    std::vector<at::Tensor> parts;
    for (const auto& batch : b) parts.push_back(batch.target);
    return at::cat(parts);
  };
  CHECK(b7.size() == 8);
  CHECK(torch::equal(order(b7), order(b10)));
  CHECK(torch::equal(std::get<0>(order(b7).sort()), torch::arange(n)));  // a permutation
  const auto epoch0 = order(b7);
  b7.set_epoch(1);
  CHECK(!torch::equal(order(b7), epoch0));
  b7.set_epoch(0);
  CHECK(torch::equal(order(b7), epoch0));
  data::TensorBatches other_seed(ds, {.batch_size = 7, .seed = 10});
  CHECK(!torch::equal(order(other_seed), epoch0));
  data::TensorBatches dropped(ds, {.batch_size = 7, .drop_last = true});
  CHECK(dropped.size() == 7);
  data::TensorBatches sequential(ds, {.batch_size = 20, .shuffle = false});
  CHECK(torch::equal(order(sequential), torch::arange(n)));
}

TEST_CASE("glyphs are deterministic, balanced and distinct per class") {
  const auto a = examples::make_glyphs(400, 3), b = examples::make_glyphs(400, 3),
             c = examples::make_glyphs(400, 4);
  CHECK(torch::equal(a.inputs, b.inputs));
  CHECK(torch::equal(a.targets, b.targets));
  CHECK(!torch::equal(a.inputs, c.inputs));
  CHECK(a.inputs.sizes() == std::vector<int64_t>{400, 1, 28, 28});
  const auto counts = at::bincount(a.targets, {}, 10);
  CHECK(counts.min().item<int64_t>() >= 20);
  // the prefix of a larger set is the smaller set
  const auto big = examples::make_glyphs(800, 3);
  CHECK(torch::equal(big.inputs.narrow(0, 0, 400), a.inputs));
  // class means differ: the classes are separable in principle
  const auto flat = a.inputs.view({400, -1});
  const auto m0 = flat.index({a.targets == 0}).mean(0), m1 = flat.index({a.targets == 1}).mean(0);
  CHECK((m0 - m1).norm().item<double>() > 1.0);
}

namespace {
void write_idx(const std::filesystem::path& file, uint32_t magic, std::vector<uint32_t> dims,
               const std::vector<uint8_t>& data, size_t cut = SIZE_MAX) {
  std::string bytes;
  auto be = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(char((v >> s) & 0xFF));
  };
  be(magic);
  for (auto d : dims) be(d);
  bytes.append(data.begin(), data.end());
  std::ofstream(file, std::ios::binary)
      .write(bytes.data(), std::streamsize(std::min(cut, bytes.size())));
}
}  // namespace

TEST_CASE("MNIST IDX reader: round trip and errors that name the file") {
  const auto dir = tk_test::temp_dir("trainkit_mnist_test");
  std::vector<uint8_t> pixels(3 * 28 * 28);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i % 251);
  write_idx(dir / "t10k-images-idx3-ubyte", 0x803, {3, 28, 28}, pixels);
  write_idx(dir / "t10k-labels-idx1-ubyte", 0x801, {3}, {7, 0, 9});
  const auto ds = data::read_mnist(dir, /*train=*/false);
  CHECK(ds.inputs.sizes() == std::vector<int64_t>{3, 1, 28, 28});
  CHECK(torch::equal(ds.targets, torch::tensor({7, 0, 9}, at::kLong)));
  CHECK(ds.inputs[0][0][0][5].item<double>() == doctest::Approx((5 / 255.0 - 0.1307) / 0.3081));

  write_idx(dir / "t10k-labels-idx1-ubyte", 0x803, {3}, {7, 0, 9});
  CHECK_THROWS_WITH_AS(
      data::read_mnist(dir, false),
      doctest::Contains("t10k-labels-idx1-ubyte: bad IDX magic 2051 (expected 2049)"), Error);
  write_idx(dir / "t10k-labels-idx1-ubyte", 0x801, {3}, {7, 0, 9});
  write_idx(dir / "t10k-images-idx3-ubyte", 0x803, {3, 28, 28}, pixels, 1000);
  CHECK_THROWS_WITH_AS(data::read_mnist(dir, false),
                       doctest::Contains("t10k-images-idx3-ubyte: truncated or oversized"), Error);
  CHECK_THROWS_WITH_AS(data::read_mnist(dir, true), doctest::Contains("cannot open"), Error);
  std::filesystem::remove_all(dir);
}

// 2^31 x 2^31 x 4 wraps around to 0 bytes of data: the header alone used to
// pass the size check and ATen's allocator threw a c10::Error.
TEST_CASE("an IDX header whose element count overflows is rejected, naming the file") {
  const auto dir = tk_test::temp_dir("trainkit_idx_overflow_test");
  write_idx(dir / "t10k-images-idx3-ubyte", 0x803, {0x80000000u, 0x80000000u, 4}, {});
  CHECK_THROWS_WITH_AS(data::read_mnist(dir, false),
                       doctest::Contains("t10k-images-idx3-ubyte: IDX dimensions 2147483648 x "
                                         "2147483648 x 4 are too large"),
                       Error);
  // Found by fuzz.idx: no element at all, but contiguous strides beyond int64,
  // which ATen refuses ("Stride calculation overflowed").
  write_idx(dir / "t10k-images-idx3-ubyte", 0x803, {0, 4278190070u, 4294641671u}, {});
  CHECK_THROWS_WITH_AS(
      data::read_mnist(dir, false),
      doctest::Contains("IDX dimensions 0 x 4278190070 x 4294641671 are too large"), Error);
  std::filesystem::remove_all(dir);
}

namespace {
std::vector<uint8_t> cifar_records(int64_t n, size_t label_bytes, uint8_t classes) {
  std::vector<uint8_t> out;
  for (int64_t i = 0; i < n; ++i) {
    for (size_t l = 0; l < label_bytes; ++l) out.push_back(uint8_t((i + l) % classes));
    for (int p = 0; p < 3072; ++p) out.push_back(uint8_t((i * 7 + p) % 256));
  }
  return out;
}
void write_bytes(const std::filesystem::path& file, const std::vector<uint8_t>& bytes) {
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}
}  // namespace

TEST_CASE("CIFAR-10 and CIFAR-100 readers: round trip and errors that name the file") {
  const auto dir = tk_test::temp_dir("trainkit_cifar_test");
  for (int i = 1; i <= 5; ++i) {
    write_bytes(dir / ("data_batch_" + std::to_string(i) + ".bin"), cifar_records(3, 1, 10));
  }
  write_bytes(dir / "test_batch.bin", cifar_records(4, 1, 10));
  const auto train = data::read_cifar10(dir, true), test = data::read_cifar10(dir, false);
  CHECK(train.inputs.sizes() == std::vector<int64_t>{15, 3, 32, 32});
  CHECK((train.inputs.scalar_type() == at::kByte));
  CHECK(torch::equal(test.targets, torch::tensor({0, 1, 2, 3}, at::kLong)));
  CHECK(test.inputs[1][0][0][5].item<int64_t>() == (1 * 7 + 5) % 256);
  CHECK(test.inputs[1][2][31][31].item<int64_t>() == (1 * 7 + 3071) % 256);

  write_bytes(dir / "train.bin", cifar_records(5, 2, 20));
  const auto coarse = data::read_cifar100(dir, true, /*fine=*/false);
  const auto fine = data::read_cifar100(dir, true, /*fine=*/true);
  CHECK(torch::equal(coarse.targets, torch::tensor({0, 1, 2, 3, 4}, at::kLong)));
  CHECK(torch::equal(fine.targets, torch::tensor({1, 2, 3, 4, 5}, at::kLong)));

  auto cut = cifar_records(4, 1, 10);
  cut.resize(cut.size() - 10);
  write_bytes(dir / "test_batch.bin", cut);
  CHECK_THROWS_WITH_AS(data::read_cifar10(dir, false),
                       doctest::Contains("test_batch.bin: 12282 bytes is not a whole number of "
                                         "3073-byte CIFAR records"),
                       Error);
  auto bad_label = cifar_records(2, 1, 10);
  bad_label[3073] = 42;
  write_bytes(dir / "test_batch.bin", bad_label);
  CHECK_THROWS_WITH_AS(data::read_cifar10(dir, false),
                       doctest::Contains("test_batch.bin: record 1 has label 42, expected < 10"),
                       Error);
  std::filesystem::remove(dir / "test_batch.bin");
  CHECK_THROWS_WITH_AS(data::read_cifar10(dir, false), doctest::Contains("cannot open"), Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("gzipped IDX files read the same as plain ones, corrupt gzip is an error") {
  const auto dir = tk_test::temp_dir("trainkit_gz_test");
  std::vector<uint8_t> pixels(2 * 28 * 28);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i % 13);
  write_idx(dir / "train-images-idx3-ubyte", 0x803, {2, 28, 28}, pixels);
  write_idx(dir / "train-labels-idx1-ubyte", 0x801, {2}, {3, 4});
  const auto plain = data::read_mnist(dir, true);
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"}) {
    std::ifstream in(dir / name, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    gzFile gz = gzopen((dir / (std::string(name) + ".gz")).c_str(), "wb");
    gzwrite(gz, bytes.data(), unsigned(bytes.size()));
    gzclose(gz);
    std::filesystem::remove(dir / name);
  }
  const auto gz = data::read_mnist(dir, true);
  CHECK(torch::equal(plain.inputs, gz.inputs));
  CHECK(torch::equal(plain.targets, gz.targets));
  write_bytes(dir / "train-labels-idx1-ubyte.gz", {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3});
  CHECK_THROWS_WITH_AS(data::read_mnist(dir, true),
                       doctest::Contains("train-labels-idx1-ubyte.gz: corrupt gzip data"), Error);
  std::filesystem::remove_all(dir);
}
