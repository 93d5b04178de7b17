// A model scripted in Python against the same model written as a C++
// module: examples/scripted_model.py's GlyphNet (argv[1], its archive), and
// the same layers in LibTorch's C++ API with the archive's weights, each
// trained by Trainer<AdamW> on the same glyph batches (64 per step, eager,
// on the CPU). Runs of 20 steps alternate between the two; the medians of 7
// are reported, and their ratio. The graphs run op by op (trainkit's
// default) and with TorchScript's optimizer on.
#include <torch/torch.h>
#include <trainkit/script_module.hpp>
#include <trainkit/trainkit.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "../examples/glyphs.hpp"
#include "bench_util.hpp"

using namespace trainkit;
namespace F = torch::nn::functional;

namespace {

/// examples/scripted_model.py's GlyphNet, written in C++.
struct GlyphNetImpl : torch::nn::Module {
  GlyphNetImpl() {
    conv1 =
        register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(16));
    conv2 =
        register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(32));
    dropout = register_module("dropout", torch::nn::Dropout(0.1));
    head = register_module("head", torch::nn::Linear(32, 10));
  }
  at::Tensor forward(const at::Tensor& images) {
    const auto pool = F::MaxPool2dFuncOptions(2);
    auto x = F::max_pool2d(torch::relu(bn1(conv1(images))), pool);
    x = F::max_pool2d(torch::relu(bn2(conv2(x))), pool);
    return head(dropout(x.mean({2, 3})));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(GlyphNet);

/// `to` gets `from`'s parameters and buffers, by name.
void copy_state(torch::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto source = from.named_parameters();
  for (auto& p : to.named_parameters()) p.value().copy_(source[p.key()]);
  auto buffers = from.named_buffers();
  for (auto& b : to.named_buffers()) b.value().copy_(buffers[b.key()]);
}

using GlyphTrainer = Trainer<optim::AdamW>;
constexpr int64_t kSteps = 20, kRuns = 7;

/// Seconds per step of one run of kSteps.
double run(GlyphTrainer& trainer, const std::vector<data::Batch>& batches) {
  const auto start = std::chrono::steady_clock::now();
  trainer.fit(task::Classification{}, batches, {.epochs = 1});
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kSteps;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: bench_scripted GLYPHNET.pt (python3 examples/scripted_model.py script "
                 "GLYPHNET.pt)\n");
    return 2;
  }
  at::set_num_threads(1);
  const auto glyphs = examples::make_glyphs(kSteps * 64, /*seed=*/1);
  std::vector<data::Batch> batches;
  for (int64_t s = 0; s < kSteps; ++s)
    batches.push_back({glyphs.inputs.narrow(0, s * 64, 64), glyphs.targets.narrow(0, s * 64, 64)});

  for (const bool optimize : {false, true}) {
    ScriptModule scripted(std::string(argv[1]), ScriptModuleOptions{.optimize = optimize});
    GlyphNet module;
    copy_state(*scripted, *module);
    GlyphTrainer on_script(scripted, {.optim = {.lr = 1e-3}});
    GlyphTrainer on_module(module, {.optim = {.lr = 1e-3}});
    run(on_script, batches),
        run(on_module, batches);  // warm-up (and the executor's profiling runs)
    std::vector<double> script_s, module_s;
    for (int64_t r = 0; r < kRuns; ++r) {
      script_s.push_back(run(on_script, batches));
      module_s.push_back(run(on_module, batches));
    }
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "\"optimize\": %s, \"scripted_ms_per_step\": %.3f, \"cpp_module_ms_per_step\": "
                  "%.3f, \"scripted_over_cpp\": %.3f",
                  optimize ? "true" : "false", 1e3 * median(script_s), 1e3 * median(module_s),
                  median(script_s) / median(module_s));
    bench::report("scripted_glyphnet_step", buf);
  }
}
