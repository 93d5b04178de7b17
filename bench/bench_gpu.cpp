// The GPU benchmarks (issue 13), run by `scripts/run.sh gpu` beside
// bench/gpu_pytorch.py on the same GPU: the seed's setting (a ResNet-10 on
// CIFAR-10-shaped synthetic data, batch 2048, AdamW + OneCycle, fp16 and
// bf16) and two overhead-bound cases (the tiny MLP 32-64-10 at batch 32, a
// stack of 2 transformer encoder blocks at batch 8), each with eager steps
// and with the whole step captured (parallel::CudaGraph). One JSON line per
// case and mode.
//
//   bench_gpu [--device cuda|cpu] [--cases resnet10,mlp,transformer]
//             [--steps N] [--batch-scale F] [--peak-flops F]
//
// On a CPU (`--device cpu --batch-scale 0.01 --steps 3`) it is a smoke run:
// graphs are emulated there, and the timings mean nothing.
#include <torch/torch.h>
#include <nlohmann/json.hpp>
#include <trainkit/callbacks/throughput.hpp>
#include <trainkit/trainkit.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.hpp"

#if TRAINKIT_HAS_CUDA
#include <torch/cuda.h>
#endif

using namespace trainkit;
namespace nn = torch::nn;

namespace {

struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    conv1 = register_module(
        "conv1", nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
    conv2 =
        register_module("conv2", nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      down = register_module(
          "down",
          nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                         nn::BatchNorm2d(out)));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    auto y = bn2(conv2(torch::relu(bn1(conv1(x)))));
    return torch::relu(y + (down ? down->forward(x) : x));
  }
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential down{nullptr};
};
TORCH_MODULE(BasicBlock);

/// ResNet-10: a 3x3 stem and one basic block per stage (64-128-256-512), as
/// the seed's CIFAR-10 network (bench/gpu_pytorch.py builds the same).
struct ResNet10Impl : nn::Module {
  ResNet10Impl() {
    stem = register_module("stem", nn::Conv2d(nn::Conv2dOptions(3, 64, 3).padding(1).bias(false)));
    bn = register_module("bn", nn::BatchNorm2d(64));
    blocks =
        register_module("blocks", nn::Sequential(BasicBlock(64, 64, 1), BasicBlock(64, 128, 2),
                                                 BasicBlock(128, 256, 2), BasicBlock(256, 512, 2)));
    fc = register_module("fc", nn::Linear(512, 10));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto y = blocks->forward(torch::relu(bn(stem(x))));
    return fc(torch::adaptive_avg_pool2d(y, {1, 1}).flatten(1));
  }
  nn::Conv2d stem{nullptr};
  nn::BatchNorm2d bn{nullptr};
  nn::Sequential blocks{nullptr};
  nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet10);

struct TinyMlpImpl : nn::Module {
  TinyMlpImpl() {
    fc1 = register_module("fc1", nn::Linear(32, 64));
    fc2 = register_module("fc2", nn::Linear(64, 10));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TinyMlp);

/// Two encoder blocks (d 128, 4 heads, feed-forward 512, no dropout) over
/// 32 tokens, mean-pooled into 10 classes.
struct SmallTransformerImpl : nn::Module {
  SmallTransformerImpl() {
    auto layer = nn::TransformerEncoderLayerOptions(128, 4).dim_feedforward(512).dropout(0.0);
    encoder =
        register_module("encoder", nn::TransformerEncoder(nn::TransformerEncoderOptions(layer, 2)));
    fc = register_module("fc", nn::Linear(128, 10));
  }
  at::Tensor forward(const at::Tensor& x) {  // (batch, tokens, 128)
    return fc(encoder(x.transpose(0, 1)).mean(0));
  }
  nn::TransformerEncoder encoder{nullptr};
  nn::Linear fc{nullptr};
};
TORCH_MODULE(SmallTransformer);

struct Args {
  std::string device = "cuda", cases = "resnet10,mlp,transformer";
  int64_t steps = 50;
  double batch_scale = 1.0, peak_flops = 0.0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--device")
      a.device = v;
    else if (k == "--cases")
      a.cases = v;
    else if (k == "--steps")
      a.steps = std::stoll(v);
    else if (k == "--batch-scale")
      a.batch_scale = std::stod(v);
    else if (k == "--peak-flops")
      a.peak_flops = std::stod(v);
    else
      throw std::runtime_error("bench_gpu: unknown flag " + k);
  }
  return a;
}

void synchronize([[maybe_unused]] const torch::Device& device) {
#if TRAINKIT_HAS_CUDA
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
#endif
}

/// Times steps [warm, warm + steps) from on_step_end, the device synchronised.
struct StepTimer {
  int64_t warm, steps;
  torch::Device device;
  std::chrono::steady_clock::time_point start{}, end{};
  void on_step_end(TrainState& s) {
    if (s.step != warm && s.step != warm + steps) return;
    synchronize(device);
    (s.step == warm ? start : end) = std::chrono::steady_clock::now();
  }
  double seconds() const { return std::chrono::duration<double>(end - start).count(); }
};

/// One case: a model, its batch shape and how it trains.
struct Case {
  std::string name, precision;
  std::vector<int64_t> batch_shape;
  int64_t classes = 10;
  bool channels_last = false;
};

template <class Precision, class Model, class Parallel>
void run(const Case& c, const Args& args) {
  constexpr bool graph = std::is_same_v<Parallel, parallel::CudaGraph>;
  const torch::Device device(args.device);
  const int64_t warm = 5;  // eager warm-up (3), the probe step, the first replay
  torch::manual_seed(0);
  Model model;
  using T =
      Trainer<optim::AdamW, sched::OneCycle, Precision, accumulate::None, clip::None, Parallel>;
  typename T::Options o{.optim = {.lr = 1e-3, .weight_decay = 5e-4, .fused = true},
                        .sched = {.max_lr = 1e-2, .cycle_momentum = false},
                        .device = {.channels_last = c.channels_last}};
  o.parallel.device = device;
  if constexpr (graph) o.parallel.emulate = !device.is_cuda();
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) o.optim.fused.reset();
  T trainer(model, o);
  // A few distinct synthetic batches on the device, cycled: the loader is not measured.
  std::vector<data::Batch> distinct;
  for (int i = 0; i < 4; ++i) {
    distinct.push_back({at::randn(c.batch_shape, device),
                        at::randint(0, c.classes, {c.batch_shape[0]},
                                    at::TensorOptions(device).dtype(at::kLong))});
  }
  std::vector<data::Batch> data;
  for (int64_t i = 0; i < warm + args.steps; ++i) data.push_back(distinct[i % distinct.size()]);
  StepTimer timer{warm, args.steps, device};
  trainer.fit(task::Classification{}, data, {.epochs = 1}, timer);
  const double s = timer.seconds() / double(args.steps);
  const double samples_per_s = double(c.batch_shape[0]) / s;
  std::ostringstream f;
  f << "\"case\": \"" << c.name << "\", \"precision\": \"" << c.precision << "\", \"mode\": \""
    << (graph ? "graph" : "eager") << "\", \"device\": \"" << device.str()
    << "\", \"batch\": " << c.batch_shape[0] << ", \"ms_per_step\": " << s * 1e3
    << ", \"samples_per_s\": " << samples_per_s << ", \"steps_per_s\": " << 1.0 / s;
  if constexpr (graph) {
    // a fallback reason may quote an error: nlohmann's dump escapes it
    f << ", \"graph\": "
      << nlohmann::json(trainer.graph_recorded() ? "recorded" : trainer.graph_fallback_reason())
             .dump();
  }
  if (args.peak_flops > 0) {
    auto example = distinct[0].input.narrow(0, 0, 1);
    if (c.channels_last) example = example.contiguous(at::MemoryFormat::ChannelsLast);
    const double flops = callbacks::training_flops_per_sample(model, example);
    f << ", \"mfu\": " << flops * samples_per_s / args.peak_flops;
  }
  bench::report("gpu_" + c.name, f.str());
}

template <class Model>
void run_modes(const Case& c, const Args& args) {
  const auto both = [&]<class Precision>(std::type_identity<Precision>) {
    run<Precision, Model, parallel::Single>(c, args);
    run<Precision, Model, parallel::CudaGraph>(c, args);
  };
  if (c.precision == "fp16")
    both(std::type_identity<precision::Fp16>{});
  else if (c.precision == "bf16")
    both(std::type_identity<precision::Bf16>{});
  else
    both(std::type_identity<precision::Fp32>{});
}

int64_t scaled(int64_t batch, double scale) {
  return std::max<int64_t>(2, static_cast<int64_t>(double(batch) * scale));
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  const bool cuda = torch::Device(args.device).is_cuda();
  const auto wants = [&](const char* name) { return args.cases.find(name) != std::string::npos; };
  if (wants("resnet10")) {
    // fp16 needs CUDA autocast; a CPU smoke run trains in bf16 only.
    for (const char* p : {"fp16", "bf16"}) {
      if (!cuda && std::strcmp(p, "fp16") == 0) continue;
      run_modes<ResNet10>({"resnet10", p, {scaled(2048, args.batch_scale), 3, 32, 32}, 10, true},
                          args);
    }
  }
  if (wants("mlp")) run_modes<TinyMlp>({"mlp", "fp32", {32, 32}}, args);
  if (wants("transformer")) {
    run_modes<SmallTransformer>({"transformer", "fp32", {8, 32, 128}}, args);
  }
  return 0;
}
