// Writes the seed corpus of every fuzz target: small valid files made by
// trainkit's own writers, so the fuzzers start from inputs that parse.
//   fuzz_seeds DIR   ->  DIR/<target>/seed-N
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <trainkit/data/cifar.hpp>
#include <trainkit/data/mnist.hpp>
#include <trainkit/io/checkpoint.hpp>
#include <trainkit/io/dcp_metadata.hpp>
#include <trainkit/io/safetensors.hpp>
#include <trainkit/io/torch_save.hpp>
#ifdef TRAINKIT_FUZZ_STUDY
#include "study_db.hpp"
#endif

namespace fs = std::filesystem;
using namespace trainkit;

namespace {

void put(const fs::path& dir, int n, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / ("seed-" + std::to_string(n)), std::ios::binary)
      .write(bytes.data(), std::streamsize(bytes.size()));
}

std::string idx(uint32_t dims, const std::vector<uint32_t>& shape) {
  std::string out;
  auto be = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(char((v >> s) & 0xFF));
  };
  be(0x800u | dims);
  size_t total = 1;
  for (auto d : shape) be(d), total *= d;
  for (size_t i = 0; i < total; ++i) out.push_back(char(i % 10));
  return out;
}

std::string cifar(size_t label_bytes, int records) {
  std::string out;
  for (int r = 0; r < records; ++r) {
    for (size_t b = 0; b < label_bytes; ++b) out.push_back(char(r % 10));
    for (int i = 0; i < 3 * 32 * 32; ++i) out.push_back(char((i * 7 + r) % 256));
  }
  return out;
}

void put_gzip(const fs::path& dir, int n, const std::string& bytes) {
  fs::create_directories(dir);
  const auto file = dir / ("seed-" + std::to_string(n));
  gzFile gz = gzopen(file.c_str(), "wb");
  gzwrite(gz, bytes.data(), unsigned(bytes.size()));
  gzclose(gz);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seeds DIR\n";
    return 2;
  }
  const fs::path dir = argv[1];
  const io::NamedTensors tensors = {{"w", torch::arange(6, at::kFloat).reshape({2, 3})},
                                    {"b", torch::ones({3}, at::kDouble)},
                                    {"i", torch::arange(4, at::kLong)},
                                    {"h", torch::zeros({2, 2}, at::kHalf)},
                                    {"e", torch::zeros({0}, at::kFloat)}};
  put(dir / "safetensors", 0, io::to_safetensors(tensors, {{"format", "pt"}}));
  put(dir / "safetensors", 1, io::to_safetensors({}, {}));
  // torch.save: trainkit's writer, and files PyTorch 1.13 and 2.6 wrote:
  // pickle protocol 1, containers shared through the memo, and the hostile
  // ones that reach a dict of tensors by millions of paths (refused at once).
  put(dir / "torch_save", 0, io::to_torch_save(tensors));
  int n = 1;
  for (const auto* name :
       {"pretrained_torch113.pt", "views_torch26.pt", "wrapped_torch26.pt", "protocol1_torch113.pt",
        "shared_torch26.pt", "hostile_shared.pt", "hostile_long_keys.pt", "hostile_long_names.pt"})
    put(dir / "torch_save", n++,
        io::read_file(fs::path(TRAINKIT_REFERENCE_DIR) / "weights" / name));

  // DCP's .metadata: the one PyTorch 2.6 wrote, and trainkit's of two tensors
  put(dir / "dcp_metadata", 0,
      io::read_file(fs::path(TRAINKIT_REFERENCE_DIR) / "dcp" / "adamw" / ".metadata"));
  io::dcp::StoredTensors stored;
  stored["model.w"] = {
      at::kFloat,
      {2, 3},
      {{{{0, 0}, {1, 3}}, "__0_0.distcp", 0, 9}, {{{1, 0}, {1, 3}}, "__1_0.distcp", 0, 9}}};
  stored["optim.state.w.exp_avg"] = {at::kHalf, {6}, {{{{0}, {6}}, "__0_0.distcp", 9, 5}}};
  put(dir / "dcp_metadata", 1, io::dcp::metadata_pickle(stored));

  io::Checkpoint ckpt;
  ckpt.parts["trainer"].values = {{"step", int64_t{3}},
                                  {"loss", 0.5},
                                  {"done", true},
                                  {"signature", std::string("Trainer<...>")}};
  ckpt.parts["model"].tensors = {{"fc.weight", torch::ones({2, 2})},
                                 {"fc.bias", torch::zeros({2})}};
  ckpt.parts["optim"].values = {{"steps", int64_t{3}}};
  ckpt.parts["optim"].tensors = {{"exp_avg.0", torch::full({6}, 0.25)}};
  put(dir / "checkpoint", 0, io::to_checkpoint_bytes(ckpt));

  put(dir / "idx", 0, std::string(1, '\0') + idx(1, {5}));
  put(dir / "idx", 1, std::string(1, '\2') + idx(3, {2, 3, 3}));
  put(dir / "cifar", 0, std::string(1, '\0') + cifar(1, 2));
  put(dir / "cifar", 1, std::string(1, '\1') + cifar(2, 1));
  put_gzip(dir / "gzip", 0, idx(1, {7}));

#ifdef TRAINKIT_FUZZ_STUDY
  const auto db = dir / "study.db";
  fs::remove(db);
  std::string lines;
  for (const auto& value : fuzz::write_study_template(db).values) lines += value + "\n";
  put(dir / "study", 0, lines);
#endif
  return 0;
}
