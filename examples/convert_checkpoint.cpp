// Converts between a sharded checkpoint and one weights file, tensor by
// tensor (io/convert.hpp):
//   convert_checkpoint runs/step-000000500.ckpt model.safetensors   # or model.pt
//   convert_checkpoint model.pt weights.ckpt --ranks 4               # a sharded folder
// A checkpoint file or a run folder (its newest checkpoint) also converts to
// weights. Without arguments it shows both ways on a small model and checks
// each tensor on the way back.
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <trainkit/io/convert.hpp>
#include <trainkit/trainkit.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

using namespace trainkit;

namespace {

/// Writes a small model's weights, converts them to a sharded folder of
/// `ranks` and back to both file formats, and checks every tensor.
int round_trip(const std::filesystem::path& dir, int ranks) {
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(12, 33), torch::nn::ReLU(),
                              torch::nn::BatchNorm1d(33), torch::nn::Linear(33, 5));
  std::filesystem::create_directories(dir);
  io::save_weights(dir / "model.safetensors", *model);
  io::weights_to_sharded(dir / "model.safetensors", dir / "model.ckpt", ranks);
  int differ = 0;
  for (const auto* name : {"back.safetensors", "back.pt"}) {
    io::checkpoint_to_weights(dir / "model.ckpt", dir / name);
    const auto back = io::read_weights(dir / name);
    for (const auto& [key, t] : io::module_tensors(*model)) {
      const auto it = std::find_if(back.begin(), back.end(),
                                   [&](const auto& named) { return named.first == key; });
      differ += it == back.end() || !torch::equal(it->second, t);
    }
  }
  std::printf("convert_checkpoint: %zu tensors through a folder of %d ranks and back: %s\n",
              io::module_tensors(*model).size(), ranks, differ == 0 ? "(ok)" : "DIFFERENT");
  return differ == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Converts between a sharded checkpoint and one weights file");
  std::string from, to, demo_dir = "convert_demo";
  int ranks = 1;
  app.add_option("from", from, "a sharded folder, checkpoint or weights file");
  app.add_option("to", to, "x.safetensors, x.pt or x.pth (weights), or x.ckpt (sharded)");
  app.add_option("--ranks", ranks, "for a sharded folder: as written by this many ranks")
      ->check(CLI::PositiveNumber);
  app.add_option("--demo-dir", demo_dir, "where the round trip without arguments writes");
  CLI11_PARSE(app, argc, argv);
  try {
    if (from.empty() && to.empty()) return round_trip(demo_dir, ranks > 1 ? ranks : 3);
    if (from.empty() || to.empty()) throw Error("trainkit: convert_checkpoint FROM TO");
    if (std::filesystem::path(to).extension() == ".ckpt") {
      io::weights_to_sharded(from, to, ranks);
    } else {
      io::checkpoint_to_weights(from, to);
    }
    std::printf("convert_checkpoint: %s -> %s\n", from.c_str(), to.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
