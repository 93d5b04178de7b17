// optim::AdamW (flat, fused) vs torch::optim::AdamW: step time on 200 small
// tensors, closeness after 10 steps, and on 4 x 4M elements the step time
// against the machine's memory-bandwidth bound, measured here with an
// in-place add on every core; and callbacks::Ema's update against the
// AdamW step on the same parameters; and the optimizers without a one-pass
// CPU kernel (Lamb, Lars, ScheduleFreeAdamW) against AdamW's.
#include <torch/torch.h>
#include <trainkit/callbacks/ema.hpp>
#include <trainkit/optim.hpp>

#include <algorithm>
#include <cstring>
#include <thread>

#include "bench_util.hpp"

using namespace trainkit;

namespace {

struct Setup {
  std::vector<at::Tensor> ours, theirs;
};

Setup make(int64_t tensors, int64_t numel) {
  torch::manual_seed(0);
  Setup s;
  for (int64_t i = 0; i < tensors; ++i) {
    auto t = torch::randn({numel});
    s.ours.push_back(t.clone().requires_grad_(true));
    s.theirs.push_back(t.clone().requires_grad_(true));
  }
  return s;
}

void set_grads(Setup& s, int seed) {
  torch::manual_seed(seed);
  for (size_t i = 0; i < s.ours.size(); ++i) {
    auto g = torch::randn_like(s.ours[i]);
    s.ours[i].mutable_grad().copy_(g);
    s.theirs[i].mutable_grad() = g.clone();
  }
}

int64_t max_ulp(const Setup& s) {
  int64_t worst = 0;
  for (size_t i = 0; i < s.ours.size(); ++i) {
    const auto a = s.ours[i].detach().view(at::kInt).to(at::kLong);
    const auto b = s.theirs[i].detach().view(at::kInt).to(at::kLong);
    worst = std::max(worst, (a - b).abs().max().item<int64_t>());
  }
  return worst;
}

void small_tensors() {
  auto s = make(200, 1000);
  FlatParams flat(s.ours);
  optim::AdamW ours(flat, {.lr = 1e-3, .weight_decay = 0.01});
  torch::optim::AdamW theirs(s.theirs, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  for (int step = 0; step < 10; ++step) {
    set_grads(s, step);
    ours.step();
    theirs.step();
  }
  const int64_t ulp = max_ulp(s);
  const double t_ours = bench::seconds_per_call([&] { ours.step(); }, 2000);
  const double t_theirs = bench::seconds_per_call([&] { theirs.step(); }, 200);
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "\"tensors\": 200, \"numel\": 1000, \"trainkit_us\": %.2f, \"torch_optim_us\": %.2f, "
      "\"speedup\": %.1f, \"max_ulp_after_10_steps\": %lld",
      t_ours * 1e6, t_theirs * 1e6, t_theirs / t_ours, (long long)ulp);
  bench::report("adamw_200_small", buf);
}

void large_tensors() {
  const int64_t n = 4 * 1024 * 1024;
  auto s = make(4, n);
  FlatParams flat(s.ours);
  optim::AdamW ours(flat, {.lr = 1e-3, .weight_decay = 0.01});
  torch::optim::AdamW theirs(s.theirs, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  set_grads(s, 0);
  // The bound is the machine's memory bandwidth: an in-place add (every
  // written line was read first, as in AdamW; a copy's writes also cost a
  // read-for-ownership) on every core. One core's add is no bound: with 3
  // streams it moves less than AdamW's 7 streams do on the same core.
  // Its two arrays span AdamW's four (parameters, gradients, two moments),
  // so caches help the probe no more than the step.
  const int64_t probe_n = 2 * 4 * n;
  auto a = torch::randn({probe_n}), b = torch::randn({probe_n});
  const int threads = at::get_num_threads();
  at::set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
  const int probe_threads = at::get_num_threads();
  const double t_add = bench::seconds_per_call([&] { a.add_(b); }, 10);
  at::set_num_threads(threads);
  const double bandwidth = 3.0 * probe_n * sizeof(float) / t_add;  // a += b: 2 reads + 1 write
  const double bound = 7.0 * 4 * n * sizeof(float) / bandwidth;    // AdamW: 4 reads + 3 writes
  const double t_ours = bench::seconds_per_call([&] { ours.step(); }, 10);
  const double t_theirs = bench::seconds_per_call([&] { theirs.step(); }, 5);
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "\"tensors\": 4, \"numel\": %lld, \"rmw_GBps\": %.1f, \"probe_threads\": %d, "
                "\"bound_ms\": %.2f, "
                "\"trainkit_ms\": %.2f, \"torch_optim_ms\": %.2f, \"trainkit_vs_bound\": %.2f, "
                "\"speedup\": %.1f",
                (long long)n, bandwidth / 1e9, probe_threads, bound * 1e3, t_ours * 1e3,
                t_theirs * 1e3, t_ours / bound, t_theirs / t_ours);
  bench::report("adamw_4_large", buf);
}

/// A module of `tensors` random parameters of `numel` elements each.
std::shared_ptr<torch::nn::Module> random_model(int64_t tensors, int64_t numel) {
  auto model = std::make_shared<torch::nn::Module>();
  torch::manual_seed(0);
  for (int64_t i = 0; i < tensors; ++i) {
    std::string name = "p";  // not "p" + to_string(i): GCC 12's -Wrestrict false positive
    name += std::to_string(i);
    model->register_parameter(name, torch::randn({numel}));
  }
  return model;
}

// callbacks::Ema's update (a lerp per flat buffer) against the AdamW step on
// the same parameters: one update every step, and every 4th step.
void ema_vs_adamw(const char* name, int64_t tensors, int64_t numel, int iters) {
  const auto model = random_model(tensors, numel);
  FlatParams flat(*model);
  for (auto& g : flat.groups()) g.grad.normal_();
  optim::AdamW adamw(flat, {.lr = 1e-3, .weight_decay = 0.01});
  TrainState state(*model);
  callbacks::Ema ema({.decay = 0.999});
  ema.on_fit_begin(state);
  state.step = 1000;  // past the first update, which copies
  const double t_adamw = bench::seconds_per_call([&] { adamw.step(); }, iters);
  const double t_ema = bench::seconds_per_call([&] { ema.on_step_end(state); }, iters);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "\"tensors\": %lld, \"numel\": %lld, \"update_ops\": %lld, \"adamw_ms\": %.3f, "
                "\"ema_ms\": %.3f, \"ema_vs_adamw\": %.3f, \"ema_every_4_vs_adamw\": %.3f",
                (long long)tensors, (long long)numel, (long long)ema.fused_updates(), t_adamw * 1e3,
                t_ema * 1e3, t_ema / t_adamw, t_ema / 4 / t_adamw);
  bench::report(name, buf);
}

// Lamb, Lars and ScheduleFreeAdamW run sequences of ATen ops where AdamW has
// trainkit's one-pass CPU kernel: their step time against AdamW's on the
// same parameters, and the fewest streams over the buffers each needs
// (reads + writes of parameter-sized arrays; AdamW's kernel moves 7), which
// bounds what a one-pass kernel of theirs could save.
void without_kernels(const char* name, int64_t tensors, int64_t numel, int iters) {
  const auto model = random_model(tensors, numel);
  FlatParams flat(*model);
  for (auto& g : flat.groups()) g.grad.normal_();
  const auto time = [&](auto& optimizer) {
    return bench::seconds_per_call([&] { optimizer.step(); }, iters);
  };
  optim::AdamW adamw(flat, {.lr = 1e-3, .weight_decay = 0.01});
  optim::Lamb lamb(flat, {});
  optim::Lars lars(flat, {});
  optim::ScheduleFreeAdamW schedule_free(flat, {.weight_decay = 0.01});
  const double t_adamw = time(adamw), t_lamb = time(lamb), t_lars = time(lars),
               t_sf = time(schedule_free);
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "\"tensors\": %lld, \"numel\": %lld, \"adamw_ms\": %.3f, \"lamb_ms\": %.3f, "
                "\"lars_ms\": %.3f, \"schedule_free_ms\": %.3f, \"lamb_vs_adamw\": %.2f, "
                "\"lars_vs_adamw\": %.2f, \"schedule_free_vs_adamw\": %.2f, "
                "\"fewest_streams\": {\"adamw\": 7, \"lamb\": 10, \"lars\": 7, "
                "\"schedule_free\": 7}",
                (long long)tensors, (long long)numel, t_adamw * 1e3, t_lamb * 1e3, t_lars * 1e3,
                t_sf * 1e3, t_lamb / t_adamw, t_lars / t_adamw, t_sf / t_adamw);
  bench::report(name, buf);
}

}  // namespace

int main() {
  std::printf("# threads: %d\n", at::get_num_threads());
  small_tensors();
  large_tensors();
  ema_vs_adamw("ema_200_small", 200, 1000, 200);
  ema_vs_adamw("ema_4_large", 4, 4 * 1024 * 1024, 10);
  // the GPT example's size (106K parameters, as bench_time_to_target's), and large buffers
  without_kernels("without_kernels_gpt_size", 12, 8868, 500);
  without_kernels("without_kernels_4_large", 4, 4 * 1024 * 1024, 10);
}
