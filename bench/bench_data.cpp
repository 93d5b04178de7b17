// Data pipeline benchmarks.
// 1. Hiding the loading cost: a dataset whose samples cost ~0.2 ms of CPU work
//    each (a decode stand-in) and a model whose step costs about as much as
//    loading its batch. Epoch time with 0 and 2 workers against
//    max(load time, compute time) measured alone in the same run.
// 2. Gathering in-memory batches with one index_select vs stacking samples
//    one by one through LibTorch's torch::data loader (50k x 3x32x32 uint8).
#include <torch/torch.h>
#include <trainkit/data.hpp>
#include <trainkit/trainkit.hpp>

#include <chrono>
#include <cmath>

#include "bench_util.hpp"

using namespace trainkit;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Each sample is "decoded" by `rounds` passes of transcendental math over
/// 3x32x32 values: CPU work that scales with the sample, like JPEG decoding.
struct DecodeLike {
  int64_t n = 2048;
  int rounds = 1;
  int64_t size() const { return n; }
  data::Batch get(int64_t i) const {
    auto img = at::empty({3, 32, 32}, at::kFloat);
    float* p = img.data_ptr<float>();
    for (int64_t k = 0; k < 3 * 32 * 32; ++k) {
      float v = float(i * 31 + k);
      for (int r = 0; r < rounds; ++r) v = std::sin(v) * 0.5f + std::cos(v * 0.37f);
      p[k] = v;
    }
    return {img, torch::tensor(i % 10)};
  }
};

void hide_loading() {
  // calibrate: ~0.2 ms per sample
  int rounds = 1;
  for (;; rounds *= 2) {
    DecodeLike probe{.n = 64, .rounds = rounds};
    const auto t = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < 64; ++i) probe.get(i);
    if (seconds_since(t) / 64 >= 0.2e-3 || rounds > 4096) break;
  }
  const DecodeLike dataset{.n = 2048, .rounds = rounds};
  const int64_t batch = 32;
  auto make_loader = [&](int64_t workers) {
    return std::make_unique<data::Loader<DecodeLike, data::RandomSampler>>(
        dataset, data::RandomSampler({.size = dataset.n, .seed = 1}),
        data::LoaderOptions{.batch_size = batch, .workers = workers, .prefetch = 4});
  };
  // load alone
  auto t = std::chrono::steady_clock::now();
  {
    auto loader = make_loader(0);
    for (const auto& b : *loader) (void)b;
  }
  const double load = seconds_since(t);
  const int64_t steps = dataset.n / batch;
  // a model whose step costs about what loading its batch costs
  int64_t hidden = 256;
  auto make_trainer = [&] {
    torch::manual_seed(0);
    return std::make_unique<Trainer<optim::AdamW>>(torch::nn::Sequential(
        torch::nn::Flatten(), torch::nn::Linear(3072, hidden), torch::nn::ReLU(),
        torch::nn::Linear(hidden, hidden), torch::nn::ReLU(), torch::nn::Linear(hidden, 10)));
  };
  const auto fixed = dataset.get(0);
  std::vector<data::Batch> same(
      steps, data::Batch{fixed.input.unsqueeze(0).expand({batch, 3, 32, 32}).contiguous(),
                         torch::zeros({batch}, at::kLong)});
  double compute = 0;
  for (int tries = 0; tries < 8; ++tries) {
    auto trainer = make_trainer();
    trainer->fit(task::Classification{}, same, {.epochs = 1});  // warm up
    t = std::chrono::steady_clock::now();
    trainer->fit(task::Classification{}, same, {.epochs = 1});
    compute = seconds_since(t);
    if (compute >= 0.8 * load) break;
    hidden = int64_t(double(hidden) * std::sqrt(load / compute) * 1.05);
  }
  double epoch[3] = {0, 0, 0};
  const int64_t worker_counts[3] = {0, 1, 2};
  for (int i = 0; i < 3; ++i) {
    auto loader = make_loader(worker_counts[i]);
    auto trainer = make_trainer();
    t = std::chrono::steady_clock::now();
    trainer->fit(task::Classification{}, *loader, {.epochs = 1});
    epoch[i] = seconds_since(t);
  }
  const double bound = std::max(load, compute);
  char buf[400];
  std::snprintf(
      buf, sizeof buf,
      "\"ms_per_sample\": %.3f, \"load_s\": %.2f, \"compute_s\": %.2f, "
      "\"epoch_0_workers_s\": %.2f, \"epoch_1_worker_s\": %.2f, \"epoch_2_workers_s\": %.2f, "
      "\"two_workers_vs_bound\": %.2f, \"zero_vs_two\": %.2f",
      load / dataset.n * 1e3, load, compute, epoch[0], epoch[1], epoch[2], epoch[2] / bound,
      epoch[0] / epoch[2]);
  bench::report("hide_loading", buf);
}

void gather_vs_stack() {
  const int64_t n = 50000, batch = 128;
  auto gen = data::generator(0);
  const auto images = at::randint(0, 256, {n, 3, 32, 32}, gen, at::kByte);
  const auto labels = at::randint(0, 10, {n}, gen, at::kLong);
  data::Loader gather(data::TensorDataset{images, labels},
                      data::RandomSampler({.size = n, .seed = 1}), {.batch_size = batch});
  auto t = std::chrono::steady_clock::now();
  int64_t count = 0;
  for (const auto& b : gather) count += b.size();
  const double gather_s = seconds_since(t);

  auto stacked = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      torch::data::datasets::TensorDataset(images).map(
          torch::data::transforms::Stack<torch::data::TensorExample>()),
      torch::data::DataLoaderOptions().batch_size(batch));
  t = std::chrono::steady_clock::now();
  int64_t count2 = 0;
  for (auto& b : *stacked) count2 += b.data.size(0);
  const double stack_s = seconds_since(t);
  char buf[300];
  std::snprintf(buf, sizeof buf,
                "\"samples\": %lld, \"batch\": %lld, \"gather_batches_per_s\": %.0f, "
                "\"torch_data_stack_batches_per_s\": %.0f, \"ratio\": %.1f",
                (long long)count, (long long)batch, double(count) / batch / gather_s,
                double(count2) / batch / stack_s, stack_s / gather_s);
  bench::report("gather_vs_stack_50k_cifar_like", buf);
}

}  // namespace

int main() {
  hide_loading();
  gather_vs_stack();
}
