// The GPU benchmarks (issue 13), run by `scripts/run.sh gpu` beside
// bench/gpu_pytorch.py on the same GPU: the seed's setting (a ResNet-10 on
// CIFAR-10-shaped synthetic data, batch 2048, AdamW + OneCycle, fp16 and
// bf16) and two overhead-bound cases (the tiny MLP 32-64-10 at batch 32, a
// stack of 2 transformer encoder blocks at batch 8), each with eager steps
// and with the whole step captured (capture::CudaGraph); ResNet-10 also with
// trainkit's fused batch norm + ReLU blocks (examples/resnet.hpp); the GPT
// of examples/gpt.cpp, trained as that example trains it, at its own size and
// at nanoGPT's Shakespeare-character size; and the data-serving case, where
// the loader is the bottleneck (samples read from files and augmented by
// 0-8 workers, pinned or not, feeding ResNet-10 at batch 256). One JSON line
// per case and mode.
//
//   bench_gpu [--device cuda|cpu] [--cases A,B,...] [--steps N] [--batch-scale F]
//             [--peak-flops F] [--loader-dir DIR]
//   (--help lists the cases and the defaults)
//
// On a CPU (`--device cpu --batch-scale 0.01 --steps 3`) it is a smoke run:
// graphs are emulated there, and the timings mean nothing.
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <trainkit/callbacks/throughput.hpp>
#include <trainkit/trainkit.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../examples/gpt.hpp"
#include "../examples/resnet.hpp"
#include "bench_util.hpp"

#if TRAINKIT_HAS_CUDA
#include <torch/cuda.h>
#endif
// The kernels' summed duration per step, from PyTorch's profiler (Kineto),
// whose event API is LibTorch 2's.
#define TRAINKIT_BENCH_KERNEL_PROFILE (TRAINKIT_HAS_CUDA && TORCH_VERSION_MAJOR >= 2)
#if TRAINKIT_BENCH_KERNEL_PROFILE
#include <torch/csrc/autograd/profiler_kineto.h>

#include <map>
#include <set>
#endif

using namespace trainkit;
namespace nn = torch::nn;

namespace {

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

/// Every case, in the order main runs them; bn_layers runs on CUDA only.
const std::vector<std::string> kCases{"resnet10",    "bn_layers", "mlp",
                                      "transformer", "gpt",       "loader"};

/// The cases run by default: all but bn_layers (scripts/run.sh gpu asks for it apart).
std::vector<std::string> default_cases() {
  std::vector<std::string> out;
  std::copy_if(kCases.begin(), kCases.end(), std::back_inserter(out),
               [](const std::string& c) { return c != "bn_layers"; });
  return out;
}

struct Args {
  std::string device = "cuda";
  std::vector<std::string> cases = default_cases();
  std::string loader_dir = "build/gpu/loader-data";
  int64_t steps = 50;
  double batch_scale = 1.0, peak_flops = 0.0;
};

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

/// The kind of a CUDA kernel by its name (the same rules as
/// bench/gpu_pytorch.py's kernel_kind).
[[maybe_unused]] std::string kernel_kind(std::string name) {
  for (auto& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  const std::vector<std::pair<std::string, std::vector<std::string>>> kinds{
      {"batch norm", {"batch_norm", "batchnorm", "bn_", "welford", "layers::detail::cuda"}},
      {"optimizer", {"adam", "multi_tensor", "foreach"}},
      {"conv/gemm", {"conv", "gemm", "xmma", "cutlass", "cudnn", "sm90_", "wgrad", "dgrad"}},
      {"fused (triton)", {"triton"}},
      {"reduce", {"reduce"}},
      {"elementwise", {"elementwise", "vectorized", "unrolled"}}};
  for (const auto& [kind, keys] : kinds)
    for (const auto& k : keys)
      if (name.find(k) != std::string::npos) return kind;
  return "other";
}

/// Profiles steps (from, from + steps] and gives the CUDA kernels' summed
/// duration per step, in total and by kind, as JSON fields ("" where the
/// profiler is not available).
struct KernelProfile {
  int64_t from, steps;
  torch::Device device;
  std::string fields{};  ///< filled at the last profiled step
  void on_step_end([[maybe_unused]] TrainState& s) {
#if TRAINKIT_BENCH_KERNEL_PROFILE
    namespace prof = torch::autograd::profiler;
    if (!device.is_cuda() || (s.step != from && s.step != from + steps)) return;
    synchronize(device);
    const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
    const std::set<prof::ActivityType> activities{prof::ActivityType::CPU,
                                                  prof::ActivityType::CUDA};
    if (s.step == from) {
      prof::prepareProfiler(config, activities);
      prof::enableProfiler(config, activities);
      return;
    }
    const auto result = prof::disableProfiler();
    std::map<std::string, double> kinds, names;
    double total = 0;
    for (const auto& e : result->events()) {
      if (e.deviceType() != c10::DeviceType::CUDA) continue;
      const double ms = double(e.durationNs()) / 1e6 / double(steps);
      kinds[kernel_kind(e.name())] += ms;
      names[e.name().substr(0, 120)] += ms;
      total += ms;
    }
    // the ten costliest kernels by name: where a kind's time goes
    std::vector<std::pair<double, std::string>> top;
    for (const auto& [name, ms] : names) top.emplace_back(ms, name);
    std::sort(top.rbegin(), top.rend());
    top.resize(std::min<size_t>(top.size(), 10));
    nlohmann::json top_json = nlohmann::json::array();
    for (const auto& [ms, name] : top) top_json.push_back({name, ms});
    fields = ", \"kernels_ms\": " + std::to_string(total) +
             ", \"kernel_kinds_ms\": " + nlohmann::json(kinds).dump() +
             ", \"top_kernels_ms\": " + top_json.dump();
#endif
  }
};

/// One case: a model, its batch shape and how it trains.
struct Case {
  std::string name, precision;
  std::vector<int64_t> batch_shape;
  int64_t classes = 10;
  bool channels_last = false;
  std::string blocks = "";  ///< "fused": trainkit's fused batch norm + ReLU blocks
};

template <class Precision, class Model, class Capture>
void run(const Case& c, const Args& args) {
  constexpr bool graph = Capture::records;
  const torch::Device device(args.device);
  const int64_t warm = 5;  // eager warm-up (3), the probe step, the first replay
  torch::manual_seed(0);
  Model model;
  using T = Trainer<optim::AdamW, sched::OneCycle, Precision, accumulate::None, clip::None,
                    parallel::Single, Capture>;
  typename T::Options o{.optim = {.lr = 1e-3, .weight_decay = 5e-4, .fused = true},
                        .sched = {.max_lr = 1e-2, .cycle_momentum = false},
                        .device = {.channels_last = c.channels_last}};
  o.parallel.device = device;
  if constexpr (graph) o.capture.emulate = !device.is_cuda();
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) o.optim.fused.reset();
  T trainer(model, o);
  // A few distinct synthetic batches on the device, cycled: the loader is not measured.
  std::vector<data::Batch> distinct;
  for (int i = 0; i < 4; ++i) {
    distinct.push_back({at::randn(c.batch_shape, device),
                        at::randint(0, c.classes, {c.batch_shape[0]},
                                    at::TensorOptions(device).dtype(at::kLong))});
  }
  const int64_t profiled = 3;  // steps after the timed ones
  std::vector<data::Batch> data;
  for (int64_t i = 0; i < warm + args.steps + profiled; ++i)
    data.push_back(distinct[i % distinct.size()]);
  StepTimer timer{warm, args.steps, device};
  KernelProfile profile{warm + args.steps, profiled, device};
  trainer.fit(task::Classification{}, data, {.epochs = 1}, timer, profile);
  const double s = timer.seconds() / double(args.steps);
  const double samples_per_s = double(c.batch_shape[0]) / s;
  std::ostringstream f;
  f << "\"case\": \"" << c.name << "\", \"precision\": \"" << c.precision << "\", \"mode\": \""
    << (graph ? "graph" : "eager") << (c.blocks.empty() ? "" : " " + c.blocks + "-bn")
    << "\", \"device\": \"" << device.str() << "\", \"batch\": " << c.batch_shape[0]
    << ", \"ms_per_step\": " << s * 1e3 << ", \"samples_per_s\": " << samples_per_s
    << ", \"steps_per_s\": " << 1.0 / s << profile.fields;
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
    run<Precision, Model, capture::None>(c, args);
    run<Precision, Model, capture::CudaGraph>(c, args);
  };
  if (c.precision == "fp16")
    both(std::type_identity<precision::Fp16>{});
  else if (c.precision == "bf16")
    both(std::type_identity<precision::Bf16>{});
  else
    both(std::type_identity<precision::Fp32>{});
}

/// Milliseconds per call of f, the device synchronised around `iters` calls.
template <class F>
double time_ms(const torch::Device& device, int iters, F&& f) {
  for (int i = 0; i < 3; ++i) f();
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  synchronize(device);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         iters;
}

/// ResNet-10's batch norms alone at batch 2048: forward and backward of
/// BatchNorm2d (+ add) + ReLU against BatchNormReLU2d, then with the output
/// used twice (as a block's input is: autograd adds the two gradients,
/// against the fused layer's fork, whose backward adds them), and the pass
/// that the fused forward starts with (trainkit's statistics kernel, and
/// ATen's batch_norm_stats that it replaced), against the time the bytes
/// they must move take at `bandwidth` (bytes/s, read + written).
void bn_layers(const Args& args, double bandwidth) {
  const torch::Device device(args.device);
  const int64_t batch = std::max<int64_t>(2, int64_t(2048 * args.batch_scale));
  for (const auto type : {at::kHalf, at::kBFloat16}) {
    for (const auto& [channels, side] : {std::pair{64, 32}, {128, 16}, {256, 8}, {512, 4}}) {
      for (const bool residual : {false, true}) {
        const auto opts = at::TensorOptions(device).dtype(type);
        const auto cl = at::MemoryFormat::ChannelsLast;
        const auto x = at::randn({batch, channels, side, side}, opts).contiguous(cl);
        const auto r = residual ? at::randn_like(x) : at::Tensor();
        const auto dy = at::randn_like(x), dy2 = at::randn_like(x);
        nn::BatchNorm2d bn(channels);
        trainkit::layers::BatchNormReLU2d fused(channels);
        bn->to(device), fused->to(device);
        const auto xg = x.detach().requires_grad_(true);
        const auto rg = residual ? r.detach().requires_grad_(true) : r;
        const auto plain = [&] {
          auto y = bn(xg);
          torch::relu(residual ? y + rg : y).backward(dy);
        };
        const auto fast = [&] { fused(xg, rg).backward(dy); };
        const auto plain_two_uses = [&] {
          auto y = bn(xg);
          const auto out = torch::relu(residual ? y + rg : y);
          torch::autograd::backward({out, out}, {dy, dy2});
        };
        const auto fast_fork = [&] {
          const auto [first, second] = fused->forward_fork(xg, rg);
          torch::autograd::backward({first, second}, {dy, dy2});
        };
        const auto fast_forward = [&] {
          torch::NoGradGuard g;
          (void)fused(x, r);
        };
        const auto plain_forward = [&] {
          torch::NoGradGuard g;
          auto y = bn(x);
          (void)torch::relu(residual ? y + r : y);
        };
        const auto aten_stats = [&] { (void)at::batch_norm_stats(x, 1e-5); };
#if TRAINKIT_HAS_FUSED_KERNELS
        const auto stats = [&] { (void)trainkit::layers::detail::fused_stats(x, 1e-5); };
#else
        const auto& stats = aten_stats;
#endif
        // passes over the activations the fused step cannot avoid: forward
        // reads x twice (statistics, then normalise), the residual once, writes
        // y; backward reads dy, y and x, then dy, y and x again or (with a
        // residual) writes its gradient, g, and reads g and x back; then it
        // writes dx. A fork reads dy2 too and always keeps g (in dx's buffer
        // when there is no residual).
        const double passes_fwd = 3 + residual, passes = passes_fwd + 7,
                     passes_fork = passes_fwd + 8;
        const double bytes = double(x.numel()) * double(x.element_size());
        const int iters = 20;
        std::ostringstream f;
        f << "\"case\": \"bn_layer\", \"precision\": \"" << (type == at::kHalf ? "fp16" : "bf16")
          << "\", \"channels\": " << channels << ", \"side\": " << side
          << ", \"residual\": " << (residual ? "true" : "false")
          << ", \"plain_fwd_bwd_ms\": " << time_ms(device, iters, plain)
          << ", \"fused_fwd_bwd_ms\": " << time_ms(device, iters, fast)
          << ", \"plain_two_uses_ms\": " << time_ms(device, iters, plain_two_uses)
          << ", \"fused_fork_ms\": " << time_ms(device, iters, fast_fork)
          << ", \"plain_fwd_ms\": " << time_ms(device, iters, plain_forward)
          << ", \"fused_fwd_ms\": " << time_ms(device, iters, fast_forward)
          << ", \"stats_ms\": " << time_ms(device, iters, stats)
          << ", \"aten_stats_ms\": " << time_ms(device, iters, aten_stats)
          << ", \"memory_limit_stats_ms\": " << bytes / bandwidth * 1e3
          << ", \"memory_limit_fwd_bwd_ms\": " << passes * bytes / bandwidth * 1e3
          << ", \"memory_limit_fork_ms\": " << passes_fork * bytes / bandwidth * 1e3
          << ", \"memory_limit_fwd_ms\": " << passes_fwd * bytes / bandwidth * 1e3;
        bench::report("gpu_bn_layer", f.str());
      }
    }
  }
}

int64_t scaled(int64_t batch, double scale) {
  return std::max<int64_t>(2, static_cast<int64_t>(double(batch) * scale));
}

/// nanoGPT's estimate of a training step's flops per token (6 N + 12 L H Q T,
/// N without the position embedding), as bench/gpu_pytorch.py counts them.
double gpt_flops_per_token(const examples::Gpt& model) {
  const auto& c = model->config;
  double n = 0;
  for (const auto& p : model->parameters()) n += double(p.numel());
  n -= double(model->wpe->weight.numel());
  return 6 * n + 12.0 * double(c.n_layer * c.n_head * (c.n_embd / c.n_head) * c.block_size);
}

struct GptCase {
  std::string name;
  examples::GptConfig config;
  int64_t micro_batch;  ///< sequences per micro-batch, two per step
};

/// examples/gpt.cpp's training: AdamW (0.9, 0.95, weight decay 0.1 off for
/// biases and norms, fused), warm-up + cosine, two micro-batches per step,
/// clipping at norm 1, bf16 autocast; full-length random token batches.
template <class Capture>
void run_gpt(const GptCase& c, const Args& args) {
  constexpr bool graph = std::is_same_v<Capture, capture::CudaGraph>;
  const torch::Device device(args.device);
  const int64_t warm = 5, profiled = 3, accumulate = 2;
  torch::manual_seed(0);
  examples::Gpt model(c.config);
  examples::init_like_nanogpt(model);
  using T = Trainer<optim::AdamW, sched::WarmupCosine, precision::Bf16, accumulate::Every<2>,
                    clip::Norm, parallel::Single, Capture>;
  typename T::Options o{
      .optim = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1, .fused = true},
      .sched = {.warmup_steps = 5, .start_factor = 0.05, .eta_min = 1e-4},
      .clip = {.max_norm = 1.0},
      .param_groups = {params::no_weight_decay()}};
  o.parallel.device = device;
  if constexpr (graph) o.capture.emulate = !device.is_cuda();
  if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) o.optim.fused.reset();
  T trainer(model, o);
  const int64_t B = scaled(c.micro_batch, args.batch_scale), L = c.config.block_size;
  const auto ids = at::TensorOptions(device).dtype(at::kLong);
  std::vector<examples::TokenBatch> distinct;
  for (int i = 0; i < 4; ++i) {
    distinct.push_back({{at::randint(0, c.config.vocab_size, {B, L}, ids),
                         at::randint(0, c.config.vocab_size, {B, L}, ids)},
                        at::ones({B, L}, ids.dtype(at::kBool)),
                        at::full({B}, L, ids)});
  }
  std::vector<examples::TokenBatch> data;
  for (int64_t i = 0; i < accumulate * (warm + args.steps + profiled); ++i)
    data.push_back(distinct[i % distinct.size()]);
  StepTimer timer{warm, args.steps, device};
  KernelProfile profile{warm + args.steps, profiled, device};
  trainer.fit(examples::LanguageModelling{}, data, {.epochs = 1}, timer, profile);
  const double s = timer.seconds() / double(args.steps);
  const double tokens_per_s = double(accumulate * B * L) / s;
  std::ostringstream f;
  f << "\"case\": \"" << c.name << "\", \"precision\": \"bf16\", \"mode\": \""
    << (graph ? "graph" : "eager") << "\", \"device\": \"" << device.str()
    << "\", \"batch\": " << accumulate * B << ", \"ms_per_step\": " << s * 1e3
    << ", \"samples_per_s\": " << double(accumulate * B) / s
    << ", \"tokens_per_s\": " << tokens_per_s << profile.fields;
  if constexpr (graph) {
    f << ", \"graph\": "
      << nlohmann::json(trainer.graph_recorded() ? "recorded" : trainer.graph_fallback_reason())
             .dump();
  }
  if (args.peak_flops > 0)
    f << ", \"mfu\": " << gpt_flops_per_token(model) * tokens_per_s / args.peak_flops;
  bench::report("gpu_" + c.name, f.str());
}

/// The data-serving case's samples: one file per CIFAR-10-shaped image
/// (3x32x32 uint8, then a label byte), as bench/gpu_pytorch.py reads them.
constexpr int64_t kImageBytes = 3 * 32 * 32;

void write_image_files(const std::filesystem::path& dir, int64_t n) {
  int64_t have = 0;
  if (std::ifstream done(dir / "done"); done >> have && have >= n) return;
  std::filesystem::create_directories(dir);
  std::mt19937 rng(0);
  std::string bytes(kImageBytes + 1, '\0');
  for (int64_t i = 0; i < n; ++i) {
    for (auto& b : bytes) b = char(rng() & 0xff);
    bytes.back() = char(i % 10);
    std::ofstream(dir / (std::to_string(i) + ".bin"), std::ios::binary) << bytes;
  }
  std::ofstream(dir / "done") << n << "\n";
}

struct ImageFiles {
  std::filesystem::path dir;
  int64_t n;
  int64_t size() const { return n; }
  data::Batch get(int64_t i) const {
    const std::string bytes = io::read_file(dir / (std::to_string(i) + ".bin"));
    auto image = at::empty({3, 32, 32}, at::kByte);
    std::memcpy(image.data_ptr(), bytes.data(), kImageBytes);
    return {image, at::scalar_tensor(int64_t(uint8_t(bytes[kImageBytes])), at::kLong)};
  }
};

/// ResNet-10 (unfused, eager, bf16, fused AdamW) at batch 256 fed by the
/// loader: files read and decoded in `workers` threads, cropped (padding 4),
/// flipped and normalised there, pinned or not; the steps' rate against the
/// same model on batches already in device memory (workers -1).
void run_loader(const Args& args) {
  const torch::Device device(args.device);
  const int64_t batch = scaled(256, args.batch_scale), warm = 5;
  const int64_t n = batch * (warm + args.steps);  // one epoch: no loader restart timed
  write_image_files(args.loader_dir, n);
  const ImageFiles files{args.loader_dir, n};
  const auto augment = data::transforms::Compose(
      data::transforms::RandomCrop{.size = 32, .padding = 4}, data::transforms::HorizontalFlip{},
      data::transforms::Normalize{.mean = {0.49, 0.48, 0.45}, .std = {0.25, 0.24, 0.26}});
  const auto one = [&](int64_t workers, bool pinned) {
    torch::manual_seed(0);
    examples::ResNet10<false> model;
    using T = Trainer<optim::AdamW, sched::Constant, precision::Bf16>;
    typename T::Options o{.optim = {.lr = 1e-3, .weight_decay = 5e-4, .fused = true},
                          .device = {.channels_last = true}};
    o.parallel.device = device;
    if (!TRAINKIT_HAS_FUSED_OPTIMIZERS) o.optim.fused.reset();
    T trainer(model, o);
    StepTimer timer{warm, args.steps, device};
    if (workers < 0) {  // the model's own rate: batches already on the device
      std::vector<data::Batch> data;
      for (int64_t i = 0; i < warm + args.steps; ++i) {
        data.push_back({at::randn({batch, 3, 32, 32}, device),
                        at::randint(0, 10, {batch}, at::TensorOptions(device).dtype(at::kLong))});
      }
      trainer.fit(task::Classification{}, data, {.epochs = 1}, timer);
    } else {
      data::Loader loader(files, data::RandomSampler({.size = n, .seed = 1}),
                          {.batch_size = batch,
                           .workers = workers,
                           .drop_last = true,
                           .device = device,
                           .pin_memory = pinned,
                           .transform = augment});
      trainer.fit(task::Classification{}, loader, {.epochs = 1}, timer);
    }
    const double s = timer.seconds() / double(args.steps);
    std::ostringstream f;
    f << "\"case\": \"loader\", \"precision\": \"bf16\", \"mode\": \"loader\", \"workers\": "
      << workers << ", \"pin_memory\": " << (pinned ? "true" : "false") << ", \"device\": \""
      << device.str() << "\", \"batch\": " << batch << ", \"ms_per_step\": " << s * 1e3
      << ", \"samples_per_s\": " << double(batch) / s;
    bench::report("gpu_loader", f.str());
  };
  one(-1, false);
  for (const int64_t workers : {0, 2, 4, 8})
    for (const bool pinned : {true, false}) one(workers, pinned);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"trainkit's GPU benchmarks, one JSON line per case and mode"};
  app.add_option("--device", args.device, "cuda, or cpu for a smoke run")->capture_default_str();
  app.add_option("--cases", args.cases)
      ->delimiter(',')
      ->check(CLI::IsMember(kCases))
      ->capture_default_str();
  app.add_option("--steps", args.steps, "timed steps per case")->capture_default_str();
  app.add_option("--batch-scale", args.batch_scale, "the batch sizes scaled by this")
      ->capture_default_str();
  app.add_option("--peak-flops", args.peak_flops, "the device's peak FLOP/s, for MFU (0: none)")
      ->capture_default_str();
  app.add_option("--loader-dir", args.loader_dir, "where the loader case writes its sample files")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const bool cuda = torch::Device(args.device).is_cuda();
  const auto wants = [&](const std::string& name) {
    return std::find(args.cases.begin(), args.cases.end(), name) != args.cases.end();
  };
  if (wants("resnet10")) {
    // fp16 needs CUDA autocast; a CPU smoke run trains in bf16 only.
    for (const char* p : {"fp16", "bf16"}) {
      if (!cuda && std::strcmp(p, "fp16") == 0) continue;
      const std::vector<int64_t> shape{scaled(2048, args.batch_scale), 3, 32, 32};
      run_modes<examples::ResNet10<false>>({"resnet10", p, shape, 10, true}, args);
      run_modes<examples::ResNet10<true>>({"resnet10", p, shape, 10, true, "fused"}, args);
    }
  }
  if (wants("bn_layers") && cuda)
    bn_layers(args, 3.0e12);  // the H100's copy rate, docs/benchmarks.md
  if (wants("mlp")) run_modes<TinyMlp>({"mlp", "fp32", {32, 32}}, args);
  if (wants("transformer")) {
    run_modes<SmallTransformer>({"transformer", "fp32", {8, 32, 128}}, args);
  }
  if (wants("gpt")) {
    // examples/gpt.cpp's default model, and nanoGPT's Shakespeare-character one
    const std::vector<GptCase> gpts{
        {"gpt", {.vocab_size = 32, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128}, 32},
        {"gpt_char",
         {.vocab_size = 65, .block_size = 256, .n_layer = 6, .n_head = 6, .n_embd = 384},
         32}};
    for (const auto& c : gpts) {
      run_gpt<capture::None>(c, args);
      run_gpt<capture::CudaGraph>(c, args);
    }
  }
  if (wants("loader")) run_loader(args);
  return 0;
}
