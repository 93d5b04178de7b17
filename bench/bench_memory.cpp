// Activation checkpointing: peak CPU tensor memory (memory::CpuMeter) and
// the time of one forward + backward, with and without, on a deep MLP and a
// stack of 8 transformer encoder blocks. The baseline is the same model run
// plainly in the same process; the gradients exist before measuring, so the
// peak is the activations (and the step's temporaries).
#include <torch/torch.h>
#include <trainkit/memory.hpp>

#include <cstdio>
#include <functional>
#include <string>

#include "bench_util.hpp"

using namespace trainkit;
namespace nn = torch::nn;

namespace {

void compare(const char* name, nn::Module& model, const std::function<at::Tensor()>& plain,
             const std::function<at::Tensor()>& segmented, int iters) {
  const auto step = [&](const std::function<at::Tensor()>& forward) {
    for (const auto& p : model.parameters())
      if (p.grad().defined()) p.grad().zero_();
    forward().pow(2).mean().backward();
  };
  step(plain);  // allocates the gradients
  const auto peak = [&](const std::function<at::Tensor()>& forward) {
    memory::CpuMeter meter;
    step(forward);
    return meter.peak_bytes();
  };
  const int64_t peak_plain = peak(plain), peak_ckpt = peak(segmented);
  const double t_plain = bench::seconds_per_call([&] { step(plain); }, iters);
  const double t_ckpt = bench::seconds_per_call([&] { step(segmented); }, iters);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "\"peak_plain_MiB\": %.1f, \"peak_checkpointed_MiB\": %.1f, "
                "\"memory_saved\": %.2f, \"step_plain_ms\": %.2f, \"step_checkpointed_ms\": %.2f, "
                "\"time_overhead\": %.2f",
                peak_plain / 1048576.0, peak_ckpt / 1048576.0, 1.0 - double(peak_ckpt) / peak_plain,
                t_plain * 1e3, t_ckpt * 1e3, t_ckpt / t_plain - 1.0);
  bench::report(name, buf);
}

}  // namespace

int main() {
  std::printf("# threads: %d\n", at::get_num_threads());
  torch::manual_seed(0);
  {  // 32 blocks of Linear(512) + ReLU at batch 512, in segments of 4 (~sqrt(32))
    nn::Sequential blocks;
    for (int i = 0; i < 32; ++i) {
      blocks->push_back(nn::Linear(512, 512));
      blocks->push_back(nn::ReLU());
    }
    memory::CheckpointedSequential segmented(blocks, 8);  // 8 modules = 4 blocks
    const auto x = torch::randn({512, 512});
    compare(
        "checkpoint_mlp_32x512", *blocks, [&] { return blocks->forward(x); },
        [&] { return segmented(x); }, 5);
  }
  {  // 8 transformer encoder blocks (d_model 256, 4 heads, ff 1024), 16 x 128 tokens; each block a
     // segment
    std::vector<nn::TransformerEncoderLayer> layers;
    nn::ModuleList holder;
    for (int i = 0; i < 8; ++i) {
      layers.emplace_back(nn::TransformerEncoderLayerOptions(256, 4).dim_feedforward(1024));
      holder->push_back(layers.back());
    }
    const auto x = torch::randn({128, 16, 256});  // (sequence, batch, features)
    const auto plain = [&] {
      auto h = x;
      for (auto& l : layers) h = l->forward(h);
      return h;
    };
    const auto segmented = [&] {
      auto h = x;
      for (auto& l : layers)
        h = memory::checkpoint([&l](const at::Tensor& in) { return l->forward(in); }, h);
      return h;
    };
    compare("checkpoint_transformer_8", *holder, plain, segmented, 3);
  }
}
