// Trainer overhead: the tiny MLP (32-64-10, batch 32) trained by
// Trainer<AdamW> vs a hand-written LibTorch loop doing the same work with the
// same flat optimizer (and, for context, with torch::optim::AdamW). Runs are
// interleaved and the median kept. With --pagefaults, reports minor page
// faults per step of a small CNN (run once with keep, once with default).
// With --anchor, steps/s of Trainer<AdamW> on the tiny MLP and the demo CNN,
// the C++ side of bench/anchor_pytorch.py (bench/anchor.sh compares them).
#include <torch/torch.h>
#include <trainkit/trainkit.hpp>

#include <cstring>

#include "../examples/glyphs.hpp"
#include "../examples/models.hpp"
#include "bench_util.hpp"

using namespace trainkit;

namespace {

constexpr int kSteps = 2000;

std::vector<data::Batch> make_batches(int64_t count, int64_t batch, int64_t in, int64_t classes) {
  torch::manual_seed(1);
  std::vector<data::Batch> out;
  for (int64_t i = 0; i < count; ++i) {
    out.push_back({torch::randn({batch, in}), torch::randint(0, classes, {batch})});
  }
  return out;
}

/// Cycles through `batches` for exactly `steps` batches (a range for fit).
struct Cycle {
  const std::vector<data::Batch>* batches;
  int64_t steps;
  struct iterator {
    const Cycle* c;
    int64_t i;
    const data::Batch& operator*() const { return (*c->batches)[i % c->batches->size()]; }
    iterator& operator++() { return ++i, *this; }
    bool operator==(const iterator& o) const { return i == o.i; }
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, steps}; }
  int64_t size() const { return steps; }
};

double hand_loop_flat(const std::vector<data::Batch>& batches) {
  torch::manual_seed(0);
  Mlp model(32, 64, 10);
  FlatParams flat(*model);
  optim::AdamW opt(flat, {.lr = 1e-3});
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < kSteps; ++i) {
    const auto& b = batches[i % batches.size()];
    auto loss = torch::nn::functional::cross_entropy(model->forward(b.input), b.target);
    loss.backward();
    opt.step();
    flat.zero_grad();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kSteps;
}

double hand_loop_torch_optim(const std::vector<data::Batch>& batches) {
  torch::manual_seed(0);
  Mlp model(32, 64, 10);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < kSteps; ++i) {
    const auto& b = batches[i % batches.size()];
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(b.input), b.target);
    loss.backward();
    opt.step();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kSteps;
}

double trainer_loop(const std::vector<data::Batch>& batches) {
  torch::manual_seed(0);
  Trainer<optim::AdamW> trainer(Mlp(32, 64, 10), {.optim = {.lr = 1e-3}});
  const auto start = std::chrono::steady_clock::now();
  trainer.fit(task::Classification{}, Cycle{&batches, kSteps}, {.epochs = 1});
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / kSteps;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

void overhead() {
  const auto batches = make_batches(64, 32, 32, 10);
  std::vector<double> hand, trainer, torch_optim;
  for (int r = 0; r < 9; ++r) {
    hand.push_back(hand_loop_flat(batches));
    trainer.push_back(trainer_loop(batches));
    torch_optim.push_back(hand_loop_torch_optim(batches));
  }
  const double h = median(hand), t = median(trainer), o = median(torch_optim);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "\"threads\": %d, \"hand_flat_us\": %.1f, \"trainer_us\": %.1f, "
                "\"hand_torch_optim_us\": %.1f, \"trainer_overhead_pct\": %.2f, "
                "\"trainer_steps_per_s\": %.0f, \"trainer_vs_torch_optim_loop\": %.2f",
                at::get_num_threads(), h * 1e6, t * 1e6, o * 1e6, (t / h - 1.0) * 100.0, 1.0 / t,
                o / t);
  bench::report("trainer_overhead_tiny_mlp", buf);
}

void page_faults(bool keep) {
  const auto images = examples::make_glyphs(64 * 20, 1);
  data::TensorBatches batches(images, {.batch_size = 64});
  torch::manual_seed(0);
  Trainer<optim::AdamW> trainer(SmallCnn(), {.keep_freed_cpu_memory = keep});
  trainer.fit(task::Classification{}, batches, {.epochs = 1});  // warm up
  const long before = bench::minor_page_faults();
  const auto start = std::chrono::steady_clock::now();
  trainer.fit(task::Classification{}, batches, {.epochs = 5});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double steps = 5.0 * double(batches.size());
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "\"keep_freed_cpu_memory\": %s, \"faults_per_step\": %.0f, "
                "\"steps_per_s\": %.1f",
                keep ? "true" : "false", double(bench::minor_page_faults() - before) / steps,
                steps / seconds);
  bench::report("page_faults_small_cnn", buf);
}

/// Steps per second of Trainer<AdamW> on `model` over `batches`, median of 5.
template <class Model>
double trainer_steps_per_s(Model model, const std::vector<data::Batch>& batches, int64_t steps) {
  Trainer<optim::AdamW> trainer(model, {.optim = {.lr = 1e-3}});
  trainer.fit(task::Classification{}, Cycle{&batches, 3}, {.epochs = 1});  // warm up
  std::vector<double> rates;
  for (int r = 0; r < 5; ++r) {
    const auto start = std::chrono::steady_clock::now();
    trainer.fit(task::Classification{}, Cycle{&batches, steps}, {.epochs = 1});
    rates.push_back(
        double(steps) /
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return median(rates);
}

void anchor() {
  torch::manual_seed(0);
  const double mlp = trainer_steps_per_s(Mlp(32, 64, 10), make_batches(16, 32, 32, 10), kSteps);
  std::vector<data::Batch> images;
  for (const auto& b : make_batches(16, 64, 28 * 28, 10))
    images.push_back({b.input.view({64, 1, 28, 28}), b.target});
  torch::manual_seed(0);
  const double cnn = trainer_steps_per_s(SmallCnn(), images, 60);
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "\"threads\": %d, \"torch\": \"%d.%d\", \"tiny_mlp_steps_per_s\": %.1f, "
                "\"demo_cnn_steps_per_s\": %.1f",
                at::get_num_threads(), TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, mlp, cnn);
  bench::report("anchor_trainkit", buf);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--anchor") == 0) {
    anchor();
    return 0;
  }
  if (argc == 3 && std::strcmp(argv[1], "--pagefaults") == 0) {
    page_faults(std::strcmp(argv[2], "keep") == 0);
    return 0;
  }
  overhead();
}
