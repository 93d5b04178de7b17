// Cost of logging: steps/s of the demo's training (SmallCnn on glyphs,
// AdamW + OneCycle, batch 64) with no callbacks, and with TensorBoard +
// JsonLines + Throughput logging every step and every 10 steps. Runs are
// interleaved and the median kept; the ratios are against the run without
// callbacks measured in the same process.
#include <torch/torch.h>
#include <trainkit/callbacks.hpp>
#include <trainkit/io.hpp>
#include <trainkit/trainkit.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "../examples/glyphs.hpp"
#include "../examples/models.hpp"
#include "bench_util.hpp"

using namespace trainkit;

namespace {

using DemoTrainer = Trainer<optim::AdamW, sched::OneCycle>;

template <class... Callbacks>
double steps_per_second(const data::TensorBatches& batches, int64_t log_every,
                        Callbacks&... callbacks) {
  torch::manual_seed(0);
  DemoTrainer trainer(SmallCnn(), {.optim = {.lr = 3e-3}, .sched = {.max_lr = 3e-3}});
  const auto start = std::chrono::steady_clock::now();
  const auto result = trainer.fit(task::Classification{}, batches,
                                  {.epochs = 1, .log_every = log_every}, callbacks...);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return double(result.steps) / seconds;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  const auto dir = std::filesystem::temp_directory_path() / "trainkit_bench_logging";
  const auto images = examples::make_glyphs(64 * 150, 1);
  data::TensorBatches batches(images, {.batch_size = 64});
  auto loggers = [&] {
    return std::make_tuple(callbacks::Throughput{}, callbacks::TensorBoard({.dir = dir / "tb"}),
                           callbacks::JsonLines({.path = dir / "log.jsonl"}));
  };
  auto with_loggers = [&](int64_t log_every) {
    auto fresh = loggers();
    return std::apply([&](auto&... cb) { return steps_per_second(batches, log_every, cb...); },
                      fresh);
  };
  steps_per_second(batches, 10);  // warm up
  std::vector<double> none, every_step, every_10;
  for (int r = 0; r < 7; ++r) {
    none.push_back(steps_per_second(batches, 10));
    every_step.push_back(with_loggers(1));
    every_10.push_back(with_loggers(10));
  }
  const double base = median(none), one = median(every_step), ten = median(every_10);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "\"threads\": %d, \"steps_per_epoch\": %zu, \"no_callbacks_steps_per_s\": %.1f, "
                "\"log_every_1_steps_per_s\": %.1f, \"log_every_10_steps_per_s\": %.1f, "
                "\"slowdown_every_1_pct\": %.2f, \"slowdown_every_10_pct\": %.2f",
                at::get_num_threads(), batches.size(), base, one, ten, (base / one - 1) * 100,
                (base / ten - 1) * 100);
  bench::report("logging_cost_demo", buf);
  std::filesystem::remove_all(dir);
}
